package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// appliedHalfway serves, on the real PromQL engine, d of the recommender's series for
// namespace ml up to noon on 2026-11-30, every 15 s: 4 pods at one GPU each throughout,
// and gpufrac's fractions (1.5 whole-GPU equivalents) from switchAt, halfway.
func appliedHalfway(t *testing.T, d time.Duration) (s *promtest.Server, until, start time.Time, step time.Duration, n int, switchAt time.Time) {
	s = promtest.New(t)
	until = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start = until.Add(-d)
	step = 15 * time.Second
	n = int(d/step) + 1
	half := n / 2
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(4, n)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "ml", "autoscaler": "sd"}, start, step,
		append(promtest.Repeat(4, half), promtest.Repeat(1.5, n-half)...)...)
	return s, until, start, step, n, start.Add(time.Duration(half) * step)
}

// Two hours of the recommender's series on the real PromQL engine: 4 pods at one GPU each
// throughout; gpufrac's fractions land after an hour (1.5 whole-GPU equivalents), and a
// second namespace that stays at whole GPUs. The report finds when applying began, the
// means since then, the GPU-hours saved and the peak-memory utilisation before and after.
func TestBeforeAfterFromPrometheus(t *testing.T) {
	s, until, start, step, n, switchAt := appliedHalfway(t, 2*time.Hour)
	gib := float64(1 << 30)
	s.Add(t, map[string]string{"__name__": seriesPeak, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(60*gib, n)...)
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "other", "autoscaler": "x"}, start, step, promtest.Repeat(2, n)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "other", "autoscaler": "x"}, start, step, promtest.Repeat(2, n)...)
	s.Add(t, map[string]string{"__name__": seriesGPUMemory}, start, step, promtest.Repeat(80*gib, n)...)

	var warn bytes.Buffer
	ba, err := queryBeforeAfter(context.Background(), s.URL, "ml", 2*time.Hour, until, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if ba.ApplyingSince == nil {
		t.Fatal("no applying-since date")
	}
	if d := ba.ApplyingSince.Sub(switchAt); d < 0 || d > ba.Step {
		t.Errorf("applying since %s, want within a step after %s", ba.ApplyingSince, switchAt)
	}
	if ba.MeanOnePerPod != 4 || ba.MeanAllocated != 1.5 {
		t.Errorf("means %v → %v, want 4 → 1.5 (namespace ml only, since applying began)", ba.MeanOnePerPod, ba.MeanAllocated)
	}
	if math.Abs(ba.SavedGPUHours-2.5) > 2*2.5*ba.Step.Hours() { // a sample either side of the switch
		t.Errorf("saved %.3f GPU-hours, want 2.5 (2.5 GPUs for one hour)", ba.SavedGPUHours)
	}
	last := ba.Points[len(ba.Points)-1]
	if math.Abs(ptr.Deref(last.MemoryUtilisationOnePerPod, -1)-60.0/320) > 1e-9 || math.Abs(ptr.Deref(last.MemoryUtilisationAllocated, -1)-60.0/120) > 1e-9 {
		t.Errorf("utilisation %v → %v, want 60/320 → 60/120", ptr.Deref(last.MemoryUtilisationOnePerPod, -1), ptr.Deref(last.MemoryUtilisationAllocated, -1))
	}
	var out bytes.Buffer
	if err := writeBeforeAfter(&out, ba, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "gpufrac applying since "+ba.ApplyingSince.Format(time.RFC3339)) || !strings.Contains(out.String(), "4.0 GPUs at one per pod → 1.5 allocated") {
		t.Errorf("report:\n%s", out.String())
	}
	if warn.Len() != 0 {
		t.Errorf("warnings: %s", warn.String())
	}

	// Every namespace: the other namespace's 2 whole GPUs add to both sides.
	all, err := queryBeforeAfter(context.Background(), s.URL, "", 2*time.Hour, until, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if all.MeanOnePerPod != 6 || all.MeanAllocated != 3.5 {
		t.Errorf("all namespaces: %v → %v, want 6 → 3.5", all.MeanOnePerPod, all.MeanAllocated)
	}
}

// A long window over a short application: the table's step is 42 minutes for 7 days,
// but gpufrac applied only in the last 5 minutes (2.5 GPUs saved, 4 → 1.5). The GPU-hours
// saved are those 5 minutes' (about 0.21), not a whole step's (1.75), and applying
// began at the switch, not at the last step; the means are 4 → 1.5.
func TestBeforeAfterLongWindowShortApplication(t *testing.T) {
	s, until, _, _, _, switchAt := appliedHalfway(t, 10*time.Minute)

	var warn bytes.Buffer
	ba, err := queryBeforeAfter(context.Background(), s.URL, "", 7*24*time.Hour, until, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if ba.Step < 40*time.Minute {
		t.Fatalf("table step %s: the case needs a step far above the application's length", ba.Step)
	}
	if ba.ApplyingSince == nil || ba.ApplyingSince.Before(switchAt) || ba.ApplyingSince.Sub(switchAt) > SavingsResolution {
		t.Errorf("applying since %v, want within %s after %s", ba.ApplyingSince, SavingsResolution, switchAt)
	}
	want := 2.5 * until.Sub(switchAt).Hours()
	if math.Abs(ba.SavedGPUHours-want) > 2.5*SavingsResolution.Hours()+1e-9 {
		t.Errorf("saved %.3f GPU-hours, want %.3f (2.5 GPUs for %s) within one resolution step", ba.SavedGPUHours, want, until.Sub(switchAt))
	}
	if ba.MeanOnePerPod != 4 || ba.MeanAllocated != 1.5 {
		t.Errorf("means %v → %v, want 4 → 1.5 since applying began", ba.MeanOnePerPod, ba.MeanAllocated)
	}
}

// No series is not zero GPUs: the report says what is missing, as it does for a missing
// --prometheus-url and for a failing Prometheus; a partial answer is flagged.
func TestBeforeAfterErrors(t *testing.T) {
	s := promtest.New(t)
	until := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var warn bytes.Buffer
	if _, err := queryBeforeAfter(context.Background(), s.URL, "", time.Hour, until, &warn); err == nil || !strings.Contains(err.Error(), "no "+seriesHeld) {
		t.Errorf("empty Prometheus: %v", err)
	}
	if _, err := queryBeforeAfter(context.Background(), "", "", time.Hour, until, &warn); err == nil || !strings.Contains(err.Error(), "--prometheus-url") {
		t.Errorf("no URL: %v", err)
	}
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "ml", "autoscaler": "sd"}, until.Add(-time.Hour), time.Minute, promtest.Repeat(1, 61)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "ml", "autoscaler": "sd"}, until.Add(-time.Hour), time.Minute, promtest.Repeat(1, 61)...)
	s.SetWarnings([]string{"store gateway down"})
	if _, err := queryBeforeAfter(context.Background(), s.URL, "", time.Hour, until, &warn); err != nil || !strings.Contains(warn.String(), "store gateway down") {
		t.Errorf("partial answer: err %v, warnings %q", err, warn.String())
	}
	s.SetWarnings(nil)
	s.SetFailure(context.DeadlineExceeded)
	if _, err := queryBeforeAfter(context.Background(), s.URL, "", time.Hour, until, &warn); err == nil || !strings.Contains(err.Error(), "querying Prometheus") {
		t.Errorf("failing Prometheus: %v", err)
	}
}

// Without the peak-memory or GPU-memory series (a recommender that exports neither, or
// a Prometheus that dropped them), the before/after still prints: the utilisation of
// those instants is unknown, "-" in the table and null in JSON, not 0 and not a NaN
// that JSON cannot encode.
func TestBeforeAfterWithoutPeakSeries(t *testing.T) {
	gib := float64(1 << 30)
	for _, c := range []struct {
		name             string
		peak, gpuMemory  bool
		wantUtilisations bool
	}{
		{"no peak, no GPU memory", false, false, false},
		{"peak, no GPU memory", true, false, false},
		{"GPU memory, no peak", false, true, false},
		{"both", true, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, until, start, step, n, _ := appliedHalfway(t, time.Hour)
			if c.peak {
				s.Add(t, map[string]string{"__name__": seriesPeak, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(60*gib, n)...)
			}
			if c.gpuMemory {
				s.Add(t, map[string]string{"__name__": seriesGPUMemory}, start, step, promtest.Repeat(80*gib, n)...)
			}
			var warn bytes.Buffer
			ba, err := queryBeforeAfter(context.Background(), s.URL, "", time.Hour, until, &warn)
			if err != nil {
				t.Fatal(err)
			}
			var js bytes.Buffer
			if err := writeReportJSON(&js, nil, reportTotals{}, ba); err != nil {
				t.Fatalf("JSON: %v", err)
			}
			var got struct {
				BeforeAfter struct {
					Points []map[string]any `json:"points"`
				} `json:"beforeAfter"`
			}
			if err := json.Unmarshal(js.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.BeforeAfter.Points) == 0 {
				t.Fatalf("no points: %s", js.String())
			}
			for _, p := range got.BeforeAfter.Points {
				for _, k := range []string{"memoryUtilisationOnePerPod", "memoryUtilisationAllocated"} {
					v, ok := p[k]
					if !ok || (v != nil) != c.wantUtilisations {
						t.Fatalf("%s = %v (present %v), want a number: %v", k, v, ok, c.wantUtilisations)
					}
				}
			}
			var text bytes.Buffer
			if err := writeBeforeAfter(&text, ba, false); err != nil {
				t.Fatal(err)
			}
			row := strings.Fields(strings.Split(text.String(), "\n")[1]) // the first point
			before, after := row[len(row)-2], row[len(row)-1]
			if (before == "-") == c.wantUtilisations || (after == "-") == c.wantUtilisations {
				t.Errorf("utilisation before %s, after %s; want numbers: %v\n%s", before, after, c.wantUtilisations, text.String())
			}
		})
	}
}

// A window longer than the data (a Prometheus retention of 2 hours under --since 7d, or
// the recommender's metrics first scraped while gpufrac already applied): the pods held
// 1.5 whole-GPU equivalents for 4 from the first sample on. The report does not say
// gpufrac started applying at the first sample, nor that the GPU-hours saved cover the 7
// days: it says applying was already under way, from when its figures count, and how
// much of the window has no data.
func TestBeforeAfterWindowLongerThanData(t *testing.T) {
	s := promtest.New(t)
	until := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start, step := until.Add(-2*time.Hour), 15*time.Second
	n := int(2*time.Hour/step) + 1
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(4, n)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(1.5, n)...)

	var warn bytes.Buffer
	ba, err := queryBeforeAfter(context.Background(), s.URL, "", 7*24*time.Hour, until, &warn)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeBeforeAfter(&out, ba, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.Contains(text, "applying since") || !strings.Contains(text, "already applying at the first sample") {
		t.Errorf("the first sample read as the start of applying:\n%s", text)
	}
	if strings.Contains(text, "from "+ba.Since.Format(time.RFC3339)) || !strings.Contains(text, "from "+ba.DataFrom.Format(time.RFC3339)+" to") {
		t.Errorf("GPU-hours saved said to cover the whole window, not from its first sample %s:\n%s", ba.DataFrom.Format(time.RFC3339), text)
	}
	if d := ba.DataFrom.Sub(start); d < 0 || d > SavingsResolution {
		t.Errorf("data from %s, want within %s after %s", ba.DataFrom, SavingsResolution, start)
	}
	if d := ba.DataCovered - 2*time.Hour; d < -2*SavingsResolution || d > 6*SavingsResolution { // the lookback after the last sample
		t.Errorf("data covered %s, want about 2h", ba.DataCovered)
	}
	if !strings.Contains(text, "of the 168h0m0s window") || !strings.Contains(text, "not zero saving") {
		t.Errorf("the window's missing data is not named:\n%s", text)
	}
	if math.Abs(ba.SavedGPUHours-5) > 2.5*6*SavingsResolution.Hours() {
		t.Errorf("saved %.3f GPU-hours, want about 5 (2.5 GPUs for 2 hours)", ba.SavedGPUHours)
	}
}

// An autoscaler without a peak series (no recommendation yet, no memory samples) has no
// known memory use: its 10 whole GPUs are left out of the utilisation's GPUs, which stay
// sd's 4 (before) and 1.5 (after). Before, they counted as GPUs held empty: 60 GiB over
// 14 and 11.5 GPUs (5 % and 7 %) instead of 19 % and 50 %.
func TestBeforeAfterUtilisationWithoutPeak(t *testing.T) {
	s, until, start, step, n, _ := appliedHalfway(t, 2*time.Hour)
	gib := float64(1 << 30)
	s.Add(t, map[string]string{"__name__": seriesPeak, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(60*gib, n)...)
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "ml", "autoscaler": "new"}, start, step, promtest.Repeat(10, n)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "ml", "autoscaler": "new"}, start, step, promtest.Repeat(10, n)...)
	s.Add(t, map[string]string{"__name__": seriesGPUMemory}, start, step, promtest.Repeat(80*gib, n)...)
	var warn bytes.Buffer
	ba, err := queryBeforeAfter(context.Background(), s.URL, "ml", 2*time.Hour, until, &warn)
	if err != nil {
		t.Fatal(err)
	}
	last := ba.Points[len(ba.Points)-1]
	if last.GPUsOnePerPod != 14 || last.GPUsAllocated != 11.5 {
		t.Errorf("GPUs %v → %v, want 14 → 11.5 (every autoscaler)", last.GPUsOnePerPod, last.GPUsAllocated)
	}
	if math.Abs(ptr.Deref(last.MemoryUtilisationOnePerPod, -1)-60.0/320) > 1e-9 || math.Abs(ptr.Deref(last.MemoryUtilisationAllocated, -1)-60.0/120) > 1e-9 {
		t.Errorf("utilisation %v → %v, want 60/320 → 60/120 (sd's GPUs only)", ptr.Deref(last.MemoryUtilisationOnePerPod, -1), ptr.Deref(last.MemoryUtilisationAllocated, -1))
	}
}

// Prometheus holds gpufrac_autoscaler_gpus_held but no gpufrac_autoscaler_gpus_allocated
// in the whole window (a metric_relabel_configs keep-list or a series limit that drops
// it, a recording that copies only some series): the after is unknown, not the before.
// The report fails naming the missing series, as it does without gpus_held, instead of
// reading every pod as a whole GPU: '0.0 saved' and 'gpufrac wrote no fraction into
// these pods'.
func TestBeforeAfterWithoutAllocatedSeries(t *testing.T) {
	s := promtest.New(t)
	until := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start, step := until.Add(-time.Hour), 15*time.Second
	n := int(time.Hour/step) + 1
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(4, n)...)
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "other", "autoscaler": "x"}, start, step, promtest.Repeat(2, n)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "other", "autoscaler": "x"}, start, step, promtest.Repeat(1, n)...)
	var warn bytes.Buffer
	ba, err := queryBeforeAfter(context.Background(), s.URL, "ml", time.Hour, until, &warn)
	if err == nil || !strings.Contains(err.Error(), "no "+seriesAllocated) || !strings.Contains(err.Error(), s.URL) {
		var out bytes.Buffer
		if ba != nil {
			writeBeforeAfter(&out, ba, false)
		}
		t.Fatalf("err %v, want one naming %s and the Prometheus; report:\n%s", err, seriesAllocated, out.String())
	}
	// The other namespace has both: its report is read.
	if _, err := queryBeforeAfter(context.Background(), s.URL, "other", time.Hour, until, &warn); err != nil {
		t.Errorf("namespace with both series: %v", err)
	}
}

// TestWarnPartialSkipsPromQLInfos: an answer whose warnings are PromQL info annotations
// (Prometheus 2.46-2.53 and Thanos Query send them among the warnings) is not called
// partial; a real warning still is.
func TestWarnPartialSkipsPromQLInfos(t *testing.T) {
	var b strings.Builder
	warnPartial(&b, "q", promv1.Warnings{
		metrics.PromQLInfoPrefix + `metric might not be a counter, name does not end in _total/_sum/_count/_bucket: "x"`,
		"store gateway unavailable",
	})
	if got := b.String(); strings.Contains(got, "might not be a counter") || !strings.Contains(got, "store gateway unavailable") {
		t.Errorf("warned:\n%s\nwant the store gateway's warning only", got)
	}
}

// A partial answer (a Prometheus warning: a store, shard or replica that did not answer)
// may leave pods out of either sum, so the GPU-hours saved may be computed from missing
// data. The report says so where its figures are read, not only on stderr: the text
// after its summary line, and JSON in beforeAfter.warnings (each distinct warning once),
// absent for a complete answer and for PromQL info annotations. Before, stdout and JSON
// read as complete.
func TestBeforeAfterPartialAnswerInTheReport(t *testing.T) {
	for _, c := range []struct {
		name     string
		warnings []string
		partial  []string
	}{
		{"complete", nil, nil},
		{"PromQL info only", []string{metrics.PromQLInfoPrefix + "metric might not be a counter"}, nil},
		{"one store down", []string{"store gateway down"}, []string{"store gateway down"}},
		{"two warnings and an info", []string{"store gateway down", metrics.PromQLInfoPrefix + "x", "shard 3 timed out"}, []string{"store gateway down", "shard 3 timed out"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, until, _, _, _, _ := appliedHalfway(t, time.Hour)
			s.SetWarnings(c.warnings)
			var warn bytes.Buffer
			ba, err := queryBeforeAfter(context.Background(), s.URL, "", time.Hour, until, &warn)
			if err != nil {
				t.Fatal(err)
			}
			var js bytes.Buffer
			if err := writeReportJSON(&js, nil, reportTotals{}, ba); err != nil {
				t.Fatal(err)
			}
			var got struct {
				BeforeAfter map[string]any `json:"beforeAfter"`
			}
			if err := json.Unmarshal(js.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			w, ok := got.BeforeAfter["warnings"]
			if ok != (len(c.partial) > 0) {
				t.Fatalf("beforeAfter.warnings present %v, want %v: %s", ok, len(c.partial) > 0, js.String())
			}
			if ok {
				list, _ := w.([]any)
				if len(list) != len(c.partial) {
					t.Errorf("beforeAfter.warnings %v, want each of %q once", w, c.partial)
				}
				for i, p := range c.partial {
					if i < len(list) && list[i] != p {
						t.Errorf("beforeAfter.warnings[%d] = %v, want %q", i, list[i], p)
					}
				}
			}
			var text bytes.Buffer
			if err := writeBeforeAfter(&text, ba, false); err != nil {
				t.Fatal(err)
			}
			if says := strings.Contains(text.String(), "incomplete"); says != (len(c.partial) > 0) {
				t.Errorf("text says incomplete: %v, want %v:\n%s", says, len(c.partial) > 0, text.String())
			}
			for _, p := range c.partial {
				wantContains(t, "text", text.String(), p)
			}
		})
	}
}

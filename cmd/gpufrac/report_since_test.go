package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Two hours of the recommender's series on the real PromQL engine: 4 pods at one GPU each
// throughout; gpufrac's fractions land after an hour (1.5 whole-GPU equivalents), and a
// second namespace that stays at whole GPUs. The report finds when applying began, the
// means since then, the GPU-hours saved and the peak-memory utilisation before and after.
func TestBeforeAfterFromPrometheus(t *testing.T) {
	s := promtest.New(t)
	until := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := until.Add(-2 * time.Hour)
	step := 15 * time.Second
	n := int(2*time.Hour/step) + 1
	half := n / 2
	alloc := append(promtest.Repeat(4, half), promtest.Repeat(1.5, n-half)...)
	gib := float64(1 << 30)
	s.Add(t, map[string]string{"__name__": seriesHeld, "namespace": "ml", "autoscaler": "sd"}, start, step, promtest.Repeat(4, n)...)
	s.Add(t, map[string]string{"__name__": seriesAllocated, "namespace": "ml", "autoscaler": "sd"}, start, step, alloc...)
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
	switchAt := start.Add(time.Duration(half) * step)
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
	if math.Abs(last.MemoryUtilisationOnePerPod-60.0/320) > 1e-9 || math.Abs(last.MemoryUtilisationAllocated-60.0/120) > 1e-9 {
		t.Errorf("utilisation %v → %v, want 60/320 → 60/120", last.MemoryUtilisationOnePerPod, last.MemoryUtilisationAllocated)
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

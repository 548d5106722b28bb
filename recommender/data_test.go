package recommender

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 1 (issue 13): an answer with warnings is incomplete. With one pod's series
// missing from a partial answer and the other's collapsing, nothing changes: targets
// stay, MetricsUnavailable says PartialResponse, the counter moves; and once answers are
// complete again, the recommender reads what it skipped.
func TestPartialResponseNeverShrinks(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	for i, p := range pods {
		addDCGM(t, h.prom, p, "GPU-"+string(rune('a'+i)), h.now, 48*120, 20000, 0.6)
	}
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	first := h.gfr(t, "ml", "sd").Status
	if len(first.ContainerRecommendations) != 1 {
		t.Fatalf("no recommendation: %+v", first.Conditions)
	}
	want := first.ContainerRecommendations[0]
	if c := want.Target.Compute.MilliValue(); c < 600 {
		t.Fatalf("compute target %dm from SM_ACTIVE 0.6", c)
	}

	// A store is down: the answer omits pod 1 and pod 0 reads low.
	partials := incomplete(metrics.IncompletePartialResponse)
	h.prom.SetWarnings([]string{"No StoreAPIs matched for this query", "store 10.0.3.7:10901: rpc error: code = Unavailable"})
	for cycle := 0; cycle < FailedReadsBeforeUnavailable; cycle++ {
		h.now = h.now.Add(time.Minute)
		addDCGM(t, h.prom, pods[0], "GPU-a", h.now, 2, 1000, 0.04)
		err := h.rec.RunOnce(ctx)
		if err == nil {
			t.Fatalf("cycle %d: a partial answer must fail the cycle", cycle)
		}
		st := h.gfr(t, "ml", "sd").Status
		got := st.ContainerRecommendations[0]
		if got.Target.Compute.Cmp(*want.Target.Compute) != 0 || got.Target.Memory.Cmp(*want.Target.Memory) != 0 {
			t.Fatalf("cycle %d: target changed on a partial answer: %v/%v → %v/%v", cycle, want.Target.Memory, want.Target.Compute, got.Target.Memory, got.Target.Compute)
		}
		// The condition says so once the reads have failed FailedReadsBeforeUnavailable
		// cycles in a row; before, the kept recommendation keeps its False.
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if cycle+1 >= FailedReadsBeforeUnavailable && (!isTrue(c) || c.Reason != gpufracv1.ReasonPartialResponse) {
			t.Fatalf("cycle %d: want MetricsUnavailable=True PartialResponse, got %+v", cycle, c)
		} else if cycle+1 < FailedReadsBeforeUnavailable && !isFalse(c) {
			t.Fatalf("cycle %d: MetricsUnavailable set before %d failed reads: %+v", cycle, FailedReadsBeforeUnavailable, c)
		}
	}
	if d := incomplete(metrics.IncompletePartialResponse) - partials; d < 3 {
		t.Errorf("incomplete_data_total{partial_response} += %v, want ≥ 3 (one per partial answer)", d)
	}

	// Complete answers again: the condition clears.
	h.prom.SetWarnings(nil)
	h.now = h.now.Add(time.Minute)
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable must clear with complete answers: %+v", c)
	}
}

// runCycles runs n cycles one minute apart, each after write(now).
func (h *engineHarness) runCycles(t *testing.T, n int, write func(now time.Time)) {
	t.Helper()
	for i := 0; i < n; i++ {
		if i > 0 {
			h.now = h.now.Add(time.Minute)
		}
		if write != nil {
			write(h.now)
		}
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
}

// Kinds 11 and 12 (issue 13): HAMi's utilisation is a percentage in both generations
// (hami_container_device_utilization_ratio ≥ 2.9, Device_utilization_desc_of_container
// ≤ 2.8, with the legacy labels), and both generations are read.
func TestHAMiBothGenerationsPercent(t *testing.T) {
	objs := singlePodWorkloads("ml", "new", "old")
	h := newEngineHarness(t, objs, metrics.HAMi)
	pods := podsOf(objs)
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	// HAMi ≥ 2.9, as published: bytes, and a 0–100 utilisation.
	p := pods[0]
	lbl := func(metric string) map[string]string {
		return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "container": "main",
			"device_uuid": "GPU-0a1b", "vdevice_index": "0", "zone": "vGPU", "instance": "10.0.0.5:9394", "job": "hami-device-plugin"}
	}
	h.prom.Add(t, lbl(metrics.HAMiMemory), start, 30*time.Second, promtest.Repeat(10*gib, n)...)
	h.prom.Add(t, lbl(metrics.HAMiUtilization), start, 30*time.Second, promtest.Repeat(35, n)...)
	// HAMi ≤ 2.8, as published: legacy names and labels.
	q := pods[1]
	legacy := func(metric string) map[string]string {
		return map[string]string{"__name__": metric, "podnamespace": q.Namespace, "podname": q.Name, "ctrname": "main",
			"deviceuuid": "GPU-9f8e", "vdeviceid": "0", "instance": "10.0.0.6:9394", "job": "hami-device-plugin"}
	}
	h.prom.Add(t, legacy(metrics.HAMiLegacyMemory), start, 30*time.Second, promtest.Repeat(6*gib, n)...)
	h.prom.Add(t, legacy(metrics.HAMiLegacyUtilization), start, 30*time.Second, promtest.Repeat(20, n)...)
	h.runCycles(t, 1, nil)

	for _, tc := range []struct {
		name       string
		mem, ratio float64
		source     string
	}{{"new", 10 * gib, 0.35, metrics.HAMiUtilization}, {"old", 6 * gib, 0.20, metrics.HAMiLegacyUtilization}} {
		st := h.gfr(t, "ml", tc.name).Status
		if len(st.ContainerRecommendations) != 1 {
			t.Fatalf("%s: no recommendation: %+v", tc.name, st.Conditions)
		}
		cr := st.ContainerRecommendations[0]
		if cr.ContainerName != "main" || cr.ComputeSource != tc.source {
			t.Errorf("%s: container %q source %q", tc.name, cr.ContainerName, cr.ComputeSource)
		}
		if cr.Target.Compute == nil {
			t.Fatalf("%s: no compute target: %+v", tc.name, st.Conditions)
		}
		// p90 is the end of the value's 0.01 bucket, ×1.15 margin.
		if c := cr.Target.Compute.AsApproximateFloat64(); c < tc.ratio*1.15-0.001 || c > (tc.ratio+0.011)*1.15+0.001 {
			t.Errorf("%s: compute target %v, want ≈ %v×1.15 (a percentage read as such)", tc.name, c, tc.ratio)
		}
		if m := cr.Target.Memory.AsApproximateFloat64(); m < tc.mem*1.15 || m > tc.mem*1.15*1.06 {
			t.Errorf("%s: memory target %v, want within a bucket above %v", tc.name, m, tc.mem*1.15)
		}
		if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
			t.Errorf("%s: MetricsUnavailable %+v", tc.name, c)
		}
	}
}

// Kinds 3 and 11 (issue 13): a signal whose every sample is impossible (SM_ACTIVE above
// 1 on every scrape) raises MetricsUnavailable=AllSamplesFiltered naming the metric and
// its unit, and every dropped sample is counted.
func TestAllSamplesFilteredIsACondition(t *testing.T) {
	objs := singlePodWorkloads("ml", "sd")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	n := 48 * 120
	before := dropped(metrics.SignalCompute, metrics.DropOutOfRange)
	addDCGM(t, h.prom, p, "GPU-1", h.now, n, 9000, 1.37)
	h.runCycles(t, 1, nil)
	st := h.gfr(t, "ml", "sd").Status
	c := condition(st, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != gpufracv1.ReasonAllSamplesFiltered ||
		!strings.Contains(c.Message, metrics.DCGMSMActive+" (ratio)") {
		t.Fatalf("want MetricsUnavailable=True AllSamplesFiltered naming SM_ACTIVE (ratio), got %+v", c)
	}
	// A history load counts its last MaxDropCountWindow: 120 samples at 30 s.
	if d := dropped(metrics.SignalCompute, metrics.DropOutOfRange) - before; d != 120 {
		t.Errorf("samples_dropped_total{compute,out_of_range} += %v, want 120 (every sample of the last hour once)", d)
	}
	// A live cycle counts its own: two samples in the next minute.
	before = dropped(metrics.SignalCompute, metrics.DropOutOfRange)
	h.now = h.now.Add(time.Minute)
	addDCGM(t, h.prom, p, "GPU-1", h.now, 2, 9000, 1.37)
	h.runCycles(t, 1, nil)
	if d := dropped(metrics.SignalCompute, metrics.DropOutOfRange) - before; d != 2 {
		t.Errorf("live cycle: samples_dropped_total{compute,out_of_range} += %v, want 2", d)
	}
	if len(st.ContainerRecommendations) == 1 && st.ContainerRecommendations[0].Target.Compute != nil {
		t.Errorf("compute recommended from filtered samples: %v", st.ContainerRecommendations[0].Target.Compute)
	}
}

// oneDCGMPod is an engine harness with workload ml/sd of one pod on GPU-1 with two days
// of DCGM samples (20000 MiB, SM active 0.5) up to now, after its first cycle: it
// returns the harness, the pod and the container recommendations written.
func oneDCGMPod(t *testing.T) (*engineHarness, *corev1.Pod, []gpufracv1.ContainerRecommendation) {
	t.Helper()
	objs := singlePodWorkloads("ml", "sd")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	addDCGM(t, h.prom, p, "GPU-1", h.now, 48*120, 20000, 0.5)
	h.runCycles(t, 1, nil)
	return h, p, h.gfr(t, "ml", "sd").Status.ContainerRecommendations
}

// Kind 9 (issue 13): every GPU query empty for several cycles while the pods run: the
// targets stay and MetricsUnavailable names the gap, not SamplesPresent.
func TestEmptyWhileRunningIsAGap(t *testing.T) {
	h, p, recs := oneDCGMPod(t)
	want := recs[0]
	// The exporter stops; the pod keeps running.
	for i := 1; i <= EmptyCyclesWhileRunning+1; i++ {
		h.now = h.now.Add(time.Minute)
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := h.gfr(t, "ml", "sd").Status
		got := st.ContainerRecommendations[0]
		if got.Target.Compute.Cmp(*want.Target.Compute) != 0 || got.Target.Memory.Cmp(*want.Target.Memory) != 0 {
			t.Fatalf("cycle %d: targets changed without samples", i)
		}
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if i >= EmptyCyclesWhileRunning {
			if !isTrue(c) || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning {
				t.Fatalf("cycle %d: want NoSamplesWhileRunning, got %+v", i, c)
			}
		} else if c.Reason == gpufracv1.ReasonNoSamplesWhileRunning {
			t.Fatalf("cycle %d: gap raised before %d cycles", i, EmptyCyclesWhileRunning)
		}
	}
	// Samples again: the condition clears.
	h.runCycles(t, 1, func(now time.Time) { addDCGM(t, h.prom, p, "GPU-1", now, 2, 20000, 0.5) })
	if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("gap must clear when samples return: %+v", c)
	}
}

// Kind 2, in part (issue 13): with --metric-source auto and no GPU series scraped in the
// last 5 minutes (an exporter restart), the cycle does not fail with "no GPU metric
// source found" while days of DCGM history are in Prometheus: the source is detected
// over the history window and the workload gets its recommendation.
func TestDetectionSeesHistoryThroughALiveGap(t *testing.T) {
	objs := singlePodWorkloads("ml", "sd")
	h := newEngineHarness(t, objs, nil)
	// 48 h of samples that stopped 20 minutes ago.
	addDCGM(t, h.prom, podsOf(objs)[0], "GPU-1", h.now.Add(-20*time.Minute), 48*120, 20000, 0.5)
	if err := h.rec.RunOnce(context.Background()); err != nil {
		t.Fatalf("a live gap failed the cycle: %v", err)
	}
	st := h.gfr(t, "ml", "sd").Status
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Memory == nil {
		t.Fatalf("no recommendation from history: %+v", st.Conditions)
	}
	if fmt.Sprint(st.MetricSources) != "[{dcgm 1}]" {
		t.Errorf("metricSources %v, want dcgm for the one pod, from history", st.MetricSources)
	}
}

// Kind 9 (issue 13): the exporter-health cross-check. The dcgm-exporter target that
// scrapes one workload's pod fails its scrapes (up 0) and its series stop; the other
// workload's exporter is up. From the first cycle the target is down, the first
// workload's MetricsUnavailable says ExporterDown, naming the target and the pod, its
// targets stay, and the counter moves; the other workload is untouched; once the
// target is up and its series are back, the condition clears.
func TestExporterDownIsNamed(t *testing.T) {
	objs := singlePodWorkloads("ml", "a", "b")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	instances := []string{"10.0.0.5:9400", "10.0.0.6:9400"}
	add := func(i int, from time.Time, n int, up float64) {
		p := pods[i]
		for metric, v := range map[string]float64{metrics.DCGMFBUsed: 20000, metrics.DCGMSMActive: 0.5} {
			l := dcgmLabels(metric, p, fmt.Sprintf("GPU-%d", i))
			l["job"], l["instance"] = "dcgm-exporter", instances[i]
			if up == 1 {
				h.prom.Add(t, l, from, 30*time.Second, promtest.Repeat(v, n)...)
			}
		}
		h.prom.Add(t, map[string]string{"__name__": "up", "job": "dcgm-exporter", "instance": instances[i]}, from, 30*time.Second, promtest.Repeat(up, n)...)
	}
	add(0, start, n, 1)
	add(1, start, n, 1)
	h.runCycles(t, 1, nil)
	want := h.gfr(t, "ml", "a").Status.ContainerRecommendations[0]
	downs := incomplete(metrics.IncompleteExporterDown)

	// Target 0 goes down; target 1 stays up.
	for i := 0; i < 2; i++ {
		h.now = h.now.Add(time.Minute)
		add(0, h.now.Add(-30*time.Second), 2, 0)
		add(1, h.now.Add(-30*time.Second), 2, 1)
		h.runCycles(t, 1, nil)
		st := h.gfr(t, "ml", "a").Status
		got := st.ContainerRecommendations[0]
		if got.Target.Memory.Cmp(*want.Target.Memory) != 0 || got.Target.Compute.Cmp(*want.Target.Compute) != 0 {
			t.Fatalf("cycle %d: targets changed with the exporter down", i)
		}
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if !isTrue(c) || c.Reason != gpufracv1.ReasonExporterDown ||
			!strings.Contains(c.Message, "dcgm-exporter/"+instances[0]) || !strings.Contains(c.Message, pods[0].Name) {
			t.Fatalf("cycle %d: MetricsUnavailable %+v, want ExporterDown naming the target and the pod", i, c)
		}
		if c := condition(h.gfr(t, "ml", "b").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
			t.Fatalf("cycle %d: the other workload: %+v", i, c)
		}
	}
	if d := incomplete(metrics.IncompleteExporterDown) - downs; d != 2 {
		t.Errorf("incomplete_data_total{exporter_down} += %v, want 2 (one per cycle of the one autoscaler)", d)
	}
	// Up again, with its series.
	h.now = h.now.Add(time.Minute)
	add(0, h.now.Add(-30*time.Second), 2, 1)
	add(1, h.now.Add(-30*time.Second), 2, 1)
	h.runCycles(t, 1, nil)
	if c := condition(h.gfr(t, "ml", "a").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("the condition must clear with the target up: %+v", c)
	}
}

// isCountQuery matches the diagnostic counts of a load: impossible samples
// (Selector.DropCountQuery) and samples without a pod label (MissingLabelsQuery).
func isCountQuery(q string) bool {
	return strings.Contains(q, "changes((timestamp(") || strings.Contains(q, "sum(count_over_time(")
}

// Issue 17: a diagnostic count that fails (at 10,000 pods the count of impossible
// samples ran past Prometheus' timeout on every bootstrap, failed the whole cycle, and
// the next cycle loaded the history again) degrades the cycle instead: the history is
// loaded, the recommendation is written and equals the one made with the counts
// working, the failure is counted in incomplete_data_total{count_failed}, and later
// cycles whose counts fail while every new sample is impossible never shrink it.
func TestFailedCountKeepsTheCycle(t *testing.T) {
	run := func(failCounts bool) (*engineHarness, *corev1.Pod, gpufracv1.ContainerRecommendation) {
		objs := singlePodWorkloads("ml", "sd")
		h := newEngineHarness(t, objs, metrics.DCGM{})
		p := podsOf(objs)[0]
		addDCGM(t, h.prom, p, "GPU-1", h.now, 48*120, 20000, 0.6)
		// One impossible sample of each signal in the last hour: the counts run only
		// where there is something to count (Reader.CountDropped).
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-1"), h.now.Add(-10*time.Minute-15*time.Second), time.Second, math.NaN())
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-1"), h.now.Add(-10*time.Minute-15*time.Second), time.Second, 1.37)
		if failCounts {
			h.prom.SetFailureIf(isCountQuery, errors.New("query timed out in expression evaluation"))
		}
		before := incomplete(metrics.IncompleteCountFailed)
		h.runCycles(t, 1, nil) // fails the test on a cycle error
		st := h.gfr(t, "ml", "sd").Status
		if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Compute == nil {
			t.Fatalf("failing counts %v: no recommendation: %+v", failCounts, st.Conditions)
		}
		if c := condition(st, gpufracv1.ConditionMetricsUnavailable); isTrue(c) {
			t.Errorf("failing counts %v: MetricsUnavailable=True %s: %s; the data was complete", failCounts, c.Reason, c.Message)
		}
		// Per DCGM load: impossible memory and compute samples, the first unlabelled count.
		want := 0.0
		if failCounts {
			want = 3
		}
		if d := incomplete(metrics.IncompleteCountFailed) - before; d != want {
			t.Errorf("failing counts %v: incomplete_data_total{count_failed} += %v, want %v", failCounts, d, want)
		}
		return h, p, st.ContainerRecommendations[0]
	}
	_, _, ok := run(false)
	h, p, got := run(true)
	if got.Target.Memory.Cmp(*ok.Target.Memory) != 0 || got.Target.Compute.Cmp(*ok.Target.Compute) != 0 ||
		got.UpperBound.Memory.Cmp(*ok.UpperBound.Memory) != 0 || got.LowerBound.Compute.Cmp(*ok.LowerBound.Compute) != 0 {
		t.Errorf("recommendation with failing counts %v/%v (upper memory %v) differs from the one with working counts %v/%v (%v)",
			got.Target.Memory, got.Target.Compute, got.UpperBound.Memory, ok.Target.Memory, ok.Target.Compute, ok.UpperBound.Memory)
	}
	// Every new sample is impossible and the counts still fail: nothing shrinks. (The
	// filtering subquery carries the last valid value through Prometheus' 5-minute
	// lookback, so compute reads empty only from the sixth minute.)
	cycles := 5 + EmptyCyclesWhileRunning
	for i := 0; i < cycles; i++ {
		h.runCycles(t, 1, func(now time.Time) {
			h.now = now.Add(time.Minute)
			addDCGM(t, h.prom, p, "GPU-1", h.now, 2, math.Inf(1), 1.37)
		})
		st := h.gfr(t, "ml", "sd").Status
		now := st.ContainerRecommendations[0]
		if now.Target.Memory.Cmp(*got.Target.Memory) < 0 || now.Target.Compute.Cmp(*got.Target.Compute) < 0 {
			t.Fatalf("cycle %d: target shrank from %v/%v to %v/%v on impossible samples while their count failed",
				i, got.Target.Memory, got.Target.Compute, now.Target.Memory, now.Target.Compute)
		}
		if c := condition(st, gpufracv1.ConditionMetricsUnavailable); i == cycles-1 &&
			(c == nil || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, "count failed")) {
			t.Errorf("cycle %d: want NoSamplesWhileRunning saying the count failed, got %+v", i, c)
		}
	}
}

// One of a workload's two running pods stops reporting (its exporter lost the pod's
// mapping; the scrape target stays up) while the other goes on: the workload still has
// samples, but they are partial. After EmptyCyclesWhileRunning cycles the autoscaler says
// NoSamplesWhileRunning naming the pod and keeps its recommendation, as for a gap of the
// whole workload; the condition clears once the pod reports again, and neither a new pod
// of the same name yet to report nor a pod deleted (a scale-down) is a gap.
func TestOnePodSilentIsAGap(t *testing.T) {
	objs := append(deployment("ml", "sd", 3), gfa("ml", "sd", "sd"))
	prom := promFor(objs, 10*gib, 0.4)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	cycle := func() gpufracv1.GPUFractionRecommendationStatus {
		t.Helper()
		h.now = h.now.Add(time.Minute)
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return h.gfr(t, "ml", "sd").Status
	}
	want := cycle().ContainerRecommendations
	pods := podsOf(objs)
	silence := func(p string) {
		prom.mu.Lock()
		defer prom.mu.Unlock()
		delete(prom.mem, p)
		delete(prom.cpu, p)
	}
	silence(pods[0].Name)
	prom.mu.Lock()
	for _, p := range pods[1:] {
		prom.mem[p.Name], prom.cpu[p.Name] = gib, 0.05 // the others fall: only the silent pod held the peak
	}
	prom.mu.Unlock()
	var st gpufracv1.GPUFractionRecommendationStatus
	for range EmptyCyclesWhileRunning {
		st = cycle()
	}
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isTrue(c) || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, pods[0].Name) {
		t.Fatalf("MetricsUnavailable %+v, want NoSamplesWhileRunning naming %s", c, pods[0].Name)
	}
	if !equality.Semantic.DeepEqual(st.ContainerRecommendations, want) {
		t.Errorf("recommendation changed while a pod was silent: %+v, was %+v", st.ContainerRecommendations, want)
	}
	// The pod reports again: samples read.
	prom.mu.Lock()
	prom.mem[pods[0].Name], prom.cpu[pods[0].Name] = 10*gib, 0.4
	prom.mu.Unlock()
	// noGapFor runs n cycles and fails t unless MetricsUnavailable is False after them.
	noGapFor := func(n int, what string) {
		t.Helper()
		for range n {
			st = cycle()
		}
		if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
			t.Errorf("MetricsUnavailable %+v after %s", c, what)
		}
	}
	noGapFor(1, "the pod reported again")
	// A pod replaced under the same name (a StatefulSet replica) that has not reported
	// yet: a new pod, not a gap.
	silence(pods[1].Name)
	pods[1].CreationTimestamp = metav1.NewTime(h.now)
	if err := h.c.Update(ctx, pods[1]); err != nil {
		t.Fatal(err)
	}
	noGapFor(EmptyCyclesWhileRunning+1, "a new pod of the same name yet to report")
	// A pod deleted (scale-down) stops reporting: not a gap. (The new pod reports by now:
	// one that never does is a gap after Prometheus' lookback, TestPodThatNeverReportsIsAGap.)
	prom.mu.Lock()
	prom.mem[pods[1].Name], prom.cpu[pods[1].Name] = gib, 0.05
	prom.mu.Unlock()
	silence(pods[0].Name)
	if err := h.c.Delete(ctx, pods[0]); err != nil {
		t.Fatal(err)
	}
	noGapFor(EmptyCyclesWhileRunning+1, "a scale-down")
}

// One pod of three reports compute but no memory (its node's exporter without the memory
// field, a relabeling that drops it on one scrape job) while its siblings report both,
// at a lower level than the silent pod held: coverage is per pod and per signal. After
// EmptyCyclesWhileRunning cycles MetricsUnavailable says NoSamplesWhileRunning naming
// the pod and memory, so the updater shrinks nothing (contract.IncompleteData) on a
// target its siblings alone made; the recommendation is kept; memory back clears it.
// Before, the workload read as complete and the pod's memory as no concern.
func TestOnePodWithoutMemoryIsAGap(t *testing.T) {
	objs := append(deployment("ml", "sd", 3), gfa("ml", "sd", "sd"))
	prom := promFor(objs, 30*gib, 0.4)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	cycle := func() *gpufracv1.GPUFractionRecommendation {
		t.Helper()
		h.now = h.now.Add(time.Minute)
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return h.gfr(t, "ml", "sd")
	}
	want := cycle().Status.ContainerRecommendations
	pods := podsOf(objs)
	prom.mu.Lock()
	delete(prom.mem, pods[0].Name)
	for _, p := range pods[1:] {
		prom.mem[p.Name] = 8 * gib
	}
	prom.mu.Unlock()
	var gfr *gpufracv1.GPUFractionRecommendation
	for range EmptyCyclesWhileRunning {
		gfr = cycle()
	}
	c := condition(gfr.Status, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, pods[0].Name) || !strings.Contains(c.Message, "no GPU memory sample") {
		t.Fatalf("MetricsUnavailable %+v, want NoSamplesWhileRunning naming %s's memory", c, pods[0].Name)
	}
	if contract.IncompleteData(gfr) == "" {
		t.Error("the updater reads the data as complete: it may shrink the pod whose memory is unknown")
	}
	if !equality.Semantic.DeepEqual(gfr.Status.ContainerRecommendations, want) {
		t.Errorf("recommendation changed while a pod's memory was unknown: %+v, was %+v", gfr.Status.ContainerRecommendations, want)
	}
	prom.mu.Lock()
	prom.mem[pods[0].Name] = 30 * gib
	prom.mu.Unlock()
	if c := condition(cycle().Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable %+v once the pod's memory is read again, want False", c)
	}
}

// The memory series of a workload's pod stop (an exporter's collectors changed, a
// recording rule lost) while its compute series go on: a data gap like every series
// stopping (a running GPU process always holds memory), not a workload that no longer
// uses memory. Memory is read over the running aggregation interval (1 h), so the gap
// shows once the hour in which the series stopped has ended: EmptyCyclesWhileRunning
// cycles later MetricsUnavailable says NoSamplesWhileRunning naming memory (the updater
// then shrinks nothing on the kept recommendation), the targets stay, and memory back
// clears it. An hour boundary with both series reporting is no gap.
func TestMemoryGoneWhileComputeReportsIsAGap(t *testing.T) {
	h, p, want := oneDCGMPod(t)
	// cycle runs one cycle a minute later, after write, and returns the status.
	cycle := func(write func(now time.Time)) gpufracv1.GPUFractionRecommendationStatus {
		t.Helper()
		h.now = h.now.Add(time.Minute)
		write(h.now)
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		return h.gfr(t, "ml", "sd").Status
	}
	both := func(now time.Time) { addDCGM(t, h.prom, p, "GPU-1", now, 2, 20000, 0.5) }
	computeOnly := func(now time.Time) {
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-1"), now.Add(-30*time.Second), 30*time.Second, 0.5, 0.5)
	}
	for range 70 { // across 13:00
		if c := condition(cycle(both), gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
			t.Fatalf("%s: MetricsUnavailable %+v with every series reporting", h.now.Format(time.TimeOnly), c)
		}
	}
	hourEnd := h.now.Truncate(time.Hour).Add(time.Hour)
	for {
		st := cycle(computeOnly)
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if !isTrue(c) {
			if h.now.After(hourEnd.Add((EmptyCyclesWhileRunning + 1) * time.Minute)) {
				t.Fatalf("%s: no gap %d cycles after the hour without memory ended: %+v", h.now.Format(time.TimeOnly), EmptyCyclesWhileRunning, c)
			}
			continue
		}
		if c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, "no GPU memory sample") {
			t.Fatalf("MetricsUnavailable %+v, want NoSamplesWhileRunning naming memory", c)
		}
		if !h.now.After(hourEnd) {
			t.Fatalf("%s: gap raised within the hour whose peak was read", h.now.Format(time.TimeOnly))
		}
		if contract.IncompleteData(&gpufracv1.GPUFractionRecommendation{Status: st}) == "" {
			t.Error("the updater would shrink on it")
		}
		if !equality.Semantic.DeepEqual(st.ContainerRecommendations[0].Target, want[0].Target) {
			t.Errorf("targets changed without memory samples: %+v, were %+v", st.ContainerRecommendations[0].Target, want[0].Target)
		}
		break
	}
	if c := condition(cycle(both), gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("gap must clear when memory returns: %+v", c)
	}
}

// The recommender's clock 3 minutes ahead of Prometheus' (or samples ingested 3 minutes
// late: remote write, federation): Prometheus' newest sample is 3 minutes before the
// recommender's now at every cycle. Every sample is still read, once: 10 live cycles a
// minute apart feed the 10 compute means of those minutes, and no gap is reported.
// Before, each cycle read the 3 minutes Prometheus did not hold yet and never again:
// no compute sample was fed, and after 3 cycles MetricsUnavailable=True
// (NoSamplesWhileRunning) blamed an exporter while the recommendation stayed frozen.
func TestClockAheadOfPrometheusLosesNothing(t *testing.T) {
	objs := singlePodWorkloads("ml", "skew")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	const lag = 3 * time.Minute
	addDCGM(t, h.prom, p, "GPU-a", h.now.Add(-lag), 48*120, 20000, 0.6)
	h.runCycles(t, 1, nil)
	st := h.rec.model.Container(history.ContainerKey{WorkloadKey: history.WorkloadKey(h.rec.cur.entries[0].ref), Container: "main"})
	before := st.ComputeSamples
	h.runCycles(t, 11, func(now time.Time) { addDCGM(t, h.prom, p, "GPU-a", now.Add(-lag), 2, 20000, 0.6) })
	if got := st.ComputeSamples - before; got != 10 {
		t.Errorf("compute samples fed by 10 cycles: %d, want 10 (one mean a minute)", got)
	}
	if c := condition(h.gfr(t, "ml", "skew").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable %+v, want False: every sample was read", c)
	}
}

// One pod of two reports its framebuffer memory in bytes where DCGM_FI_DEV_FB_USED is
// MiB (an exporter of another version on its node pool): every memory sample of it is
// impossible and dropped, while its compute and its sibling read well. It is a silent
// pod for memory after EmptyCyclesWhileRunning cycles (shrinks held), and the condition
// says why: its samples were impossible, check the exporter's unit, not a lost series.
func TestOnePodWithImpossibleMemoryNamesTheUnit(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	write := func(now time.Time, n int) {
		addDCGM(t, h.prom, pods[0], "GPU-1", now, n, 20000*metrics.MiB, 0.5) // bytes, read as MiB
		addDCGM(t, h.prom, pods[1], "GPU-2", now, n, 20000, 0.5)
	}
	write(h.now, 120)
	h.runCycles(t, EmptyCyclesWhileRunning+1, func(now time.Time) { write(now, 2) })
	c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, pods[0].Name) ||
		!strings.Contains(c.Message, "impossible") || !strings.Contains(c.Message, metrics.DCGMFBUsed) {
		t.Fatalf("MetricsUnavailable %+v, want NoSamplesWhileRunning naming %s's impossible memory and the field", c, pods[0].Name)
	}
}

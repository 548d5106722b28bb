package recommender

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 8 (issue 13): HAMi's hami_vgpu_memory_used_bytes stays flat after the process
// exited while its utilisation reads 0. A pod used 10 GiB at 50 % for a day; then its
// process exited and the series stayed at 30 GiB (the exited process's accounting) with
// utilisation 0 for a day. The flat, idle hours are stale: dropped and counted (reason
// stale), used neither as a peak nor as a lower bound (the recent peak is the live
// 10 GiB), and MetricsUnavailable=True (StaleSeries) names the pod.
func TestStaleFlatMemoryIsNotAPeak(t *testing.T) {
	objs := singlePodWorkloads("ml", "nb")
	h := newEngineHarness(t, objs, metrics.HAMi)
	p := podsOf(objs)[0]
	mem, util, _ := liveThenStale(0)
	start := h.now.Add(-time.Duration(len(mem)-1) * 30 * time.Second) // 12:01:00 two days before
	lbl := func(metric string) map[string]string { return hamiLabels(metric, p, "GPU-0a1b") }
	h.prom.Add(t, lbl(metrics.HAMiMemory), start, 30*time.Second, mem...)
	h.prom.Add(t, lbl(metrics.HAMiUtilization), start, 30*time.Second, util...)

	before := dropped(metrics.SignalMemory, metrics.DropStale)
	end := h.now
	h.runCycles(t, 2, func(now time.Time) {
		if now.After(end) { // the second cycle, a minute later: still flat and idle
			h.prom.Add(t, lbl(metrics.HAMiMemory), now.Add(-30*time.Second), 30*time.Second, 30*gib, 30*gib)
			h.prom.Add(t, lbl(metrics.HAMiUtilization), now.Add(-30*time.Second), 30*time.Second, 0, 0)
		}
	})
	// 24 stale hours, and the running interval's peak in each of the two cycles.
	if d := dropped(metrics.SignalMemory, metrics.DropStale) - before; d < 24 {
		t.Errorf("%v stale memory samples dropped, want at least the 24 flat idle hours", d)
	}
	if peak, ok := recentPeakOf(t, h, "nb"); !ok || peak != 11*gib {
		t.Errorf("recent peak %.1f GiB, want the live 11 GiB (the stale 30 GiB is no peak)", peak/gib)
	}
	st := h.gfr(t, "ml", "nb").Status
	if len(st.ContainerRecommendations) != 1 {
		t.Fatalf("no recommendation: %+v", st.Conditions)
	}
	if m := st.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64(); m >= 30*gib {
		t.Errorf("memory target %.1f GiB from the stale 30 GiB", m/gib)
	}
	mu := condition(st, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(mu) || mu.Reason != ReasonStaleSeries || !strings.Contains(mu.Message, p.Name) {
		t.Errorf("MetricsUnavailable %+v, want True %s naming %s", mu, ReasonStaleSeries, p.Name)
	}
	if countQueries(h.prom, "stddev_over_time") == 0 {
		t.Error("no flatness read (metrics.FlatQuery) for a source whose memory may go stale")
	}
}

// Issue 17: flatness only tells stale memory, and DCGM's framebuffer memory drops when
// the process exits, so neither the history load nor a live cycle of a DCGM source
// asks for it (a sixth of a long load's memory reads), and memory that stays flat while
// the GPU sits idle is then a live peak, kept.
func TestNoFlatnessReadWhereMemoryDropsOnExit(t *testing.T) {
	objs := singlePodWorkloads("ml", "flat")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	addDCGM(t, h.prom, p, "GPU-0a1b", h.now, 2*24*120, 30*1024, 0) // two days flat at 30 GiB, idle
	h.runCycles(t, 2, nil)
	if n := countQueries(h.prom, "stddev_over_time"); n != 0 {
		t.Errorf("%d flatness reads for DCGM, whose memory never goes stale", n)
	}
	if peak, ok := recentPeakOf(t, h, "flat"); !ok || peak != 30*gib {
		t.Errorf("recent peak %.1f GiB (found %v), want the flat 30 GiB kept", peak/gib, ok)
	}
}

// Kind 8 (issue 13): a pod that holds a flat amount of memory while its GPU is busy is
// live, not stale: nothing is dropped.
func TestFlatMemoryWhileBusyIsLive(t *testing.T) {
	objs := singlePodWorkloads("ml", "srv")
	h := newEngineHarness(t, objs, metrics.HAMi)
	p := podsOf(objs)[0]
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	lbl := func(metric string) map[string]string {
		return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "container": "main", "device_uuid": "GPU-0a1b"}
	}
	h.prom.Add(t, lbl(metrics.HAMiMemory), start, 30*time.Second, promtest.Repeat(30*gib, n)...)
	h.prom.Add(t, lbl(metrics.HAMiUtilization), start, 30*time.Second, promtest.Repeat(5, n)...)
	before := dropped(metrics.SignalMemory, metrics.DropStale)
	h.runCycles(t, 1, nil)
	if d := dropped(metrics.SignalMemory, metrics.DropStale) - before; d != 0 {
		t.Errorf("%v samples of a busy pod's flat memory dropped as stale", d)
	}
	if s := h.rec.model.Container(containerKey("ml", "srv", "main")); s == nil || s.MemoryPeaks < 48 {
		t.Errorf("memory peaks %+v, want every hour", s)
	}
}

// Kind 8 (issue 13): a memory series contradicted by another source is stale. A HAMi pod
// used 10–11 GiB for a day; its process then exited, and HAMi kept reporting 30 GiB with
// a utilisation of 40 (not flat-and-idle, so only the contradiction can tell). The
// gpufrac agent, deployed on the node since, watches the GPU and reports no process of
// the pod on it: those hours are stale (dropped, counted, StaleSeries naming the pod and
// the agent), neither a peak nor a lower bound. The same series on a GPU the agent does
// not watch is kept: silence where the agent does not look contradicts nothing.
func TestAgentContradictsStaleMemory(t *testing.T) {
	objs := singlePodWorkloads("ml", "nb", "far")
	h := newEngineHarness(t, objs, nil)
	pods := podsOf(objs)
	mem, util, live := liveThenStale(40)
	start := h.now.Add(-time.Duration(len(mem)-1) * 30 * time.Second)
	for i, uuid := range []string{"GPU-0a1b", "GPU-far"} {
		h.prom.Add(t, hamiLabels(metrics.HAMiMemory, pods[i], uuid), start, 30*time.Second, mem...)
		h.prom.Add(t, hamiLabels(metrics.HAMiUtilization, pods[i], uuid), start, 30*time.Second, util...)
	}
	// The agent watches GPU-0a1b from the exit on, and reports another pod there.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "other-0"}}
	addAgent(t, h.prom, other, "GPU-0a1b", h.now, len(mem)-live, 2048, 0.1)
	addAgentDevice(t, h.prom, "GPU-0a1b", start.Add(time.Duration(live)*30*time.Second), len(mem)-live)

	before := dropped(metrics.SignalMemory, metrics.DropStale)
	h.runCycles(t, 1, nil)
	if d := dropped(metrics.SignalMemory, metrics.DropStale) - before; d < 23 || d > 25 {
		t.Errorf("%v stale memory samples dropped, want the 23 whole hours the agent watched and the running one", d)
	}
	for _, tc := range []struct {
		name  string
		peak  float64
		stale bool
	}{{"nb", 11 * gib, true}, {"far", 30 * gib, false}} {
		s := h.rec.model.Container(containerKey("ml", tc.name, "main"))
		if s == nil {
			t.Fatalf("%s: no history", tc.name)
		}
		if peak, ok := s.RecentPeak(h.now); !ok || peak != tc.peak {
			t.Errorf("%s: recent peak %.1f GiB, want %.0f GiB", tc.name, peak/gib, tc.peak/gib)
		}
		st := h.gfr(t, "ml", tc.name).Status
		mu := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if tc.stale && (mu == nil || mu.Reason != ReasonStaleSeries || !strings.Contains(mu.Message, "contradicted by the gpufrac agent") || !strings.Contains(mu.Message, pods[0].Name)) {
			t.Errorf("%s: MetricsUnavailable %+v, want StaleSeries naming the pod and the agent", tc.name, mu)
		}
		if !tc.stale && (!isFalse(mu)) {
			t.Errorf("%s: MetricsUnavailable %+v, want False", tc.name, mu)
		}
		if got := fmt.Sprint(st.MetricSources); got != "[{hami 1}]" {
			t.Errorf("%s: metricSources %s, want hami", tc.name, got)
		}
	}
}

// liveThenStale returns 48 h of HAMi samples at 30 s ending at an engine harness's now:
// 10 GiB (11 GiB once, the live peak) at 50 % until 12:00:00 the day before (index
// live, an interval boundary), then 30 GiB at utilisation after: what HAMi keeps
// reporting once the process exited.
// recentPeakOf returns the recent memory peak (bytes) of container main of workload
// ml/name in h's model; it fails the test when the container has no history.
func recentPeakOf(t *testing.T, h *engineHarness, name string) (float64, bool) {
	t.Helper()
	s := h.rec.model.Container(containerKey("ml", name, "main"))
	if s == nil {
		t.Fatal("no history")
	}
	return s.RecentPeak(h.now)
}

func liveThenStale(after float64) (mem, util []float64, live int) {
	n := 48 * 120
	live = 2879
	mem, util = make([]float64, n), make([]float64, n)
	for i := range mem {
		mem[i], util[i] = 10*gib, 50
		if i >= live {
			mem[i], util[i] = 30*gib, after
		}
	}
	mem[100] = 11 * gib
	return mem, util, live
}

// hamiLabels are a HAMi ≥ 2.9 series' labels as published.
func hamiLabels(metric string, p *corev1.Pod, uuid string) map[string]string {
	return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "container": "main",
		"device_uuid": uuid, "vdevice_index": "0", "zone": "vGPU", "instance": "10.0.0.5:9394", "job": "hami-device-plugin"}
}

// DCGM's framebuffer memory is freed when a process exits, so it never stays flat after
// one (metrics.MemoryMayGoStale is false): a model held idle at 30 GiB for a day after
// a busy day at 10–11 GiB is a real need. Nothing is dropped as stale, the recent peak
// is the idle 30 GiB, and no StaleSeries condition is set.
func TestFlatIdleDCGMMemoryIsLive(t *testing.T) {
	objs := singlePodWorkloads("ml", "nb")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	mem, util, _ := liveThenStale(0)
	for i := range mem {
		mem[i], util[i] = mem[i]/metrics.MiB, util[i]/100 // MiB and ratio, as dcgm-exporter publishes them
	}
	start := h.now.Add(-time.Duration(len(mem)-1) * 30 * time.Second)
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-1"), start, 30*time.Second, mem...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-1"), start, 30*time.Second, util...)

	before := dropped(metrics.SignalMemory, metrics.DropStale)
	h.runCycles(t, 1, nil)
	if d := dropped(metrics.SignalMemory, metrics.DropStale) - before; d != 0 {
		t.Errorf("%v DCGM memory samples dropped as stale, want none", d)
	}
	if peak, ok := recentPeakOf(t, h, "nb"); !ok || peak != 30*gib {
		t.Errorf("recent peak %.1f GiB, want the idle model's 30 GiB", peak/gib)
	}
	if mu := condition(h.gfr(t, "ml", "nb").Status, gpufracv1.ConditionMetricsUnavailable); isTrue(mu) && mu.Reason == ReasonStaleSeries {
		t.Errorf("MetricsUnavailable %+v: a DCGM series is never stale", mu)
	}
}

// A broken memory reading is no data, not zero: a new workload whose
// DCGM_FI_DEV_FB_USED reads 0 for two days while its SM activity reads 0.5 (a process
// running kernels holds at least its CUDA context; per-process attribution lost) gets no
// memory target from those zeros, which would size it at the minimum and OOM it. The
// samples are dropped and counted (reason zero_while_busy), and MetricsUnavailable=True
// (ZeroMemoryWhileBusy) names the pod, which holds the updater's shrinks
// (contract.IncompleteData). The control: an idle pod reading 0 with 0
// activity holds nothing, and its zeros are kept.
func TestZeroMemoryWhileBusyIsNoData(t *testing.T) {
	objs := singlePodWorkloads("ml", "srv", "idle")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	for i, sm := range []float64{0.5, 0} {
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[i], fmt.Sprintf("GPU-%d", i)), start, 30*time.Second, promtest.Repeat(0, n)...)
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[i], fmt.Sprintf("GPU-%d", i)), start, 30*time.Second, promtest.Repeat(sm, n)...)
	}
	before := dropped(metrics.SignalMemory, metrics.DropZeroWhileBusy)
	h.runCycles(t, 1, nil)
	if d := dropped(metrics.SignalMemory, metrics.DropZeroWhileBusy) - before; d < 48 {
		t.Errorf("%v samples dropped as zero while busy, want at least the 48 busy hours", d)
	}
	st := h.gfr(t, "ml", "srv").Status
	for _, c := range st.ContainerRecommendations {
		if c.Target.Memory != nil {
			t.Errorf("memory target %s from zeros read while busy, want none", c.Target.Memory)
		}
	}
	if contract.IncompleteData(h.gfr(t, "ml", "srv")) == "" {
		t.Errorf("the updater would shrink on a recommendation whose memory reads are broken")
	}
	if rp := condition(st, gpufracv1.ConditionRecommendationProvided); rp == nil || rp.Status != metav1.ConditionFalse || rp.Reason != ReasonNoMemorySamples {
		t.Errorf("RecommendationProvided %+v, want False %s", rp, ReasonNoMemorySamples)
	}
	mu := condition(st, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(mu) || mu.Reason != gpufracv1.ReasonZeroMemoryWhileBusy || !strings.Contains(mu.Message, pods[0].Name) {
		t.Errorf("MetricsUnavailable %+v, want True %s naming %s", mu, gpufracv1.ReasonZeroMemoryWhileBusy, pods[0].Name)
	}
	if s := h.rec.model.Container(containerKey("ml", "idle", "main")); s == nil || s.MemoryPeaks < 48 {
		t.Errorf("idle pod's memory peaks %+v, want its 48 hours of zeros kept", s)
	}
	if mu := condition(h.gfr(t, "ml", "idle").Status, gpufracv1.ConditionMetricsUnavailable); isTrue(mu) && mu.Reason == gpufracv1.ReasonZeroMemoryWhileBusy {
		t.Errorf("idle pod: MetricsUnavailable %+v, an idle pod's zeros are real", mu)
	}
}

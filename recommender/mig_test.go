package recommender

import (
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// migLabels are a dcgm-exporter series' labels for a MIG instance, as published
// (dcgm-exporter adds GPU_I_ID and GPU_I_PROFILE on MIG).
func migLabels(metric string, p *corev1.Pod, uuid, instance, profile string) map[string]string {
	l := dcgmLabels(metric, p, uuid)
	l["modelName"] = "NVIDIA A100-SXM4-80GB"
	l[metrics.MIGInstanceLabel], l[metrics.MIGProfileLabel] = instance, profile
	return l
}

// Kind 5 (issue 13): a MIG instance's DCGM profiling fields are ratios of the instance,
// not of the whole GPU. DCGM_FI_PROF_SM_ACTIVE on a 1g.10gb alternating 0.9 and 1.37
// (NVIDIA/DCGM#152) is a busy instance: the 1.37 samples are clamped to 1 and counted,
// never dropped uncounted, and the target is about a seventh of a GPU (was 1000m, a
// whole GPU). GR_ENGINE_ACTIVE 0.333 on a 3g.40gb is a third of the instance, 3/7 × 0.333
// of the GPU (was 391m). Status expresses both against the instance and names the
// smallest profile that holds the target. Off MIG, a ratio of 1.37 stays impossible:
// dropped as out of range, not clamped.
func TestMIGRatiosAgainstTheInstance(t *testing.T) {
	objs := singlePodWorkloads("ml", "small", "third", "whole")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	n := 48 * 120 // 48 h at 30 s
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	alternating := make([]float64, n)
	for i := range alternating {
		alternating[i] = 0.9
		if i%2 == 1 {
			alternating[i] = 1.37
		}
	}
	h.prom.Add(t, migLabels(metrics.DCGMFBUsed, pods[0], "GPU-a", "7", "1g.10gb"), start, 30*time.Second, promtest.Repeat(9000, n)...)
	h.prom.Add(t, migLabels(metrics.DCGMSMActive, pods[0], "GPU-a", "7", "1g.10gb"), start, 30*time.Second, alternating...)
	h.prom.Add(t, migLabels(metrics.DCGMFBUsed, pods[1], "GPU-a", "2", "3g.40gb"), start, 30*time.Second, promtest.Repeat(30000, n)...)
	h.prom.Add(t, migLabels(metrics.DCGMGREngineActive, pods[1], "GPU-a", "2", "3g.40gb"), start, 30*time.Second, promtest.Repeat(0.333, n)...)
	// GPU_UTIL (unsupported on MIG, reads 0) without GPU_I_PROFILE, as some exporter
	// versions label it: GR_ENGINE_ACTIVE is still the field read.
	util := migLabels(metrics.DCGMGPUUtil, pods[1], "GPU-a", "2", "")
	delete(util, metrics.MIGProfileLabel)
	h.prom.Add(t, util, start, 30*time.Second, promtest.Repeat(0, n)...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[2], "GPU-b"), start, 30*time.Second, promtest.Repeat(9000, n)...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[2], "GPU-b"), start, 30*time.Second, alternating...)

	clampedBefore := clamped(metrics.SignalCompute)
	outOfRange := dropped(metrics.SignalCompute, metrics.DropOutOfRange)
	h.runCycles(t, 1, nil)

	rec := func(name string) gpufracv1.ContainerRecommendation {
		t.Helper()
		st := h.gfr(t, "ml", name).Status
		if len(st.ContainerRecommendations) != 1 {
			t.Fatalf("%s: no recommendation: %+v", name, st.Conditions)
		}
		return st.ContainerRecommendations[0]
	}
	milli := func(name string, got interface{ MilliValue() int64 }, lo, hi int64) {
		t.Helper()
		if m := got.MilliValue(); m < lo || m > hi {
			t.Errorf("%s: %dm, want %d–%dm", name, m, lo, hi)
		}
	}

	// 1g.10gb: samples 0.9 and 1 (clamped) of a seventh of the GPU, ×1.15 margin.
	small := rec("small")
	milli("1g.10gb compute target (share of the GPU)", small.Target.Compute, 143, 190)
	if small.MIG == nil || small.MIG.MeasuredProfile != "1g.10gb" || small.MIG.ComputeOfProfile == nil {
		t.Fatalf("1g.10gb: MIG status %+v, want measured on 1g.10gb with compute against it", small.MIG)
	}
	milli("1g.10gb compute against the instance", small.MIG.ComputeOfProfile, 1000, 1330)
	// The memory target (9000 MiB peaks × 1.15, a histogram bucket up) against the
	// instance's 9.5 GB (0.95 × 10 GB): more than it has.
	wantPct := math.Round(small.Target.Memory.AsApproximateFloat64() / 9.5e9 * 100)
	if p := small.MIG.MemoryPercentOfProfile; p == nil || float64(*p) != wantPct || wantPct <= 100 {
		t.Errorf("1g.10gb memory against the instance: %v%% (target %s), want %.0f%% (> 100)", ptr.Deref(p, -1), small.Target.Memory, wantPct)
	}
	if small.MIG.GPU != "A100/H100 80GB" || small.MIG.SmallestProfile != "2g.20gb" || !strings.Contains(small.MIG.Reason, "2g.20gb") {
		t.Errorf("1g.10gb: smallest profile %q of %q (%s), want 2g.20gb of A100/H100 80GB (10350Mi and more than 1/7 of the GPU)", small.MIG.SmallestProfile, small.MIG.GPU, small.MIG.Reason)
	}
	// Half of the 48 h were 1.37; a history load counts its last hour: 60 of 120.
	if d := clamped(metrics.SignalCompute) - clampedBefore; d != 60 {
		t.Errorf("samples_clamped_total{mig_overshoot} += %v, want 60 (the 1.37 samples of the last hour)", d)
	}

	// 3g.40gb: GR_ENGINE_ACTIVE 0.333 is a third of the instance: 0.143 of the GPU.
	third := rec("third")
	milli("3g.40gb compute target (share of the GPU)", third.Target.Compute, 143, 180)
	if third.MIG == nil || third.MIG.ComputeOfProfile == nil || third.ComputeSource != metrics.DCGMGREngineActive {
		t.Fatalf("3g.40gb: MIG status %+v from %s", third.MIG, third.ComputeSource)
	}
	milli("3g.40gb compute against the instance", third.MIG.ComputeOfProfile, 333, 420)
	if third.MIG.SmallestProfile != "3g.40gb" {
		t.Errorf("3g.40gb: smallest profile %q, want 3g.40gb (34500Mi needs more than the 19 GB of 1g.20gb and 2g.20gb)", third.MIG.SmallestProfile)
	}

	// Off MIG, 1.37 is impossible: dropped and counted as out of range.
	whole := rec("whole")
	milli("whole-GPU compute target", whole.Target.Compute, 900, 1000)
	if whole.MIG == nil || whole.MIG.MeasuredProfile != "" || whole.MIG.ComputeOfProfile != nil {
		t.Errorf("whole GPU: MIG status %+v, want advice only", whole.MIG)
	}
	if d := dropped(metrics.SignalCompute, metrics.DropOutOfRange) - outOfRange; d != 60 {
		t.Errorf("samples_dropped_total{out_of_range} += %v, want 60 (the whole GPU's 1.37 samples of the last hour)", d)
	}
}

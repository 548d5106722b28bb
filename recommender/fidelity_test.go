package recommender

import (
	"strings"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 4 (issue 13): 48 h of DCGM_FI_DEV_GPU_UTIL at 88–99 % with FB_USED 9000 MiB and
// no profiling field. GPU_UTIL says a kernel ran, not how much of the GPU it used, so it
// never yields Exclusive, and the recommendation's confidence stays under the
// LowConfidence threshold (so the webhook's default minimum does not apply it), with
// LowConfidence=True naming the reason. A low GPU_UTIL (an upper bound of activity)
// keeps its 80 % cap and no LowConfidence.
func TestGPUUtilAloneNeverExclusive(t *testing.T) {
	objs := singlePodWorkloads("ml", "busy", "calm")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	pods := podsOf(objs)
	busy := make([]float64, n)
	for i := range busy {
		busy[i] = 88 + float64(i%12) // 88–99 %
	}
	for i, p := range pods {
		uuid := "GPU-" + string(rune('a'+i))
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, uuid), start, 30*time.Second, promtest.Repeat(9000, n)...)
		util := busy
		if i == 1 {
			util = promtest.Repeat(20, n)
		}
		h.prom.Add(t, dcgmLabels(metrics.DCGMGPUUtil, p, uuid), start, 30*time.Second, util...)
	}
	h.runCycles(t, 1, nil)

	st := h.gfr(t, "ml", "busy").Status
	if len(st.ContainerRecommendations) != 1 {
		t.Fatalf("busy: no recommendation: %+v", st.Conditions)
	}
	cr := st.ContainerRecommendations[0]
	if cr.ComputeSource != metrics.DCGMGPUUtil {
		t.Fatalf("busy: compute source %q", cr.ComputeSource)
	}
	if st.SharingMode == gpufracv1.SharingModeExclusive || cr.SharingMode == gpufracv1.SharingModeExclusive {
		t.Errorf("busy: Exclusive from GPU_UTIL alone (%s)", cr.SharingModeReason)
	}
	if !strings.Contains(cr.SharingModeReason, metrics.DCGMGPUUtil) {
		t.Errorf("busy: sharing-mode reason does not name GPU_UTIL: %q", cr.SharingModeReason)
	}
	// 9000 MiB of 80 GiB: TimeSlicing, no compute reserved, so no whole GPU: the
	// measured memory applies at GPU_UTIL's usual confidence cap.
	if cr.PartitionsCompute() || *st.ConfidencePercent != int32(estimate.LowFidelityComputeConfidence*100) {
		t.Errorf("busy: %s (compute reserved %v) at %d%%, want time-slicing without compute at %.0f%%", cr.SharingMode, cr.PartitionsCompute(), *st.ConfidencePercent, estimate.LowFidelityComputeConfidence*100)
	}

	st = h.gfr(t, "ml", "calm").Status
	if len(st.ContainerRecommendations) != 1 {
		t.Fatalf("calm: no recommendation: %+v", st.Conditions)
	}
	if *st.ConfidencePercent != int32(estimate.LowFidelityComputeConfidence*100) {
		t.Errorf("calm: confidence %d%%, want the GPU_UTIL cap %.0f%%", *st.ConfidencePercent, estimate.LowFidelityComputeConfidence*100)
	}
	if c := condition(st, gpufracv1.ConditionLowConfidence); !isFalse(c) {
		t.Errorf("calm: LowConfidence %+v", c)
	}
}

// Kind 4's neighbours: the fidelity of compute is that of the samples the histogram
// holds, not of the latest one. "mixed": 40 h of DCGM_FI_DEV_GPU_UTIL at 95 % (no
// profiling field), then 8 h with DCGM_FI_PROF_SM_ACTIVE at 0.3: most of the histogram
// is GPU_UTIL's upper bounds, so it is not Exclusive at full confidence (was: compute 1,
// Exclusive, 100 %, source SM_ACTIVE). "paused": 48 h of SM_ACTIVE at 0.9, then the
// profiling field missing for three cycles (paused by a profiler, not yet collected
// after an exporter restart) with GPU_UTIL at 95: three minutes of GPU_UTIL do not turn
// a measured whole GPU into time-slicing at 80 % (was: TimeSlicing, no compute reserved).
func TestComputeFidelityIsTheHistorys(t *testing.T) {
	objs := singlePodWorkloads("ml", "mixed", "paused")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	const step = 30 * time.Second
	n, old := 48*120, 40*120
	start := h.now.Add(-time.Duration(n-1) * step)
	pods := podsOf(objs)
	sm := promtest.Repeat(0.3, n)
	for i := range old {
		sm[i] = promtest.Gap()
	}
	for i, p := range pods {
		uuid := "GPU-" + string(rune('a'+i))
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, uuid), start, step, promtest.Repeat(9000, n)...)
		h.prom.Add(t, dcgmLabels(metrics.DCGMGPUUtil, p, uuid), start, step, promtest.Repeat(95, n)...)
		if i == 1 {
			sm = promtest.Repeat(0.9, n)
		}
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, uuid), start, step, sm...)
	}
	h.runCycles(t, 1, nil)
	paused := h.gfr(t, "ml", "paused").Status
	if paused.SharingMode != gpufracv1.SharingModeExclusive {
		t.Fatalf("paused: %s before the pause, want Exclusive from SM_ACTIVE 0.9", paused.SharingMode)
	}
	h.runCycles(t, 4, func(now time.Time) {
		for i, p := range pods {
			uuid := "GPU-" + string(rune('a'+i))
			h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, uuid), now.Add(-step), step, 9000, 9000)
			h.prom.Add(t, dcgmLabels(metrics.DCGMGPUUtil, p, uuid), now.Add(-step), step, 95, 95)
			if i == 0 {
				h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, uuid), now.Add(-step), step, 0.3, 0.3)
			}
		}
	})

	st := h.gfr(t, "ml", "mixed").Status
	cr := st.ContainerRecommendations[0]
	if st.SharingMode == gpufracv1.SharingModeExclusive || cr.PartitionsCompute() || cr.ComputeSource != metrics.DCGMGPUUtil ||
		*st.ConfidencePercent > int32(estimate.LowFidelityComputeConfidence*100) {
		t.Errorf("mixed: %s (compute reserved %v) from %s at %d%%, want no Exclusive from a GPU_UTIL history, its confidence cap and source",
			st.SharingMode, cr.PartitionsCompute(), cr.ComputeSource, *st.ConfidencePercent)
	}
	st = h.gfr(t, "ml", "paused").Status
	cr = st.ContainerRecommendations[0]
	if st.SharingMode != gpufracv1.SharingModeExclusive || cr.ComputeSource != metrics.DCGMSMActive || *st.ConfidencePercent != 100 ||
		cr.Target.Compute.Cmp(*paused.ContainerRecommendations[0].Target.Compute) != 0 {
		t.Errorf("paused: %s, compute %v from %s at %d%% after three cycles of GPU_UTIL, want Exclusive, %v from SM_ACTIVE at 100%%",
			st.SharingMode, cr.Target.Compute, cr.ComputeSource, *st.ConfidencePercent, paused.ContainerRecommendations[0].Target.Compute)
	}
	// Whatever field each sample came from, every sample is in the history: both
	// workloads have one at every step, so the same compute means and history span (the
	// field of each sample, metrics.Series.Sources, stays aligned with the samples).
	state := func(name string) *history.ContainerState {
		return h.rec.model.Container(history.ContainerKey{WorkloadKey: history.WorkloadKey{Namespace: "ml", Kind: "Deployment", Name: name}, Container: "main"})
	}
	if m, p := state("mixed"), state("paused"); m.ComputeSamples != p.ComputeSamples || m.Span() != p.Span() || m.Span() < 48*time.Hour {
		t.Errorf("mixed: %d compute means over %v, paused: %d over %v: want the same, at least 48h", m.ComputeSamples, m.Span(), p.ComputeSamples, p.Span())
	}
}

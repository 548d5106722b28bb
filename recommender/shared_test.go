package recommender

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 6 (issue 13): three pods of three workloads on one time-sliced GPU each carry
// the device's DCGM_FI_PROF_SM_ACTIVE 0.71 (a profiling field is always the whole
// GPU's). The copies are an upper bound shared by the co-tenants: the sum of their
// compute targets stays within one GPU (not 3 × 828m), none is Exclusive, and
// LowConfidence=True says SharedDeviceValues.
func TestCopiedDeviceValuesAreShared(t *testing.T) {
	var objs []client.Object
	names := []string{"a", "b", "c"}
	for _, n := range names {
		objs = append(append(objs, deployment("ml", n, 1)...), gfa("ml", n, n))
	}
	h := newEngineHarness(t, objs, metrics.DCGM{})
	for i, p := range podsOf(objs) {
		// FB_USED per pod (dcgm-exporter's per-process mode), SM_ACTIVE the device's.
		addDCGM(t, h.prom, p, "GPU-shared", h.now, 48*120, float64(5000+1000*i), 0.71)
	}
	h.runCycles(t, 1, nil)
	sum := 0.0
	for _, n := range names {
		st := h.gfr(t, "ml", n).Status
		if len(st.ContainerRecommendations) != 1 {
			t.Fatalf("%s: no recommendation: %+v", n, st.Conditions)
		}
		cr := st.ContainerRecommendations[0]
		c := cr.Target.Compute.AsApproximateFloat64()
		sum += c
		if c > 0.71 {
			t.Errorf("%s: compute target %v above the device's whole value 0.71", n, c)
		}
		if st.SharingMode == gpufracv1.SharingModeExclusive {
			t.Errorf("%s: Exclusive from copied values (%s)", n, cr.SharingModeReason)
		}
		if lc := condition(st, gpufracv1.ConditionLowConfidence); !isTrue(lc) || lc.Reason != ReasonSharedDevice {
			t.Errorf("%s: want LowConfidence=True %s, got %+v", n, ReasonSharedDevice, lc)
		}
	}
	if sum > 1 {
		t.Errorf("co-tenants' compute targets sum to %.3f GPUs on one GPU", sum)
	}
	// The device's 0.71 split three ways, ×1.15 margin, each: about 0.27.
	if want := 0.71 / 3 * 1.15; sum < 3*want-0.01 {
		t.Errorf("compute targets sum %.3f, want ≈ 3 × %.3f (the device value shared, not dropped)", sum, want)
	}
}

// Kind 6 (issue 13): two pods on one GPU with EQUAL per-process agent values (two
// replicas of one model hold the same memory) are two measurements, not a copied
// device value: no SharedDeviceValues, confidence not capped.
func TestEqualAgentValuesAreNotShared(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.Agent)
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	for _, p := range podsOf(objs) {
		lbl := func(metric string) map[string]string {
			return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "container": "main",
				"UUID": "GPU-mps", "node": "node-1", "instance": "10.0.0.9:9400"}
		}
		h.prom.Add(t, lbl(metrics.Agent.Fields(metrics.SignalMemory)[0].Metric), start, 30*time.Second, promtest.Repeat(15866*(1<<20), n)...)
		h.prom.Add(t, lbl(metrics.Agent.Fields(metrics.SignalCompute)[0].Metric), start, 30*time.Second, promtest.Repeat(0.3, n)...)
	}
	h.runCycles(t, 1, nil)
	st := h.gfr(t, "ml", "sd").Status
	if len(st.ContainerRecommendations) != 1 {
		t.Fatalf("no recommendation: %+v", st.Conditions)
	}
	if s := h.rec.model.Container(containerKey("ml", "sd", "main")); s == nil || s.SharedSamples != 0 {
		t.Errorf("equal per-process values marked shared: %+v", s)
	}
	if lc := condition(st, gpufracv1.ConditionLowConfidence); !isFalse(lc) {
		t.Errorf("LowConfidence %+v, want False (%s)", lc, fmt.Sprint(*st.ConfidencePercent))
	}
	if c := st.ContainerRecommendations[0].Target.Compute.AsApproximateFloat64(); c < 0.3*1.15-0.001 {
		t.Errorf("compute %v: per-process values split as if copied", c)
	}
}

func containerKey(ns, deployment, container string) history.ContainerKey {
	return history.ContainerKey{WorkloadKey: history.WorkloadKey{Namespace: ns, Kind: "Deployment", Name: deployment}, Container: container}
}

// Kind 14 (issue 13): with MPS, two pods in two namespaces both carry the device's
// DCGM_FI_DEV_FB_USED 15866 MiB on one UUID; only the first namespace has an
// autoscaler, so the data queries never read the second. The copy is still found (a
// companion query over every namespace, grouped by device): the pod's memory is a
// device-wide upper bound, LowConfidence=True (SharedDeviceValues) and confidence at
// most 40 %, so the admission webhook does not apply it as the pod's own.
func TestCopiesInOtherNamespacesAreShared(t *testing.T) {
	mine := deployment("ml", "sd", 1)
	other := deployment("team-b", "infer", 1)
	objs := append(append(append([]client.Object{}, mine...), other...), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	n := 48 * 120
	// Per-pod activity differs (no compute copy); FB_USED is the device's, copied.
	addDCGM(t, h.prom, podsOf(mine)[0], "GPU-mps", h.now, n, 15866, 0.3)
	addDCGM(t, h.prom, podsOf(other)[0], "GPU-mps", h.now, n, 15866, 0.45)
	h.runCycles(t, 1, nil)
	st := h.gfr(t, "ml", "sd").Status
	if len(st.ContainerRecommendations) != 1 {
		t.Fatalf("no recommendation: %+v", st.Conditions)
	}
	if s := h.rec.model.Container(containerKey("ml", "sd", "main")); s == nil || s.SharedSamples == 0 {
		t.Errorf("the copy in namespace team-b was not compared: %+v", s)
	}
	if lc := condition(st, gpufracv1.ConditionLowConfidence); !isTrue(lc) || lc.Reason != ReasonSharedDevice {
		t.Errorf("want LowConfidence=True %s, got %+v", ReasonSharedDevice, lc)
	}
	if st.ConfidencePercent == nil || *st.ConfidencePercent > 40 {
		t.Errorf("confidence %v, want at most 40 (a device-wide value is not the pod's own)", st.ConfidencePercent)
	}
	// Its own compute (0.3, not a copy) is not split.
	if c := st.ContainerRecommendations[0].Target.Compute.AsApproximateFloat64(); c < 0.3*1.15-0.001 {
		t.Errorf("compute %v: the pod's own activity was split as if copied", c)
	}
}

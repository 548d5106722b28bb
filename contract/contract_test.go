package contract

import (
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func autoscaler(name string) *gpufracv1.GPUFractionAutoscaler {
	return &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: gpufracv1.GPUFractionAutoscalerSpec{TargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name}}}
}

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// recommendation is a provided recommendation of gfa at confidence (nil: none) for one
// container main of 4Gi and 350m.
func recommendation(gfa *gpufracv1.GPUFractionAutoscaler, confidence *int32) *gpufracv1.GPUFractionRecommendation {
	r := &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: gfa.Namespace, Name: gfa.Name,
		OwnerReferences: []metav1.OwnerReference{{Kind: "GPUFractionAutoscaler", Name: gfa.Name, UID: gfa.UID}}},
		Spec: gpufracv1.GPUFractionRecommendationSpec{TargetRef: gfa.Spec.TargetRef}}
	r.Status.ConfidencePercent = confidence
	r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main",
		Target: gpufracv1.GPUResources{Memory: q("4Gi"), Compute: q("350m")}}}
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "x"})
	return r
}

// TestApplies: every reason a recommendation does not apply to pods, in the order the
// webhook and the updater check them, and the boundary of the minimum confidence.
func TestApplies(t *testing.T) {
	gfa := autoscaler("web")
	for _, tc := range []struct {
		name    string
		gfr     func() *gpufracv1.GPUFractionRecommendation
		min     int32
		want    Reason
		message string
	}{
		{"applies", func() *gpufracv1.GPUFractionRecommendation { return recommendation(gfa, ptr.To[int32](80)) }, 50, "", ""},
		{"at the minimum", func() *gpufracv1.GPUFractionRecommendation { return recommendation(gfa, ptr.To[int32](50)) }, 50, "", ""},
		{"below the minimum", func() *gpufracv1.GPUFractionRecommendation { return recommendation(gfa, ptr.To[int32](49)) }, 50, ReasonLowConfidence, "confidence 49% is below the webhook's minimum 50%"},
		{"no confidence, minimum 0", func() *gpufracv1.GPUFractionRecommendation { return recommendation(gfa, nil) }, 0, "", ""},
		{"no confidence, minimum 1", func() *gpufracv1.GPUFractionRecommendation { return recommendation(gfa, nil) }, 1, ReasonLowConfidence, "confidence 0%"},
		{"owned by an earlier autoscaler", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](10))
			r.OwnerReferences[0].UID = "earlier"
			return r
		}, 50, ReasonStale, "earlier autoscaler"},
		{"orphaned: no owner reference", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.OwnerReferences = nil
			return r
		}, 50, ReasonStale, "no ownerReference to the autoscaler"},
		{"orphaned, another kind's reference only", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.OwnerReferences = []metav1.OwnerReference{{Kind: "ConfigMap", Name: "web", UID: gfa.UID, Controller: ptr.To(true)}}
			return r
		}, 50, ReasonStale, "no ownerReference to the autoscaler"},
		{"owned as the controller (as the recommender creates it)", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.OwnerReferences[0].Controller = ptr.To(true)
			return r
		}, 50, "", ""},
		{"made for the former target (spec.targetRef changed, not written since)", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.Spec.TargetRef = autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "former"}
			return r
		}, 50, ReasonStale, "made for Deployment former, not Deployment web"},
		{"made for another kind of the same name", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.Spec.TargetRef = autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web"}
			return r
		}, 50, ReasonStale, "made for StatefulSet web"},
		{"no spec.targetRef (written before it was kept)", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.Spec.TargetRef = autoscalingv1.CrossVersionObjectReference{}
			return r
		}, 50, "", ""},
		{"not provided", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](10))
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionFalse, Reason: "x"})
			return r
		}, 50, ReasonNotProvided, "RecommendationProvided"},
		{"no containers", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.Status.ContainerRecommendations = nil
			return r
		}, 50, ReasonNotProvided, "RecommendationProvided"},
		{"no condition yet but containers", func() *gpufracv1.GPUFractionRecommendation {
			r := recommendation(gfa, ptr.To[int32](80))
			r.Status.Conditions = nil
			return r
		}, 50, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := Applies(gfa, tc.gfr(), tc.min)
			if got != tc.want || !strings.Contains(msg, tc.message) || (tc.want == "") != (msg == "") {
				t.Errorf("Applies = %q, %q; want %q with %q", got, msg, tc.want, tc.message)
			}
		})
	}
	if MinConfidence(nil) != DefaultMinConfidence || MinConfidence(ptr.To[int32](0)) != 0 {
		t.Error("MinConfidence")
	}
	if ValidateMinConfidence(ptr.To[int32](101)) == nil || ValidateMinConfidence(ptr.To[int32](-1)) == nil || ValidateMinConfidence(nil) != nil {
		t.Error("ValidateMinConfidence")
	}
}

// TestTargetsOf: units, absent values, container policies (Off, controlled resources,
// compute only where partitioned), the first of duplicate names, and held compute.
func TestTargetsOf(t *testing.T) {
	gfa := autoscaler("web")
	off := gpufracv1.ContainerScalingModeOff
	gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{
		{ContainerName: "sidecar", Mode: &off},
		{ContainerName: "memonly", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}},
	}}
	gfr := recommendation(gfa, ptr.To[int32](80))
	gfr.Status.ContainerRecommendations = append(gfr.Status.ContainerRecommendations,
		gpufracv1.ContainerRecommendation{ContainerName: "main", Target: gpufracv1.GPUResources{Memory: q("1Gi")}}, // duplicate: ignored
		gpufracv1.ContainerRecommendation{ContainerName: "sidecar", Target: gpufracv1.GPUResources{Memory: q("1Gi")}},
		gpufracv1.ContainerRecommendation{ContainerName: "memonly", Target: gpufracv1.GPUResources{Memory: q("2Gi"), Compute: q("100m")},
			LowerBound: gpufracv1.GPUResources{Memory: q("1Gi")}, UpperBound: gpufracv1.GPUResources{Memory: q("3Gi")}, ObservedPeakMemory: q("1536Mi")})
	got := TargetsOf(gfa, gfr)
	if len(got) != 2 {
		t.Fatalf("targets %v, want main and memonly (sidecar is Off)", got)
	}
	m := got["main"]
	if m.Container != "main" || m.Memory != 4<<30 || m.Compute != 350 || m.LowerMemory != -1 || m.UpperCompute != -1 || m.PeakMemory != -1 ||
		!m.ControlsMemory || !m.ControlsCompute || m.Recommendation != &gfr.Status.ContainerRecommendations[0] {
		t.Errorf("main %+v", m)
	}
	mo := got["memonly"]
	if mo.Memory != 2<<30 || mo.LowerMemory != 1<<30 || mo.UpperMemory != 3<<30 || mo.PeakMemory != 1536<<20 || !mo.ControlsMemory || mo.ControlsCompute {
		t.Errorf("memonly %+v", mo)
	}
	// A horizontal autoscaler holds compute: at least what the pods hold.
	gfa.Status.Updater = &gpufracv1.UpdaterStatus{
		Conditions:  []metav1.Condition{{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionTrue, Reason: "x"}},
		HeldCompute: []gpufracv1.ContainerAllocation{{ContainerName: "main", Compute: q("500m")}},
	}
	if m := TargetsOf(gfa, gfr)["main"]; m.Compute != 500 || m.UpperCompute != 500 {
		t.Errorf("held: compute %d upper %d, want 500 500", m.Compute, m.UpperCompute)
	}
	if len(TargetsOf(gfa, nil)) != 0 {
		t.Error("nil recommendation has targets")
	}
}

// TestRequestPeakMemory checks the peak a request may be sized by: the observed peak,
// widened by the young-workload margin while the workload is young, and unknown (-1)
// without an observed peak.
func TestRequestPeakMemory(t *testing.T) {
	gfa := autoscaler("web")
	for _, tc := range []struct {
		name   string
		peak   *resource.Quantity
		margin int32
		want   int64
	}{
		{"mature: the peak", q("10Gi"), 0, 10 << 30},
		{"young, n=4: the peak + 25 %", q("10Gi"), 25, 12.5 * (1 << 30)},
		{"no peak: unknown", nil, 50, -1},
	} {
		gfr := recommendation(gfa, ptr.To[int32](50))
		gfr.Status.ContainerRecommendations[0].ObservedPeakMemory = tc.peak
		gfr.Status.ContainerRecommendations[0].YoungMarginPercent = tc.margin
		m := TargetsOf(gfa, gfr)["main"]
		if m.RequestPeakMemory != tc.want || (tc.peak != nil && m.PeakMemory != 10<<30) {
			t.Errorf("%s: RequestPeakMemory %d, PeakMemory %d; want %d, the observed peak", tc.name, m.RequestPeakMemory, m.PeakMemory, tc.want)
		}
	}
}

// TestMemoryLimitTarget: a recommendation's memoryLimit above its target is the limit the
// webhook writes (MemoryLimit); the target and bounds, which the updater compares pods
// with, stay as recommended; a limit not above the target, or none, is the target.
func TestMemoryLimitTarget(t *testing.T) {
	gfa := autoscaler("web")
	for _, tc := range []struct {
		name  string
		limit *resource.Quantity
		want  int64
	}{
		{"no limit: the target", nil, 4 << 30},
		{"a limit above the target", q("6Gi"), 6 << 30},
		{"a limit at the target: the target", q("4Gi"), 4 << 30},
		{"a limit under the target: the target", q("3Gi"), 4 << 30},
	} {
		gfr := recommendation(gfa, ptr.To[int32](50))
		r := &gfr.Status.ContainerRecommendations[0]
		r.LowerBound.Memory, r.UpperBound.Memory, r.MemoryLimit = q("2Gi"), q("6Gi"), tc.limit
		m := TargetsOf(gfa, gfr)["main"]
		if m.MemoryLimit != tc.want || m.Memory != 4<<30 || m.LowerMemory != 2<<30 || m.UpperMemory != 6<<30 {
			t.Errorf("%s: limit %d, memory %d [%d, %d]; want limit %d, memory 4Gi [2Gi, 6Gi]", tc.name, m.MemoryLimit, m.Memory, m.LowerMemory, m.UpperMemory, tc.want)
		}
	}
}

// TestComputeRequestTarget: a time-sliced recommendation's computeRequest reaches the
// Target in milli-GPU; it is absent (-1) where compute is partitioned (Compute is then
// reserved and enforced), where the policy does not control compute, and when the
// recommendation has none.
func TestComputeRequestTarget(t *testing.T) {
	rec := func(mode gpufracv1.SharingMode, req string) gpufracv1.ContainerRecommendation {
		r := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: mode,
			Target: gpufracv1.GPUResources{Memory: resource.NewQuantity(1<<30, resource.BinarySI), Compute: resource.NewMilliQuantity(400, resource.DecimalSI)}}
		if req != "" {
			q := resource.MustParse(req)
			r.ComputeRequest = &q
		}
		return r
	}
	memOnly := &gpufracv1.GPUFractionAutoscaler{Spec: gpufracv1.GPUFractionAutoscalerSpec{ResourcePolicy: &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{
		{ContainerName: "*", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}}}}}}
	for _, tc := range []struct {
		name string
		gfa  *gpufracv1.GPUFractionAutoscaler
		rec  gpufracv1.ContainerRecommendation
		want int64
	}{
		{name: "time-slicing", rec: rec(gpufracv1.SharingModeTimeSlicing, "123m"), want: 123},
		{name: "time-slicing without one", rec: rec(gpufracv1.SharingModeTimeSlicing, ""), want: -1},
		{name: "MPS", rec: rec(gpufracv1.SharingModeMPS, "123m"), want: -1},
		{name: "compute not controlled", gfa: memOnly, rec: rec(gpufracv1.SharingModeTimeSlicing, "123m"), want: -1},
	} {
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{tc.rec}
		if got := TargetsOf(tc.gfa, gfr)["main"].ComputeRequest; got != tc.want {
			t.Errorf("%s: ComputeRequest %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestIncompleteData: every MetricsUnavailable reason of a gap in the data (a failed or
// partial read, no sample while pods run, every sample filtered, an exporter down) holds
// the updater's shrinks, with the reason in the message; a reason whose recommendation
// was written from valid samples, the condition False, and no recommendation do not.
func TestIncompleteData(t *testing.T) {
	gap := []string{gpufracv1.ReasonPrometheusError, gpufracv1.ReasonPartialResponse, gpufracv1.ReasonNoSamplesWhileRunning,
		gpufracv1.ReasonAllSamplesFiltered, gpufracv1.ReasonExporterDown, gpufracv1.ReasonHistoryIncomplete}
	with := func(status metav1.ConditionStatus, reason string) *gpufracv1.GPUFractionRecommendation {
		r := recommendation(autoscaler("web"), ptr.To[int32](80))
		meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionMetricsUnavailable, Status: status, Reason: reason, Message: "m"})
		return r
	}
	for _, reason := range gap {
		if got := IncompleteData(with(metav1.ConditionTrue, reason)); !strings.HasPrefix(got, reason+": ") {
			t.Errorf("%s: IncompleteData = %q, want the reason and message (shrinks held)", reason, got)
		}
		if got := IncompleteData(with(metav1.ConditionFalse, reason)); got != "" {
			t.Errorf("%s False: IncompleteData = %q, want none", reason, got)
		}
	}
	for _, reason := range []string{"StaleSeries", "WrongDevice", "SamplesPresent"} {
		if got := IncompleteData(with(metav1.ConditionTrue, reason)); got != "" {
			t.Errorf("%s (written from valid samples): IncompleteData = %q, want none", reason, got)
		}
	}
	if IncompleteData(nil) != "" || IncompleteData(recommendation(autoscaler("web"), nil)) != "" {
		t.Error("IncompleteData of no recommendation or no condition is not empty")
	}
}

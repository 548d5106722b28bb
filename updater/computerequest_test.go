package updater

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
)

// TestComputeRequestGrowth: a time-sliced pod whose recommended computeRequest rose by
// Rules.ComputeRequestGrowth (and MinComputeRequestStep) over the request it was placed
// with grows, not urgently and inside its bounds, at any age; a smaller rise, a fall, a
// pod placed without a request, a recommendation without one, a young workload's
// recommendation (its request rises as its first hours are seen, and its pods take the
// new one when they are replaced for their memory) and the rule off replace nothing.
func TestComputeRequestGrowth(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name           string
		placed, recent int64 // milli-GPU: the written request, the recommended one
		growth         float64
		youngMargin    int32 // the recommendation's youngMarginPercent
		want           bool
	}{
		{"grew by the ratio", 200, 250, DefaultComputeRequestGrowth, 0, true},
		{"grew by more", 200, 600, DefaultComputeRequestGrowth, 0, true},
		{"grew by less than the ratio", 200, 249, DefaultComputeRequestGrowth, 0, false},
		{"grew by the ratio but less than the step", 40, 59, DefaultComputeRequestGrowth, 0, false},
		{"grew by the ratio and the step", 40, 60, DefaultComputeRequestGrowth, 0, true},
		{"fell", 400, 100, DefaultComputeRequestGrowth, 0, false},
		{"placed without a request", 0, 600, DefaultComputeRequestGrowth, 0, false},
		{"recommendation without a request", 200, -1, DefaultComputeRequestGrowth, 0, false},
		{"young workload", 200, 600, DefaultComputeRequestGrowth, 50, false},
		{"no longer young", 200, 600, DefaultComputeRequestGrowth, 0, true},
		{"off", 200, 600, -1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc := PodAllocation{Containers: map[string]Alloc{"main": {Memory: 20 * gib, Compute: -1, ComputeRequest: tc.placed}}}
			tgt := contract.Target{Container: "main", Memory: 20 * gib, LowerMemory: 10 * gib, UpperMemory: 30 * gib,
				Compute: -1, LowerCompute: -1, UpperCompute: -1, ComputeRequest: tc.recent, PeakMemory: 15 * gib, ControlsMemory: true,
				Recommendation: &gpufracv1.ContainerRecommendation{ContainerName: "main", YoungMarginPercent: tc.youngMargin}}
			r := Rules{Threshold: DefaultThreshold, MinPodAge: DefaultMinPodAge, NearLimit: DefaultNearLimit, UrgentGrowth: true, ComputeRequestGrowth: tc.growth}
			n := Evaluate(alloc, map[string]contract.Target{"main": tgt}, PodFacts{}, r) // age 0: younger than MinPodAge
			if n.Grow != tc.want || n.Shrink || n.Urgent || n.OutOfBounds {
				t.Fatalf("need %+v, want grow %v only (not urgent, inside the bounds)", n, tc.want)
			}
			if tc.want && (len(n.Reasons) != 1 || !strings.Contains(n.Reasons[0], "computeRequest")) {
				t.Errorf("reasons %q", n.Reasons)
			}
		})
	}
}

// TestReadAllocationComputeRequest: the applied record's writtenComputeRequest is the
// request the pod was placed with; a record without one reads as none (0).
func TestReadAllocationComputeRequest(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	for _, tc := range []struct {
		record string
		want   int64
	}{
		{`{"backend":"annotations","autoscaler":"a","recommendationGeneration":1,"recommendationResourceVersion":"1","confidencePercent":90,"containers":[{"name":"main","memory":"3Gi","writtenMemory":"3Gi","writtenComputeRequest":"180m"}]}`, 180},
		{`{"backend":"annotations","autoscaler":"a","recommendationGeneration":1,"recommendationResourceVersion":"1","confidencePercent":90,"containers":[{"name":"main","memory":"3Gi","writtenMemory":"3Gi"}]}`, 0},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpufracv1.AnnotationApplied: tc.record}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits("nvidia.com/gpu", "1")}}}}}
		a := ReadAllocation(pod, gpufracv1.BackendAnnotations, cfg, 0)
		if a.RecordError != nil || a.Containers["main"].ComputeRequest != tc.want {
			t.Errorf("record %s: %+v (error %v), want computeRequest %d", tc.record, a.Containers["main"], a.RecordError, tc.want)
		}
	}
}

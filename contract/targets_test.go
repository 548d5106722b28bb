package contract

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestPlacedCompute: a partitioned, controlled container is placed by its compute target;
// a time-sliced one by its placement-only request; one with neither by nothing.
func TestPlacedCompute(t *testing.T) {
	for _, tc := range []struct {
		name        string
		t           Target
		milli       int64
		request, ok bool
	}{
		{"partitioned", Target{Compute: 300, ControlsCompute: true, ComputeRequest: -1}, 300, false, true},
		{"time-sliced", Target{Compute: 300, ComputeRequest: 120}, 120, true, true},
		{"neither", Target{Compute: -1, ComputeRequest: -1}, -1, true, false},
	} {
		if v, req, ok := tc.t.PlacedCompute(); ok != tc.ok || (ok && (v != tc.milli || req != tc.request)) {
			t.Errorf("%s: %d, %v, %v; want %d, %v, %v", tc.name, v, req, ok, tc.milli, tc.request, tc.ok)
		}
	}
}

// TestWithMinMemory: a controlled memory target below the container policy's minMemory
// (at most one GPU) is raised to it, bounds at least it where present; others, and
// containers whose memory is not controlled, are unchanged.
func TestWithMinMemory(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		name                 string
		policy               string // containerName of the policy
		min                  string
		gpu                  int64
		ctrl                 bool
		mem, lower, upper    int64 // the target's, before
		want, wlower, wupper int64
		// wpeak is RequestPeakMemory after, from gi/2 before: a raised target drops it
		// (the floor must hold whatever the pod was seen to use), a kept one keeps it.
		wpeak int64
	}{
		{"below: raised", "main", "4Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 4 * gi, 4 * gi, 4 * gi, -1},
		{"below, * policy", "*", "4Gi", 80 * gi, true, 2 * gi, gi, 5 * gi, 4 * gi, 4 * gi, 5 * gi, -1},
		{"above: kept", "main", "1Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, gi / 2},
		{"equal: kept", "main", "2Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, gi / 2},
		{"past one GPU: one GPU", "main", "100Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 80 * gi, 80 * gi, 80 * gi, -1},
		{"GPU size unknown: uncapped", "main", "100Gi", 0, true, 2 * gi, gi, 3 * gi, 100 * gi, 100 * gi, 100 * gi, -1},
		{"absent bounds stay absent", "main", "4Gi", 80 * gi, true, 2 * gi, -1, -1, 4 * gi, -1, -1, -1},
		{"no memory target", "main", "4Gi", 80 * gi, true, -1, -1, -1, -1, -1, -1, gi / 2},
		{"memory not controlled", "main", "4Gi", 80 * gi, false, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, gi / 2},
		{"another container's policy", "sidecar", "4Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, gi / 2},
	} {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		min := resource.MustParse(tc.min)
		gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: tc.policy, MinMemory: &min}}}
		targets := map[string]Target{"main": {Container: "main", Memory: tc.mem, LowerMemory: tc.lower, UpperMemory: tc.upper, ControlsMemory: tc.ctrl, RequestPeakMemory: gi / 2}}
		got := WithMinMemory(gfa, targets, tc.gpu)["main"]
		if got.Memory != tc.want || got.LowerMemory != tc.wlower || got.UpperMemory != tc.wupper {
			t.Errorf("%s: %d [%d, %d], want %d [%d, %d]", tc.name, got.Memory, got.LowerMemory, got.UpperMemory, tc.want, tc.wlower, tc.wupper)
		}
		if got.RequestPeakMemory != tc.wpeak {
			t.Errorf("%s: request peak %d, want %d", tc.name, got.RequestPeakMemory, tc.wpeak)
		}
	}
	if got := WithMinMemory(nil, map[string]Target{"main": {Memory: 1, ControlsMemory: true}}, 0)["main"].Memory; got != 1 {
		t.Errorf("nil autoscaler: %d, want 1", got)
	}
}

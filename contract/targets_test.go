package contract

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// TestWithPolicy: a controlled memory target below the container policy's minMemory
// (at most one GPU) is raised to it, bounds at least it where present; others, and
// containers whose memory is not controlled, are unchanged.
func TestWithPolicy(t *testing.T) {
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
		// (the floor must hold whatever the pod was seen to use), a kept one raises it to
		// minMemory where below (the same floor once the recommendation holds it; it was
		// kept at gi/2 before) and keeps it above.
		wpeak int64
	}{
		{"below: raised", "main", "4Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 4 * gi, 4 * gi, 4 * gi, -1},
		{"below, * policy", "*", "4Gi", 80 * gi, true, 2 * gi, gi, 5 * gi, 4 * gi, 4 * gi, 5 * gi, -1},
		{"above: kept", "main", "1Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, gi},
		{"above, peak above minMemory: kept", "main", "256Mi", 80 * gi, true, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, gi / 2},
		{"equal: kept", "main", "2Gi", 80 * gi, true, 2 * gi, gi, 3 * gi, 2 * gi, gi, 3 * gi, 2 * gi},
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
		got := WithPolicy(gfa, targets, tc.gpu)["main"]
		if got.Memory != tc.want || got.LowerMemory != tc.wlower || got.UpperMemory != tc.wupper {
			t.Errorf("%s: %d [%d, %d], want %d [%d, %d]", tc.name, got.Memory, got.LowerMemory, got.UpperMemory, tc.want, tc.wlower, tc.wupper)
		}
		if got.RequestPeakMemory != tc.wpeak {
			t.Errorf("%s: request peak %d, want %d", tc.name, got.RequestPeakMemory, tc.wpeak)
		}
	}
	if got := WithPolicy(nil, map[string]Target{"main": {Memory: 1, ControlsMemory: true}}, 0)["main"].Memory; got != 1 {
		t.Errorf("nil autoscaler: %d, want 1", got)
	}
}

// TestYoungShare: a young container (youngMarginPercent above 0) whose memoryLimit is at
// or above its upper bound is written and compared at that upper bound, its share of the
// GPU (YoungShare), with the observed-peak request kept and the need still the
// recommendation's target; a mature one, one without such a limit, or one whose
// upper bound is the target keeps the target. A minMemory above the need keeps the share
// where the share holds it and replaces it above (no request either way), and PodMemory
// counts the need (the floor where it is higher).
func TestYoungShare(t *testing.T) {
	const gi = int64(1) << 30
	rec := func(target, upper, limit int64, margin int32) *gpufracv1.GPUFractionRecommendation {
		c := gpufracv1.ContainerRecommendation{ContainerName: "main", YoungMarginPercent: margin,
			Target:             gpufracv1.GPUResources{Memory: resource.NewQuantity(target, resource.BinarySI)},
			LowerBound:         gpufracv1.GPUResources{Memory: resource.NewQuantity(target/2, resource.BinarySI)},
			UpperBound:         gpufracv1.GPUResources{Memory: resource.NewQuantity(upper, resource.BinarySI)},
			ObservedPeakMemory: resource.NewQuantity(target/2, resource.BinarySI)}
		if limit > 0 {
			c.MemoryLimit = resource.NewQuantity(limit, resource.BinarySI)
		}
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{c}
		gfr.Status.Memory = resource.NewQuantity(target, resource.BinarySI)
		return gfr
	}
	for _, tc := range []struct {
		name                string
		gfr                 *gpufracv1.GPUFractionRecommendation
		minMemory           string
		want                int64
		youngShare          bool
		wantRequest, podMem int64
	}{
		{"young, limit at the share", rec(30*gi, 40*gi, 40*gi, 50), "", 40 * gi, true, 15 * gi * 150 / 100, 30 * gi},
		{"young, spread limit above the share", rec(30*gi, 40*gi, 60*gi, 50), "", 40 * gi, true, 15 * gi * 150 / 100, 30 * gi},
		{"young, limit under the share", rec(30*gi, 40*gi, 35*gi, 50), "", 30 * gi, false, 15 * gi * 150 / 100, 30 * gi},
		{"young, no limit (placed by the target)", rec(30*gi, 40*gi, 0, 50), "", 30 * gi, false, 15 * gi * 150 / 100, 30 * gi},
		{"young, target at the share", rec(40*gi, 40*gi, 60*gi, 50), "", 40 * gi, false, 15 * gi * 150 / 100 * 4 / 3, 40 * gi},
		{"mature", rec(30*gi, 40*gi, 40*gi, 0), "", 30 * gi, false, 15 * gi, 30 * gi},
		{"minMemory under the need: the share", rec(30*gi, 40*gi, 40*gi, 50), "20Gi", 40 * gi, true, 15 * gi * 150 / 100, 30 * gi},
		// Between the need and the share: the share holds it, placed by it (no request).
		{"minMemory above the need, under the share", rec(30*gi, 40*gi, 40*gi, 50), "32Gi", 40 * gi, true, -1, 32 * gi},
		{"minMemory above the share: the floor", rec(30*gi, 40*gi, 40*gi, 50), "48Gi", 48 * gi, false, -1, 48 * gi},
	} {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		if tc.minMemory != "" {
			m := resource.MustParse(tc.minMemory)
			gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "main", MinMemory: &m}}}
		}
		got := WithPolicy(gfa, TargetsOf(gfa, tc.gfr), 80*gi)["main"]
		if got.Memory != tc.want || got.YoungShare != tc.youngShare {
			t.Errorf("%s: memory %d MiB, young share %v; want %d MiB, %v", tc.name, got.Memory>>20, got.YoungShare, tc.want>>20, tc.youngShare)
		}
		if got.RequestPeakMemory != tc.wantRequest {
			t.Errorf("%s: request peak %d MiB, want %d MiB", tc.name, got.RequestPeakMemory>>20, tc.wantRequest>>20)
		}
		if got.YoungShare && got.NeedMemory() != tc.podMem {
			t.Errorf("%s: need %d MiB, want %d MiB", tc.name, got.NeedMemory()>>20, tc.podMem>>20)
		}
		if m, _, ok := PodMemory(gfa, tc.gfr, 80*gi); !ok || m != tc.podMem {
			t.Errorf("%s: PodMemory %d MiB (%v), want %d MiB", tc.name, m>>20, ok, tc.podMem>>20)
		}
	}
}

// TestWithFloor: while a compute rollback floor is in force, a container whose
// recommendation time-slices compute partitions it (the webhook writes max(target,
// floor), the dra backend's MPS, and the updater compares pods with the same); an
// expired floor, a memory floor, a partitioned recommendation, no compute target, and
// compute not controlled change nothing.
func TestWithFloor(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	rec := func(mode gpufracv1.SharingMode, compute *resource.Quantity) *gpufracv1.GPUFractionRecommendation {
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: mode,
			Target:         gpufracv1.GPUResources{Memory: resource.NewQuantity(1<<30, resource.BinarySI), Compute: compute},
			UpperBound:     gpufracv1.GPUResources{Compute: resource.NewMilliQuantity(300, resource.DecimalSI)},
			ComputeRequest: resource.NewMilliQuantity(100, resource.DecimalSI)}}
		return gfr
	}
	floored := func(until time.Time, memory, compute *resource.Quantity) *gpufracv1.GPUFractionAutoscaler {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{Until: metav1.NewTime(until),
			Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: memory, Compute: compute}}}}
		return gfa
	}
	milli := func(m int64) *resource.Quantity { return resource.NewMilliQuantity(m, resource.DecimalSI) }
	memOnly := floored(now.Add(time.Hour), nil, milli(782))
	memOnly.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{
		{ContainerName: "*", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}}}}
	for _, tc := range []struct {
		name      string
		gfa       *gpufracv1.GPUFractionAutoscaler
		gfr       *gpufracv1.GPUFractionRecommendation
		partition bool
		upper     int64
	}{
		{"time-sliced under a compute floor", floored(now.Add(time.Hour), nil, milli(782)), rec(gpufracv1.SharingModeTimeSlicing, milli(120)), true, 782},
		{"floor above one GPU", floored(now.Add(time.Hour), nil, milli(1500)), rec(gpufracv1.SharingModeTimeSlicing, milli(120)), true, 1000},
		{"floor below the upper bound", floored(now.Add(time.Hour), nil, milli(200)), rec(gpufracv1.SharingModeTimeSlicing, milli(120)), true, 300},
		{"floor expired", floored(now, nil, milli(782)), rec(gpufracv1.SharingModeTimeSlicing, milli(120)), false, 300},
		{"memory floor only", floored(now.Add(time.Hour), resource.NewQuantity(2<<30, resource.BinarySI), nil), rec(gpufracv1.SharingModeTimeSlicing, milli(120)), false, 300},
		{"no compute target", floored(now.Add(time.Hour), nil, milli(782)), rec(gpufracv1.SharingModeTimeSlicing, nil), false, 300},
		{"compute not controlled", memOnly, rec(gpufracv1.SharingModeTimeSlicing, milli(120)), false, 300},
		{"no floor", nil, rec(gpufracv1.SharingModeTimeSlicing, milli(120)), false, 300},
	} {
		before := TargetsOf(tc.gfa, tc.gfr)["main"]
		got := WithFloor(tc.gfa, TargetsOf(tc.gfa, tc.gfr), now)["main"]
		if !tc.partition {
			if got != before {
				t.Errorf("%s: %+v, want unchanged %+v", tc.name, got, before)
			}
			continue
		}
		if !got.ControlsCompute || got.TimeSlicesCompute || got.ComputeRequest != -1 || got.SharingMode != gpufracv1.SharingModeMPS ||
			got.Compute != 120 || got.UpperCompute != tc.upper {
			t.Errorf("%s: controls %v, time-slices %v, request %d, mode %q, compute %d, upper %d; want a partition (MPS, no request) of target 120m, upper %dm",
				tc.name, got.ControlsCompute, got.TimeSlicesCompute, got.ComputeRequest, got.SharingMode, got.Compute, got.UpperCompute, tc.upper)
		}
	}
	// An observed-peak request below a memory floor is raised to it, whether or not the
	// target has reached the floor; one above it, or without a floor, is kept.
	for _, tc := range []struct {
		name       string
		gfa        *gpufracv1.GPUFractionAutoscaler
		peak, want int64
	}{
		{"below the floor", floored(now.Add(time.Hour), resource.NewQuantity(2<<30, resource.BinarySI), nil), 1 << 29, 2 << 30},
		{"above the floor", floored(now.Add(time.Hour), resource.NewQuantity(2<<30, resource.BinarySI), nil), 3 << 30, 3 << 30},
		{"floor expired", floored(now, resource.NewQuantity(2<<30, resource.BinarySI), nil), 1 << 29, 1 << 29},
		{"compute floor only", floored(now.Add(time.Hour), nil, milli(782)), 1 << 29, 1 << 29},
		{"no request", floored(now.Add(time.Hour), resource.NewQuantity(2<<30, resource.BinarySI), nil), -1, -1},
	} {
		targets := map[string]Target{"main": {Container: "main", Memory: 2 << 30, ControlsMemory: true, Compute: -1, RequestPeakMemory: tc.peak}}
		if got := WithFloor(tc.gfa, targets, now)["main"].RequestPeakMemory; got != tc.want {
			t.Errorf("memory floor, %s: request peak %d, want %d", tc.name, got, tc.want)
		}
	}
	// A partitioned recommendation keeps its mode.
	gfa := floored(now.Add(time.Hour), nil, milli(782))
	if got := WithFloor(gfa, TargetsOf(gfa, rec(gpufracv1.SharingModeMPS, milli(120))), now)["main"]; got.SharingMode != gpufracv1.SharingModeMPS || !got.ControlsCompute || got.UpperCompute != 300 {
		t.Errorf("MPS under a compute floor: %+v, want unchanged", got)
	}
}

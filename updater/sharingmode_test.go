package updater

import (
	"strings"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// TestSharingModeMoved: a pod that holds a compute partition gpufrac wrote while its
// recommendation time-slices compute, or was placed time-sliced by a written request
// while the recommendation partitions compute, is out of date once it is older than
// MinPodAge: a shrink where the compute it is placed by falls, a growth where it rises,
// never urgent, inside the bounds. Shrinks are held as any shrink is; compute held by a
// horizontal autoscaler holds only the move that adds a cap. Pods whose values did not
// come from gpufrac's record, young pods, and a time-sliced pod placed without a request
// (a backend that may write no partition) are not moved.
func TestSharingModeMoved(t *testing.T) {
	const gib = int64(1) << 30
	sliced := func(request int64) contract.Target {
		return contract.Target{Container: "main", Memory: 20 * gib, LowerMemory: 10 * gib, UpperMemory: 30 * gib,
			Compute: -1, LowerCompute: -1, UpperCompute: -1, ComputeRequest: request, PeakMemory: 15 * gib,
			ControlsMemory: true, TimeSlicesCompute: true}
	}
	partitioned := func(milli int64) contract.Target {
		return contract.Target{Container: "main", Memory: 20 * gib, LowerMemory: 10 * gib, UpperMemory: 30 * gib,
			Compute: milli, LowerCompute: milli / 2, UpperCompute: min(2*milli, 1000), ComputeRequest: -1, PeakMemory: 15 * gib,
			ControlsMemory: true, ControlsCompute: true}
	}
	held := func(compute, request int64) Alloc {
		return Alloc{Memory: 20 * gib, Compute: compute, ComputeRequest: request, Source: SourceAppliedRecord}
	}
	old := DefaultMinPodAge + time.Minute
	for _, tc := range []struct {
		name         string
		alloc        Alloc
		target       contract.Target
		age          time.Duration
		rules        func(*Rules)
		grow, shrink bool
		// rollback: the growth is a rollback (urgent, out of bounds).
		rollback bool
		held     string
		reason   string
	}{
		{name: "partition, now time-sliced", alloc: held(782, 0), target: sliced(120), age: old, shrink: true, reason: "compute partition 782m"},
		{name: "partition, now time-sliced without a request", alloc: held(300, 0), target: sliced(-1), age: old, shrink: true, reason: "request of 0"},
		{name: "partition below the new request", alloc: held(100, 0), target: sliced(400), age: old, grow: true, reason: "time-slices"},
		{name: "partition, young pod", alloc: held(782, 0), target: sliced(120), age: time.Minute},
		{name: "partition read from backend fields", alloc: Alloc{Memory: 20 * gib, Compute: 782, Source: SourceBackendFields}, target: sliced(120), age: old},
		{name: "partition, guardrail holds", alloc: held(782, 0), target: sliced(120), age: old,
			rules: func(r *Rules) { r.Guardrail = gpufracv1.GuardrailHold }, held: SkipGuardrail},
		{name: "partition, data incomplete", alloc: held(782, 0), target: sliced(120), age: old,
			rules: func(r *Rules) { r.IncompleteData = "PrometheusError" }, held: SkipMetricsUnavailable},
		{name: "partition released while compute is held", alloc: held(782, 0), target: sliced(120), age: old,
			rules: func(r *Rules) { r.ComputeShrinkHeld = true }, shrink: true},
		{name: "time-sliced, now partitioned above the request", alloc: held(-1, 150), target: partitioned(400), age: old, grow: true, reason: "recommendation partitions 400m"},
		{name: "time-sliced, now partitioned below the request", alloc: held(-1, 500), target: partitioned(400), age: old, shrink: true},
		{name: "cap added while compute is held", alloc: held(-1, 500), target: partitioned(400), age: old,
			rules: func(r *Rules) { r.ComputeShrinkHeld = true }, held: SkipComputeHeld},
		// A compute rollback floor in force keeps the partition it protects; one below
		// the floor is not protected by it and moves (the cap is lifted).
		{name: "partition at the compute floor, now time-sliced", alloc: held(782, 0), target: sliced(120), age: old,
			rules: func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: -1, Compute: 782}} }, held: SkipBelowFloor},
		{name: "partition above the compute floor, request above it", alloc: held(500, 0), target: sliced(800), age: old,
			rules: func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: -1, Compute: 400}} }, held: SkipBelowFloor},
		{name: "partition below the compute floor, now time-sliced", alloc: held(300, 0), target: sliced(120), age: old,
			rules: func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: -1, Compute: 782}} }, shrink: true},
		// A compute floor over a time-slicing recommendation makes it partition compute
		// (contract.WithFloor): a pod placed time-sliced is below the floor, a
		// rollback at any age.
		{name: "time-sliced under a compute floor, young pod", alloc: held(-1, 100), target: partitioned(250), age: time.Minute,
			rules: func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: -1, Compute: 782}} }, grow: true, rollback: true, reason: "below rollback floor 782m"},
		{name: "time-sliced above a compute floor", alloc: held(-1, 900), target: partitioned(250), age: old,
			rules: func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: -1, Compute: 782}} }, grow: true, rollback: true, reason: "below rollback floor 782m"},
		{name: "memory floor only, now time-sliced", alloc: held(782, 0), target: sliced(120), age: old,
			rules: func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: 10 << 30, Compute: -1}} }, shrink: true},
		{name: "time-sliced without a request, now partitioned", alloc: held(-1, 0), target: partitioned(400), age: old},
		{name: "partition, still partitioned", alloc: held(400, 0), target: partitioned(400), age: old},
		{name: "time-sliced, still time-sliced", alloc: held(-1, 120), target: sliced(120), age: old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Rules{Threshold: DefaultThreshold, MinPodAge: DefaultMinPodAge, NearLimit: DefaultNearLimit, UrgentGrowth: true}
			if tc.rules != nil {
				tc.rules(&r)
			}
			n := Evaluate(PodAllocation{Containers: map[string]Alloc{"main": tc.alloc}}, map[string]contract.Target{"main": tc.target}, PodFacts{Age: tc.age}, r)
			if n.Grow != tc.grow || n.Shrink != tc.shrink || n.Urgent != tc.rollback || n.Protective != tc.rollback || n.OutOfBounds != tc.rollback || n.Rollback != tc.rollback || n.HeldReason != tc.held {
				t.Fatalf("need %+v, want grow %v shrink %v held %q rollback %v (else not urgent, inside the bounds)", n, tc.grow, tc.shrink, tc.held, tc.rollback)
			}
			if tc.reason != "" && !strings.Contains(n.Reason(), tc.reason) {
				t.Errorf("reason %q, want it to contain %q", n.Reason(), tc.reason)
			}
		})
	}
}

// TestTargetsOfTimeSlicesCompute: a time-slicing recommendation whose policy controls
// compute marks the target TimeSlicesCompute; a partitioning one, or a policy without
// compute, does not; and the whole-GPU targets of AdmittedUnchanged never do.
func TestTargetsOfTimeSlicesCompute(t *testing.T) {
	for _, tc := range []struct {
		mode      gpufracv1.SharingMode
		resources []gpufracv1.GPUResourceName
		want      bool
	}{
		{gpufracv1.SharingModeTimeSlicing, nil, true},
		{gpufracv1.SharingModeMPS, nil, false},
		{gpufracv1.SharingModeExclusive, nil, false},
		{gpufracv1.SharingModeTimeSlicing, []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}, false},
	} {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		if tc.resources != nil {
			gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "main", ControlledResources: tc.resources}}}
		}
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: tc.mode}}
		targets := contract.TargetsOf(gfa, gfr)
		if got := targets["main"].TimeSlicesCompute; got != tc.want {
			t.Errorf("%s %v: TimeSlicesCompute %v, want %v", tc.mode, tc.resources, got, tc.want)
		}
		if AdmittedUnchanged(targets, 80<<30)["main"].TimeSlicesCompute {
			t.Errorf("%s %v: AdmittedUnchanged keeps TimeSlicesCompute", tc.mode, tc.resources)
		}
	}
}

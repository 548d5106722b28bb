package contract

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestWithPolicyBounds: the container policy's maxMemory, minCompute and maxCompute,
// edited after the recommendation was computed, hold in the targets as the recommender
// clamps (policy.WithinPolicy): target, need, bounds, memoryLimit and computeRequest;
// minMemory wins where it crosses maxMemory; a maximum that is not positive is not
// applied. The rollback floor (WrittenOf) and the compute the pods hold under a
// horizontal autoscaler (HeldCompute) are applied over the policy, as the recommender
// raises to the floor after clamping, and a maximum lowers no target below the floor.
// PodMemory counts the lowered target.
func TestWithPolicyBounds(t *testing.T) {
	const gi, mi = int64(1) << 30, int64(1) << 20
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	gfr := func(mode gpufracv1.SharingMode) *gpufracv1.GPUFractionRecommendation {
		r := &gpufracv1.GPUFractionRecommendation{}
		r.Status.Memory = q("4Gi")
		r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: mode,
			Target:      gpufracv1.GPUResources{Memory: q("4Gi"), Compute: q("400m")},
			LowerBound:  gpufracv1.GPUResources{Memory: q("3Gi"), Compute: q("300m")},
			UpperBound:  gpufracv1.GPUResources{Memory: q("5Gi"), Compute: q("500m")},
			MemoryLimit: q("6Gi"), ComputeRequest: q("350m"), ObservedPeakMemory: q("3Gi")}}
		return r
	}
	gfaOf := func(cp gpufracv1.ContainerPolicy, u *gpufracv1.UpdaterStatus) *gpufracv1.GPUFractionAutoscaler {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{cp}}
		gfa.Status.Updater = u
		return gfa
	}
	floor := &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{Until: metav1.NewTime(now.Add(time.Hour)),
		Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q("3Gi"), Compute: q("600m")}}}}
	expired := floor.DeepCopy()
	expired.Floor.Until = metav1.NewTime(now.Add(-time.Minute))
	held := &gpufracv1.UpdaterStatus{
		Conditions:  []metav1.Condition{{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionTrue, Reason: "x"}},
		HeldCompute: []gpufracv1.ContainerAllocation{{ContainerName: "main", Compute: q("450m")}}}
	for _, tc := range []struct {
		name                     string
		cp                       gpufracv1.ContainerPolicy
		u                        *gpufracv1.UpdaterStatus
		mode                     gpufracv1.SharingMode
		mem, lower, upper, limit int64 // bytes
		compute, clo, chi, creq  int64 // milli
		written, writtenMilli    int64 // WrittenOf's Memory (bytes) and ComputeMilli
		floored                  bool
		pod                      int64 // PodMemory
	}{
		{name: "no bounds", cp: gpufracv1.ContainerPolicy{ContainerName: "main"},
			mem: 4 * gi, lower: 3 * gi, upper: 5 * gi, limit: 6 * gi, compute: 400, clo: 300, chi: 500, creq: -1, written: 4 * gi, writtenMilli: 400, pod: 4 * gi},
		{name: "maxMemory and maxCompute lowered", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("2Gi"), MaxCompute: q("350m")},
			mem: 2 * gi, lower: 2 * gi, upper: 2 * gi, limit: 2 * gi, compute: 350, clo: 300, chi: 350, creq: -1, written: 2 * gi, writtenMilli: 350, pod: 2 * gi},
		{name: "maxMemory between the bounds", cp: gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("3584Mi")},
			mem: 3584 * mi, lower: 3 * gi, upper: 3584 * mi, limit: 3584 * mi, compute: 400, clo: 300, chi: 500, creq: -1, written: 3584 * mi, writtenMilli: 400, pod: 3584 * mi},
		{name: "minCompute raised", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MinCompute: q("700m")},
			mem: 4 * gi, lower: 3 * gi, upper: 5 * gi, limit: 6 * gi, compute: 700, clo: 700, chi: 700, creq: -1, written: 4 * gi, writtenMilli: 700, pod: 4 * gi},
		{name: "time-sliced: the compute request too", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxCompute: q("200m")}, mode: gpufracv1.SharingModeTimeSlicing,
			mem: 4 * gi, lower: 3 * gi, upper: 5 * gi, limit: 6 * gi, compute: 200, clo: 200, chi: 200, creq: 200, written: 4 * gi, writtenMilli: -1, pod: 4 * gi},
		{name: "minMemory above maxMemory: the minimum", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MinMemory: q("6Gi"), MaxMemory: q("2Gi")},
			mem: 6 * gi, lower: 6 * gi, upper: 6 * gi, limit: 2 * gi, compute: 400, clo: 300, chi: 500, creq: -1, written: 6 * gi, writtenMilli: 400, pod: 6 * gi},
		{name: "a maximum of zero is not applied", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("0"), MaxCompute: q("0")},
			mem: 4 * gi, lower: 3 * gi, upper: 5 * gi, limit: 6 * gi, compute: 400, clo: 300, chi: 500, creq: -1, written: 4 * gi, writtenMilli: 400, pod: 4 * gi},
		// The floor is the allocation that worked: it wins over the maximum, as the
		// recommender raises to it after clamping (policy.ApplyFloors); a target it
		// raised to the floor is not lowered below it (the pods were written there,
		// the sharing planner counts them there), in force or expired.
		{name: "rollback floor above maxMemory and maxCompute", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("2Gi"), MaxCompute: q("350m")}, u: floor,
			mem: 3 * gi, lower: 3 * gi, upper: 3 * gi, limit: 3 * gi, compute: 400, clo: 300, chi: 500, creq: -1, written: 3 * gi, writtenMilli: 600, pod: 3 * gi},
		{name: "expired rollback floor above maxMemory", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("2Gi"), MaxCompute: q("350m")}, u: expired,
			mem: 3 * gi, lower: 3 * gi, upper: 3 * gi, limit: 3 * gi, compute: 400, clo: 300, chi: 500, creq: -1, written: 3 * gi, writtenMilli: 400, pod: 3 * gi},
		// Never less compute than the pods hold while a horizontal autoscaler scales on
		// GPU utilisation, as the floor.
		{name: "held compute above maxCompute", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxCompute: q("350m")}, u: held,
			mem: 4 * gi, lower: 3 * gi, upper: 5 * gi, limit: 6 * gi, compute: 450, clo: 300, chi: 450, creq: -1, written: 4 * gi, writtenMilli: 450, pod: 4 * gi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa, r := gfaOf(tc.cp, tc.u), gfr(tc.mode)
			got := WithFloor(gfa, WithPolicy(gfa, TargetsOf(gfa, r), 80*gi), now)["main"]
			if got.Memory != tc.mem || got.NeedMemory() != tc.mem || got.LowerMemory != tc.lower || got.UpperMemory != tc.upper || got.MemoryLimit != tc.limit {
				t.Errorf("memory %d need %d [%d, %d] limit %d; want %d [%d, %d] limit %d", got.Memory, got.NeedMemory(), got.LowerMemory, got.UpperMemory, got.MemoryLimit, tc.mem, tc.lower, tc.upper, tc.limit)
			}
			if got.Compute != tc.compute || got.LowerCompute != tc.clo || got.UpperCompute != tc.chi || got.ComputeRequest != tc.creq {
				t.Errorf("compute %d [%d, %d] request %d; want %d [%d, %d] request %d", got.Compute, got.LowerCompute, got.UpperCompute, got.ComputeRequest, tc.compute, tc.clo, tc.chi, tc.creq)
			}
			w := WrittenOf(gfa, got, now, 0, 80*gi)
			if w.Memory != tc.written || w.MemoryFloored != tc.floored || w.ComputeMilli != tc.writtenMilli {
				t.Errorf("written %d (floored %v), %dm; want %d (%v), %dm", w.Memory, w.MemoryFloored, w.ComputeMilli, tc.written, tc.floored, tc.writtenMilli)
			}
			if b, _, _ := PodMemory(gfa, r, 80*gi); b != tc.pod {
				t.Errorf("pod memory %d, want %d", b, tc.pod)
			}
			// The recommendation as written is kept (the record, validation).
			if r.Status.ContainerRecommendations[0].Target.Memory.Cmp(*q("4Gi")) != 0 {
				t.Errorf("the recommendation was changed: %s", r.Status.ContainerRecommendations[0].Target.Memory)
			}
		})
	}
}

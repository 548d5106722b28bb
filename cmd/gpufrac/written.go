package main

import (
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// writtenTotals are the pod totals of what the admission webhook writes from a
// recommendation besides its targets, as it reads them (contract.TargetsOf). Each is
// added up as the scheduler adds up requests (gpufracv1.PodTotal): init containers
// count as the largest of them, not on top of the others.
type writtenTotals struct {
	// MemoryBytes is the pod's memory target as written, bytes (contract.PodMemory):
	// status.memory, or the containers' targets raised to the container policy's
	// minMemory (at most one GPU) or lowered to its maxMemory where the recommendation
	// predates it (contract.WithPolicy, as the webhook, the updater and the simulator
	// apply it).
	// 0 without a memory target.
	MemoryBytes int64
	// Moved says that minMemory raised, or maxMemory lowered, at least one container's
	// memory target: MemoryBytes then differs from the recommendation's status.memory.
	Moved bool
	// MemoryRequestBytes is the placement request the annotations backend writes with
	// --annotation-memory-request=observed-peak, bytes: per container the observed peak
	// (with a young workload's margin) where below the target, else the target; the
	// target where minMemory raised it (the webhook writes no observed-peak request
	// under a floor). 0 when no container has a memory target.
	MemoryRequestBytes int64
	// MemoryLimitBytes is the memory limit written, bytes: per container its memoryLimit
	// where above the target (gpufracv1.ContainerRecommendation.WrittenMemory; for a
	// young container at its share of one GPU, contract.Target.YoungShare, at least that
	// share, which is above the target MemoryBytes counts), else its target (as raised
	// by minMemory). 0 when no container has a limit above its target: the limit is
	// then the memory target.
	MemoryLimitBytes int64
	// ComputeRequestMilli is the compute request written, thousandths of one GPU: the
	// time-sliced containers' computeRequest, at most one GPU each
	// (contract.Target.ComputeRequest). 0 when no container has one.
	ComputeRequestMilli int64
	// PlacedComputeMilli is the compute the pod is placed by, thousandths of one GPU:
	// per container the compute target where the recommendation partitions compute and
	// the policy controls it (contract.Target.ControlsCompute: written, reserved and
	// enforced), else its computeRequest (time-sliced: placement only, no limit); the
	// simulator places pods the same way. 0 when no container has either.
	PlacedComputeMilli int64
}

// writtenOf returns the writtenTotals of gfr; gfa, which may be nil, gives the container
// policies (a container whose policy mode is Off is not written, nor is the compute
// request of one whose policy does not control compute; minMemory raises a target, at
// most to one GPU of gpuMemoryBytes, 0: uncapped).
func writtenOf(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, gpuMemoryBytes int64) writtenTotals {
	targets := contract.WithPolicy(gfa, contract.TargetsOf(gfa, gfr), gpuMemoryBytes)
	total := func(amount func(t contract.Target) (int64, bool)) int64 {
		v, _ := gpufracv1.PodTotal(gfr.Status.ContainerRecommendations, nil, func(c *gpufracv1.ContainerRecommendation) (int64, bool) {
			t, ok := targets[c.ContainerName]
			if !ok {
				return 0, false
			}
			return amount(t)
		})
		return v
	}
	var w writtenTotals
	w.MemoryBytes, w.Moved, _ = contract.PodMemory(gfa, gfr, gpuMemoryBytes)
	w.MemoryRequestBytes = total(func(t contract.Target) (int64, bool) {
		if t.Memory < 0 {
			return 0, false
		}
		if t.RequestPeakMemory > 0 { // none where minMemory raised the target (contract.WithPolicy)
			return min(t.Memory, t.RequestPeakMemory), true
		}
		return t.Memory, true
	})
	for _, t := range targets {
		if t.MemoryLimit > t.Memory || t.YoungShare {
			w.MemoryLimitBytes = total(func(t contract.Target) (int64, bool) { return max(t.MemoryLimit, t.Memory), t.MemoryLimit >= 0 })
			break
		}
	}
	w.ComputeRequestMilli = total(func(t contract.Target) (int64, bool) { return t.ComputeRequest, t.ComputeRequest > 0 })
	w.PlacedComputeMilli = total(func(t contract.Target) (int64, bool) {
		v, _, ok := t.PlacedCompute()
		return v, ok
	})
	return w
}

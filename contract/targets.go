package contract

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Target is what one container of an autoscaler's pods should get, in the units the
// components compare and write: memory in bytes and compute in thousandths of one GPU;
// -1 means absent. The rollback floor (Floor) is not included: the webhook and the
// updater each take max(target, floor). Nor is the container policy's minMemory until
// WithPolicy raises the memory target to it, as both do after TargetsOf.
type Target struct {
	// Container is the container's name.
	Container string
	// Recommendation is the container's recommendation as read, for the quantities
	// exactly as written (the webhook's validation and applied record). Nil for Targets
	// not made by TargetsOf.
	Recommendation *gpufracv1.ContainerRecommendation
	// Memory, LowerMemory and UpperMemory are the target and bounds of GPU memory, bytes:
	// what the updater compares pods with (the need).
	Memory, LowerMemory, UpperMemory int64
	// MemoryLimit is the memory the webhook writes as the limit, bytes: the
	// recommendation's memoryLimit where above the target (burst room for a backend
	// that places pods by a request; ContainerRecommendation.WrittenMemory), else
	// Memory; -1 without a memory target. Like ComputeRequest, the updater never
	// replaces a pod for it: a new limit reaches pods as they are created or replaced
	// for their target.
	MemoryLimit int64
	// Compute, LowerCompute and UpperCompute are the target and bounds of compute,
	// thousandths of one GPU. While compute is held (HeldCompute), Compute is at least
	// what the workload's pods hold and UpperCompute at least Compute.
	Compute, LowerCompute, UpperCompute int64
	// ComputeRequest is the compute a time-sliced container reserves for placement
	// without a limit (ContainerRecommendation.ComputeRequest), thousandths of one GPU,
	// at most 1000 (a request above one GPU is one GPU);
	// -1 when the recommendation has none, compute is not controlled, or the
	// recommendation partitions compute (then Compute is reserved and enforced). The
	// updater replaces a pod for it only when it has grown by
	// updater.Config.ComputeRequestGrowth over the request the pod was placed with;
	// otherwise a new request reaches the pods as they are created or replaced for
	// another reason.
	ComputeRequest int64
	// PeakMemory is the recent observed memory peak, bytes (-1: unknown).
	PeakMemory int64
	// RequestPeakMemory is the memory peak, bytes, a backend that packs by request may
	// size the request by (kai-nvfractions' observed-peak request): PeakMemory, times
	// (1 + youngMarginPercent/100) for a young workload, whose peak is the evidence of a
	// few hours (-1: unknown).
	RequestPeakMemory int64
	// YoungShare is true when Memory is the container's young share, not the
	// recommendation's target: a young workload (youngMarginPercent above 0) whose
	// recommender wrote its memoryLimit at or above its upper bound, the whole share of
	// one GPU (½, ⅓, …) its target falls in (policy.Config.YoungLimitAtShare, for
	// backends that place pods by their observed peak). Memory is then that upper bound:
	// the webhook writes it, with the observed-peak request (RequestPeakMemory) as
	// before, and the updater compares pods with it, so a young target that doubles at
	// each new level and narrows by the hour replaces a pod only when it moves to
	// another share. The recommendation's target (the need: status, MIG advice,
	// explain, report) is unchanged.
	YoungShare bool
	// need is the memory the container needs where Memory is its young share, bytes: the
	// recommendation's target, or the policy's minMemory above it (WithPolicy).
	need int64
	// maxMemory is the container policy's maxMemory WithPolicy lowered the target to at
	// most, bytes (0: none): WrittenOf compares the rollback floor with the
	// recommendation's target within it.
	maxMemory int64
	// ControlsMemory and ControlsCompute say whether the container's policy lets
	// gpufrac write the resource (controlledResources, mode); compute only where the
	// recommendation partitions it (ContainerRecommendation.PartitionsCompute).
	ControlsMemory, ControlsCompute bool
	// TimeSlicesCompute is true when the container's policy lets gpufrac write compute
	// but the recommendation time-slices it (SharingMode TimeSlicing): the webhook writes
	// no compute partition, only ComputeRequest. A pod that still holds a partition from
	// an earlier recommendation is then out of date (updater.Evaluate), though no compute
	// target is there to compare it with.
	TimeSlicesCompute bool
	// SharingMode is the mode pods of the container are written in: the
	// recommendation's, or MPS where a compute rollback floor makes a time-sliced
	// container partition compute (WithFloor). The dra backend writes its claim's
	// GpuConfig by it.
	SharingMode gpufracv1.SharingMode
}

// NeedMemory returns the memory the container needs, bytes: Memory, or, where Memory is
// its young share (YoungShare), the recommendation's target (raised to the policy's
// minMemory by WithPolicy); -1 when absent.
func (t Target) NeedMemory() int64 {
	if t.YoungShare {
		return t.need
	}
	return t.Memory
}

// PlacedCompute returns the compute a pod of the container is placed by, thousandths of
// one GPU: the compute target where the recommendation partitions compute and the policy
// controls it (ControlsCompute: written, reserved and enforced; request false), else the
// placement-only ComputeRequest of a time-sliced container (request true: no limit);
// ok is false when there is neither.
func (t Target) PlacedCompute() (milli int64, request, ok bool) {
	if t.ControlsCompute && t.Compute >= 0 {
		return t.Compute, false, true
	}
	return t.ComputeRequest, true, t.ComputeRequest > 0
}

// UnwritableMemory says why the webhook writes no memory for the container's target,
// or "" when it does or has none to write (no memory target, or memory not controlled):
// a target that is not positive, or one above one GPU of gpuMemoryBytes, or an observed
// peak (observedPeakMemory) above one GPU (both tooLarge: the pods were seen using more
// than gpuMemoryBytes, so the GPUs are larger than the flag says or the samples are
// wrong, and a target capped at one GPU would be written below the peak). The webhook
// then admits the pod unchanged (backend.UnsafeError), so the updater replaces no pod
// towards such a target: the replacement would come back without it.
func (t Target) UnwritableMemory(gpuMemoryBytes int64) (msg string, tooLarge bool) {
	if t.Recommendation == nil || t.Recommendation.Target.Memory == nil || !t.ControlsMemory {
		return "", false
	}
	q := t.Recommendation.Target.Memory
	if q.Sign() <= 0 {
		return fmt.Sprintf("memory target %s of container %s is not positive", q, t.Container), false
	}
	gpu := resource.NewQuantity(gpuMemoryBytes, resource.BinarySI)
	if q.Cmp(*gpu) > 0 {
		return fmt.Sprintf("memory target %s of container %s exceeds one GPU (%s)", q, t.Container, gpu), true
	}
	if p := t.Recommendation.ObservedPeakMemory; p != nil && p.Cmp(*gpu) > 0 {
		return fmt.Sprintf("observed peak memory %s of container %s exceeds one GPU (%s): set --gpu-memory to the GPUs' memory", p, t.Container, gpu), true
	}
	return "", false
}

// UnwritableCompute says why the webhook writes no compute for the container's target,
// or "" when it does or has none to write (no compute target, or compute not
// controlled): a target outside 0–1 GPU. As UnwritableMemory, the pod is then admitted
// unchanged.
func (t Target) UnwritableCompute() string {
	if t.Recommendation == nil || t.Recommendation.Target.Compute == nil || !t.ControlsCompute {
		return ""
	}
	if q := t.Recommendation.Target.Compute; q.Sign() < 0 || q.Cmp(resource.MustParse("1")) > 0 {
		return fmt.Sprintf("compute target %s of container %s is outside 0–1 GPU", q, t.Container)
	}
	return ""
}

// TargetsOf converts a recommendation's container recommendations into Targets by
// container name, keeping only containers whose policy mode is not Off (gfa nil: no
// policies) and, of several recommendations of one name, the first. It returns an empty
// map for a nil gfr.
func TargetsOf(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) map[string]Target {
	out := map[string]Target{}
	if gfr == nil {
		return out
	}
	for i := range gfr.Status.ContainerRecommendations {
		r := &gfr.Status.ContainerRecommendations[i]
		var pol *gpufracv1.ContainerPolicy
		if gfa != nil {
			pol = gfa.Spec.ContainerPolicy(r.ContainerName)
		}
		if _, dup := out[r.ContainerName]; dup || !pol.Enabled() {
			continue
		}
		t := Target{
			Container: r.ContainerName, Recommendation: r,
			Memory: BytesOf(r.Target.Memory), LowerMemory: BytesOf(r.LowerBound.Memory), UpperMemory: BytesOf(r.UpperBound.Memory),
			Compute: MilliOf(r.Target.Compute), LowerCompute: MilliOf(r.LowerBound.Compute), UpperCompute: MilliOf(r.UpperBound.Compute),
			PeakMemory:     BytesOf(r.ObservedPeakMemory),
			ControlsMemory: pol.Controls(gpufracv1.ResourceMemory), ControlsCompute: pol.Controls(gpufracv1.ResourceCompute) && r.PartitionsCompute(),
			SharingMode: r.SharingMode,
		}
		t.MemoryLimit = BytesOf(r.WrittenMemory())
		t.need = t.Memory
		if share := r.YoungShare(); share != nil {
			t.Memory, t.YoungShare = share.Value(), true
		}
		t.ComputeRequest = -1
		if pol.Controls(gpufracv1.ResourceCompute) && !r.PartitionsCompute() {
			t.ComputeRequest = min(MilliOf(r.ComputeRequest), 1000)
			t.TimeSlicesCompute = true
		}
		t.RequestPeakMemory = t.PeakMemory
		if t.PeakMemory > 0 && r.YoungMarginPercent > 0 {
			t.RequestPeakMemory = t.PeakMemory * (100 + int64(r.YoungMarginPercent)) / 100
		}
		// While a horizontal autoscaler scales on GPU utilisation, a pod gets at least
		// what the workload's pods hold: nothing is replaced towards less compute.
		if v, raised := HeldCompute(gfa, r.ContainerName, t.Compute); raised {
			t.Compute, t.UpperCompute = v, max(t.UpperCompute, v)
		}
		out[r.ContainerName] = t
	}
	return out
}

// WithFloor is the one rule for what the rollback floor in force (gfa's
// status.updater.floor at now, Floor) does to targets (TargetsOf of gfa) besides
// raising each resource to it, which the webhook and the updater each do
// (max(target, floor)); the webhook (what it writes into new and replacement pods) and
// the updater (what it compares pods with) both call it. It returns targets.
//
//   - Compute: each container whose recommendation time-slices compute
//     (TimeSlicesCompute) and has a compute target, under a compute floor, partitions
//     compute instead: ControlsCompute, SharingMode MPS (the dra backend's partition),
//     no ComputeRequest, UpperCompute at least the floor (at most one GPU). The webhook
//     then writes max(target, floor) as for any partitioned container, and the updater
//     compares pods with the same, so a pod the webhook wrote under the floor is in
//     date. The floor restores the compute a shrink that breached the latency objective
//     took, and time-slicing guarantees none. Once the floor expires the
//     recommendation's time-slicing applies again.
//   - Memory: an observed-peak request (RequestPeakMemory) below a memory floor is
//     raised to it: the floor holds whatever the pods were seen to use, whether or not
//     the recommender has raised its target to the floor yet (before, the request held
//     the floor only while the target was below it).
func WithFloor(gfa *gpufracv1.GPUFractionAutoscaler, targets map[string]Target, now time.Time) map[string]Target {
	for name, t := range targets {
		fm, fc := Floor(gfa, name, now)
		if fm >= 0 && t.RequestPeakMemory > 0 && t.RequestPeakMemory < fm {
			t.RequestPeakMemory = fm
		}
		if t.TimeSlicesCompute && t.Compute >= 0 && fc >= 0 {
			t.ControlsCompute, t.TimeSlicesCompute, t.ComputeRequest = true, false, -1
			t.SharingMode = gpufracv1.SharingModeMPS
			t.UpperCompute = max(t.UpperCompute, min(fc, 1000))
		}
		targets[name] = t
	}
	return targets
}

// MinMemory is the container policy's minMemory of container in gfa as the webhook
// writes it, bytes: at most one GPU of gpuMemoryBytes (0 or less: not capped, a GPU size
// unknown); -1 where the policy sets none (or gfa is nil).
func MinMemory(gfa *gpufracv1.GPUFractionAutoscaler, container string, gpuMemoryBytes int64) int64 {
	if gfa == nil {
		return -1
	}
	pol := gfa.Spec.ContainerPolicy(container)
	if pol == nil || pol.MinMemory == nil {
		return -1
	}
	if v := pol.MinMemory.Value(); gpuMemoryBytes <= 0 || v < gpuMemoryBytes {
		return v
	}
	return gpuMemoryBytes
}

// WithPolicy is the one rule for the container policies of gfa's spec as it is now
// (spec.resourcePolicy) over targets (TargetsOf of gfa), a recommendation that may have
// been computed for an older spec (status.observedGeneration below the autoscaler's
// generation: the recommender's next cycle not yet run, or the recommender down): the
// webhook writes the targets it returns into new pods and the updater compares running
// pods with the same, so a pod the webhook wrote is in date; gpufrac simulate, explain,
// report and the sharing planner read them too. Recommendation keeps the values as
// written. It returns targets.
//
// The bounds are applied as the recommender clamps (policy.WithinPolicy): first the
// maxima, then the minima, the minimum winning where they cross; a maximum that is not
// positive is not applied. The rollback floor (WithFloor, Floor) and the compute the
// workload's pods hold under a horizontal autoscaler (HeldCompute) are applied over the
// policy, as the recommender raises a recommendation to the floor after clamping it
// (policy.ApplyFloors): a floor above maxMemory wins, and a target the recommender
// raised to the floor (status.updater.floor, in force or expired since) is not lowered
// below it.
//
//   - maxMemory (bytes) lowers each controlled memory target, its need, bounds and
//     memoryLimit to at most it (a young share included). The observed-peak request is
//     kept: the backends write no request above the memory (as when the recommender caps
//     a target below the peak).
//   - minCompute and maxCompute (shares of one GPU) hold the compute target (before
//     HeldCompute), its bounds and a time-sliced container's ComputeRequest between them.
//   - minMemory (at most one GPU of gpuMemoryBytes) raises each controlled memory target
//     below it to it, and the bounds to at least it, and drops its RequestPeakMemory (-1:
//     no observed-peak request below the floor). A target at or above minMemory keeps
//     it, with its RequestPeakMemory raised to at least minMemory: the request holds the
//     floor whether or not the recommendation predates the policy.
//
// The recommender keeps its recommendations within the policy, so this changes a target
// only while the recommendation predates the policy (minMemory raised, the remedy for a
// workload out of memory; maxMemory lowered; and no new recommendation since).
func WithPolicy(gfa *gpufracv1.GPUFractionAutoscaler, targets map[string]Target, gpuMemoryBytes int64) map[string]Target {
	if gfa == nil {
		return targets
	}
	for name, t := range targets {
		// A recommendation the recommender raised to the rollback floor over the policy
		// (policy.ApplyFloors) is not lowered below it, in force or expired since (the
		// recommender's next cycle drops it): written at the floor, it is what the pods
		// got and what the sharing planner and report count.
		fm, fc := floorOf(UpdaterStatusOf(gfa), name)
		withMaxMemory(&t, gfa.Spec.ContainerPolicy(name), fm)
		withComputeBounds(&t, gfa, gfa.Spec.ContainerPolicy(name), fc)
		targets[name] = t
	}
	for name, t := range targets {
		m := MinMemory(gfa, name, gpuMemoryBytes)
		if !t.ControlsMemory || t.Memory < 0 || m < 0 {
			continue
		}
		if m <= t.NeedMemory() {
			// The recommendation holds minMemory (the recommender keeps it there): the
			// observed-peak request holds it too, as while the recommendation predated it.
			if t.RequestPeakMemory > 0 && t.RequestPeakMemory < m {
				t.RequestPeakMemory = m
				targets[name] = t
			}
			continue
		}
		if t.YoungShare && m <= t.Memory {
			// The young share already holds the floor: pods keep it (a floor is never a
			// reason to write less), and the need is the floor.
			t.need = m
		} else {
			t.Memory, t.YoungShare = m, false
		}
		// The floor holds whatever the pods were seen to use: no request below it (the
		// webhook writes none under a raised floor; the updater's placement check and
		// gpufrac simulate pack by the same).
		t.RequestPeakMemory = -1
		if t.LowerMemory >= 0 {
			t.LowerMemory = max(t.LowerMemory, m)
		}
		if t.UpperMemory >= 0 {
			t.UpperMemory = max(t.UpperMemory, m)
		}
		targets[name] = t
	}
	return targets
}

// withMaxMemory lowers t's controlled memory target, need, bounds and memoryLimit to at
// most pol's maxMemory (none: nil pol, no maxMemory, or one that is not positive), or the
// rollback floor floor (bytes, -1: none) where higher, and records it for WrittenOf.
func withMaxMemory(t *Target, pol *gpufracv1.ContainerPolicy, floor int64) {
	if pol == nil || pol.MaxMemory == nil || pol.MaxMemory.Sign() <= 0 || !t.ControlsMemory || t.Memory < 0 {
		return
	}
	hi := max(pol.MaxMemory.Value(), floor)
	t.maxMemory = hi
	t.Memory, t.need = min(t.Memory, hi), min(t.need, hi)
	for _, v := range []*int64{&t.LowerMemory, &t.UpperMemory, &t.MemoryLimit} {
		if *v >= 0 {
			*v = min(*v, hi)
		}
	}
}

// withComputeBounds holds t's compute target (the recommendation's, before the compute
// the workload's pods hold: HeldCompute is applied again over it), bounds and
// ComputeRequest between pol's minCompute and maxCompute (nil pol: none; a maxCompute
// that is not positive is not applied), or the rollback floor floor (milli-GPU, -1: none)
// where above maxCompute, the minimum winning where they cross.
func withComputeBounds(t *Target, gfa *gpufracv1.GPUFractionAutoscaler, pol *gpufracv1.ContainerPolicy, floor int64) {
	if pol == nil || (pol.MinCompute == nil && pol.MaxCompute == nil) {
		return
	}
	lo, hi := int64(-1), int64(-1)
	if pol.MinCompute != nil {
		lo = pol.MinCompute.MilliValue()
	}
	if pol.MaxCompute != nil && pol.MaxCompute.Sign() > 0 {
		hi = max(pol.MaxCompute.MilliValue(), floor)
	}
	clamp := func(v int64) int64 {
		if v < 0 {
			return v
		}
		if hi >= 0 {
			v = min(v, hi)
		}
		return max(v, lo)
	}
	if rec := t.Compute; rec >= 0 {
		if t.Recommendation != nil && t.Recommendation.Target.Compute != nil {
			rec = MilliOf(t.Recommendation.Target.Compute)
		}
		t.Compute = clamp(rec)
		t.LowerCompute, t.UpperCompute = clamp(t.LowerCompute), clamp(t.UpperCompute)
		if v, raised := HeldCompute(gfa, t.Container, t.Compute); raised {
			t.Compute, t.UpperCompute = v, max(t.UpperCompute, v)
		}
	}
	if t.ComputeRequest > 0 {
		t.ComputeRequest = min(clamp(t.ComputeRequest), 1000)
	}
}

// PodMemory returns the pod's memory target as the webhook writes it, bytes: gfr's
// status.memory (the recommender's pod total, gpufracv1.PodTotal), or, where the
// container policies move a container off a recommendation that predates them
// (WithPolicy: minMemory raises it, at most one GPU of gpuMemoryBytes, 0 or less:
// uncapped; maxMemory lowers it), the pod total of the moved targets, with moved true.
// ok is false without a memory target. gpufrac report and the sharing planner count
// pods with it.
func PodMemory(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, gpuMemoryBytes int64) (bytes int64, moved, ok bool) {
	if gfr == nil || gfr.Status.Memory == nil {
		return 0, false, false
	}
	targets := WithPolicy(gfa, TargetsOf(gfa, gfr), gpuMemoryBytes)
	// A young share (Target.YoungShare) is room above the pod's observed-peak request,
	// not memory it holds: the need counts.
	for _, t := range targets {
		moved = moved || (t.Memory >= 0 && t.NeedMemory() != BytesOf(t.Recommendation.Target.Memory))
	}
	if !moved {
		return gfr.Status.Memory.Value(), false, true
	}
	total, ok := gpufracv1.PodTotal(gfr.Status.ContainerRecommendations, nil, func(c *gpufracv1.ContainerRecommendation) (int64, bool) {
		t, ok := targets[c.ContainerName]
		return t.NeedMemory(), ok && t.Memory >= 0
	})
	return total, true, ok
}

// BytesOf returns q in bytes (rounded up), or -1 for nil.
func BytesOf(q *resource.Quantity) int64 {
	if q == nil {
		return -1
	}
	return q.Value()
}

// MilliOf returns q in thousandths (rounded up), or -1 for nil.
func MilliOf(q *resource.Quantity) int64 {
	if q == nil {
		return -1
	}
	return q.MilliValue()
}

// Young reports whether the target is a young workload's (its recommendation's
// youngMarginPercent above 0: a history too short for the recommender's low confidence,
// sized from the evidence of its first hours).
func (t Target) Young() bool {
	return t.Recommendation != nil && t.Recommendation.YoungMarginPercent > 0
}

// Written is what the webhook writes for one container's Target under the rollback
// floor in force (WrittenOf): the one rule the webhook (what it writes), the updater's
// placement check and consolidation (what a replacement will need) and gpufrac simulate
// (what it packs) follow.
type Written struct {
	// Memory is the memory the container gets, bytes, before overhead: the
	// recommendation's target, at least the rollback floor in force (at most one GPU)
	// and the need (NeedMemory: minMemory); -1 where memory is not written (no target,
	// or not controlled).
	Memory int64
	// MemoryFloored is true when the rollback floor raised Memory above the
	// recommendation's target: the observed-peak request is then not written.
	MemoryFloored bool
	// MemoryBytes is the memory written as the limit, bytes: Memory plus overhead, or
	// the MemoryLimit plus overhead where larger, at most one GPU; -1 with Memory -1.
	MemoryBytes int64
	// Capped is true when Memory plus overhead exceeds one GPU (MemoryBytes is one GPU).
	Capped bool
	// UpperMemoryBytes is the upper bound plus overhead, at least MemoryBytes, at most
	// one GPU, bytes; 0 without an upper bound.
	UpperMemoryBytes int64
	// PeakMemoryBytes is the observed-peak request plus overhead, at most one GPU,
	// bytes (RequestPeakMemory); 0 without one or under a floor that raised Memory.
	PeakMemoryBytes int64
	// ComputeMilli is the compute written, thousandths of one GPU: the compute target
	// (at least what the workload's pods hold, HeldCompute), at least the rollback floor
	// in force (at most one GPU); -1 where compute is not partitioned and controlled.
	ComputeMilli int64
	// ComputeFloored is true when the rollback floor raised ComputeMilli above Compute.
	ComputeFloored bool
}

// WrittenOf returns what the webhook writes for t (a target of TargetsOf of gfa, through
// WithPolicy and WithFloor) at now, with overhead bytes added to memory and
// gpuMemoryBytes the memory of one GPU. The rollback floor is gfa's in force at now
// (Floor). A target the webhook finds unwritable (UnwritableMemory, UnwritableCompute)
// is the caller's to check first.
func WrittenOf(gfa *gpufracv1.GPUFractionAutoscaler, t Target, now time.Time, overhead, gpuMemoryBytes int64) Written {
	w := Written{Memory: -1, MemoryBytes: -1, ComputeMilli: -1}
	fm, fc := Floor(gfa, t.Container, now)
	if t.ControlsMemory && t.Memory >= 0 {
		rec := t.NeedMemory()
		if t.Recommendation != nil && t.Recommendation.Target.Memory != nil {
			rec = t.Recommendation.Target.Memory.Value()
			if t.maxMemory > 0 {
				rec = min(rec, t.maxMemory) // the policy's maxMemory (WithPolicy)
			}
		}
		w.Memory = rec
		if fm > rec {
			w.Memory, w.MemoryFloored = min(fm, gpuMemoryBytes), true
		}
		w.Memory = max(w.Memory, t.NeedMemory())
		w.MemoryBytes = w.Memory + overhead
		if w.MemoryBytes > gpuMemoryBytes {
			w.MemoryBytes, w.Capped = gpuMemoryBytes, true
		}
		if t.MemoryLimit > w.Memory {
			w.MemoryBytes = max(w.MemoryBytes, min(t.MemoryLimit+overhead, gpuMemoryBytes))
		}
		if t.UpperMemory > 0 {
			w.UpperMemoryBytes = max(w.MemoryBytes, min(t.UpperMemory+overhead, gpuMemoryBytes))
		}
		if t.RequestPeakMemory > 0 && !w.MemoryFloored {
			w.PeakMemoryBytes = min(t.RequestPeakMemory+overhead, gpuMemoryBytes)
		}
	}
	if t.ControlsCompute && t.Compute >= 0 {
		w.ComputeMilli = t.Compute
		if f := min(fc, 1000); f > w.ComputeMilli {
			w.ComputeMilli, w.ComputeFloored = f, true
		}
	}
	return w
}

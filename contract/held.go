package contract

import (
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// ComputeShrinkHeld reports whether compute must not shrink in gfa's workload: the
// updater's ComputeShrinkHeld condition (status.updater.conditions) is True, because a
// HorizontalPodAutoscaler or KEDA ScaledObject scales the workload on a GPU metric and
// the autoscaler has not opted in to shrinking (the updater's
// gpufrac.io/allow-compute-shrink-with-horizontal-autoscaler annotation sets it False).
func ComputeShrinkHeld(gfa *gpufracv1.GPUFractionAutoscaler) bool {
	u := UpdaterStatusOf(gfa)
	if u == nil {
		return false
	}
	return meta.IsStatusConditionPresentAndEqual(u.Conditions, gpufracv1.UpdaterConditionComputeShrinkHeld, metav1.ConditionTrue)
}

// UpdaterStatusOf returns gfa's status.updater when it was written for the workload
// gfa targets now, and nil otherwise (also for a nil gfa): after spec.targetRef moves
// to another workload, the rollback floor, held compute and conditions the updater
// wrote for the former one apply to no pod of the new one until the updater writes
// for it. A status without status.updater.targetRef (written by an earlier version)
// is taken as the current target's. Every reader of status.updater for pods (Floor,
// HeldCompute, ComputeShrinkHeld; the recommender's floor) goes through it.
func UpdaterStatusOf(gfa *gpufracv1.GPUFractionAutoscaler) *gpufracv1.UpdaterStatus {
	if gfa == nil || gfa.Status.Updater == nil {
		return nil
	}
	if !UpdaterStatusFor(gfa.Status.Updater, gfa.Spec.TargetRef) {
		return nil
	}
	return gfa.Status.Updater
}

// UpdaterStatusFor reports whether u, a status.updater, was written for the workload
// target (spec.targetRef): its status.updater.targetRef names the same kind and name,
// or is unset (an earlier version's status).
func UpdaterStatusFor(u *gpufracv1.UpdaterStatus, target autoscalingv1.CrossVersionObjectReference) bool {
	t := u.TargetRef
	return t == nil || (t.Kind == target.Kind && t.Name == target.Name)
}

// HeldCompute is the one rule for compute while a horizontal autoscaler scales on a GPU
// metric; the webhook (new and replacement pods) and the updater (what it compares
// pods with) both call it. It returns the compute, milli-GPU, that container may get
// when its recommendation says recommended (milli-GPU; negative: none): while
// ComputeShrinkHeld, the larger of recommended and status.updater.heldCompute (the
// most the workload's running pods hold), else recommended. raised is true when the
// held value won.
func HeldCompute(gfa *gpufracv1.GPUFractionAutoscaler, container string, recommended int64) (milli int64, raised bool) {
	if recommended < 0 || !ComputeShrinkHeld(gfa) {
		return recommended, false
	}
	for _, h := range UpdaterStatusOf(gfa).HeldCompute {
		if h.ContainerName == container && h.Compute != nil && h.Compute.MilliValue() > recommended {
			return h.Compute.MilliValue(), true
		}
	}
	return recommended, false
}

// Floor is the rollback floor of container in gfa's status.updater.floor while it has
// not expired at now: memory in bytes and compute in milli-GPU, -1 where none. The
// webhook gives every new and replacement pod at least the floor (max(recommendation,
// floor)), and the updater compares pods with the same maximum, so a rollback reaches
// the pods whether or not the recommender has caught up.
func Floor(gfa *gpufracv1.GPUFractionAutoscaler, container string, now time.Time) (memory, milli int64) {
	u := UpdaterStatusOf(gfa)
	if u == nil || u.Floor == nil || !now.Before(u.Floor.Until.Time) {
		return -1, -1
	}
	return floorOf(u, container)
}

// floorOf is the rollback floor of container in u.floor (u nil: none), whether in force
// or expired: memory in bytes and compute in milli-GPU, -1 where none.
func floorOf(u *gpufracv1.UpdaterStatus, container string) (memory, milli int64) {
	memory, milli = -1, -1
	if u == nil || u.Floor == nil {
		return memory, milli
	}
	for _, c := range u.Floor.Containers {
		if c.ContainerName != container {
			continue
		}
		if c.Memory != nil {
			memory = c.Memory.Value()
		}
		if c.Compute != nil {
			milli = c.Compute.MilliValue()
		}
	}
	return memory, milli
}

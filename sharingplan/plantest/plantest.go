// Package plantest builds GPUSharingPolicies as the sharing planner
// (sharingplan/controller) leaves them, for the tests of the packages that read plans:
// backend, admission and updater. It is for tests only.
package plantest

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// GPUMemoryBytes is the memory of one GPU of the pools Policy plans, bytes (80 GiB).
const GPUMemoryBytes = 80 << 30

// Policy returns the GPUSharingPolicy name whose status plans mode × replicas per GPU
// of GPUMemoryBytes (device-plugin config "gpufrac-<name>"). Applied, it is in Apply
// mode with condition Applied True (reason Applied); otherwise in DryRun mode with
// Applied False (reason DryRun). It selects every autoscaler (an empty
// spec.autoscalerSelector); set Spec.AutoscalerSelector to narrow it.
func Policy(name string, mode gpufracv1.SharingMode, replicas int32, applied bool) *gpufracv1.GPUSharingPolicy {
	p := &gpufracv1.GPUSharingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gpufracv1.GPUSharingPolicySpec{Mode: gpufracv1.PlanModeDryRun},
		Status: gpufracv1.GPUSharingPolicyStatus{SharingMode: mode, Replicas: replicas, ConfigName: "gpufrac-" + name,
			GPUMemory: resource.NewQuantity(GPUMemoryBytes, resource.BinarySI)},
	}
	cond := metav1.Condition{Type: gpufracv1.ConditionApplied, Status: metav1.ConditionFalse, Reason: gpufracv1.ReasonDryRun}
	if applied {
		p.Spec.Mode = gpufracv1.PlanModeApply
		cond.Status, cond.Reason = metav1.ConditionTrue, gpufracv1.ReasonApplied
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	return p
}

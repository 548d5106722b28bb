package contract

import (
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// The updater's floor, held compute and ComputeShrinkHeld apply to the workload
// status.updater was written for: not to another one spec.targetRef names since; a
// status of an earlier version (no status.updater.targetRef) is the current target's.
func TestUpdaterStatusOfFollowsTheTarget(t *testing.T) {
	now := time.Now()
	web := autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	api := web
	api.Name = "api"
	sts := web
	sts.Kind = "StatefulSet"
	for _, tc := range []struct {
		name    string
		written *autoscalingv1.CrossVersionObjectReference
		applies bool
	}{
		{"same target", &web, true},
		{"earlier version: no targetRef", nil, true},
		{"other name", &api, false},
		{"other kind", &sts, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := &gpufracv1.GPUFractionAutoscaler{}
			gfa.Spec.TargetRef = web
			gfa.Status.Updater = &gpufracv1.UpdaterStatus{TargetRef: tc.written,
				Floor:       &gpufracv1.UpdaterFloor{Until: metav1.NewTime(now.Add(time.Hour)), Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q("2Gi")}}},
				HeldCompute: []gpufracv1.ContainerAllocation{{ContainerName: "main", Compute: q("800m")}},
				Conditions:  []metav1.Condition{{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionTrue}},
			}
			mem, _ := Floor(gfa, "main", now)
			milli, _ := HeldCompute(gfa, "main", 300)
			if got := (UpdaterStatusOf(gfa) != nil); got != tc.applies {
				t.Errorf("UpdaterStatusOf applies %v, want %v", got, tc.applies)
			}
			if want := map[bool]int64{true: 2 << 30, false: -1}[tc.applies]; mem != want {
				t.Errorf("floor %d, want %d", mem, want)
			}
			if want := map[bool]int64{true: 800, false: 300}[tc.applies]; milli != want {
				t.Errorf("held compute %d, want %d", milli, want)
			}
		})
	}
}

package updater

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func publishFloor(f *fixture, mem string) {
	f.gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{
		Memory:     ptr.To(resource.MustParse(mem)),
		Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: ptr.To(resource.MustParse(mem))}},
		Until:      metav1.NewTime(f.now.Add(time.Hour)), Reason: "test"}}
}

// TestRollbackLandsWithoutRecommendation: a published floor of 2Gi above pods of 1Gi
// whose recommendation stays at 1Gi (the recommender has not caught up) still replaces
// a pod, urgently, outside any resize window (issue 14 kind 6).
func TestRollbackLandsWithoutRecommendation(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
	f.gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 0 1 1 *", Duration: metav1.Duration{Duration: time.Minute}}}
	publishFloor(f, "2Gi")
	f.build()
	f.run()
	if live := f.livePods(); len(live) != 1 {
		t.Fatalf("pods %v: want one replaced to reach the floor", live)
	}
	evs := f.events()
	if !hasEvent(evs, "roll back to the floor") || !hasEvent(evs, "below rollback floor 2Gi") {
		t.Errorf("events %v: want an eviction to roll back to the 2Gi floor", evs)
	}
}

// TestRepeatedOOMAtTheFloorRaisesIt: a pod already at the 2Gi floor exits out of memory:
// the floor rises to VPA's bump (2.4Gi) and, once that is published for the webhook (next
// cycle, not before), the pod is replaced to get it, with the recommendation still at 1Gi.
func TestRepeatedOOMAtTheFloorRaisesIt(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 2)
	publishFloor(f, "2Gi")
	f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, Ready: true,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "RuntimeError: CUDA error: out of memory", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
	f.build()
	f.run()
	st := f.status()
	want := bump12(2 << 30)
	if got := floorMemory(st.Floor, "main"); got != want {
		t.Fatalf("floor %d bytes, want %d (2Gi × 1.2)", got, want)
	}
	if len(f.livePods()) != 2 {
		t.Fatal("replaced before the raised floor was published: the replacement would get the old one")
	}
	pending := false
	for _, u := range st.Updates {
		pending = pending || (u.Pod == "web-abc-0" && u.SkipReason == SkipAwaitingFloor)
	}
	if !pending {
		t.Errorf("updates %+v: want web-abc-0 %s", st.Updates, SkipAwaitingFloor)
	}
	f.run()
	if live := f.livePods(); live["web-abc-0"] || len(live) != 1 {
		t.Fatalf("pods %v: want web-abc-0 replaced once the floor is published", live)
	}
	if got := floorMemory(f.status().Floor, "main"); got != want {
		t.Errorf("floor raised again by the same exit: %d, want %d", got, want)
	}
	if evs := f.events(); !hasEvent(evs, "roll back to the floor") {
		t.Errorf("events %v", evs)
	}
}

package updater

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// An autoscaler whose spec.targetRef moves to another workload leaves the rollback
// floor it raised for the first behind: the second workload's pods are not replaced to
// it (a rollback, urgent, outside windows) and the webhook and the recommender do not
// apply it (contract.Floor).
func TestRetargetDropsTheFloorOfTheFormerWorkload(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
	api := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", UID: "api-uid"}}
	apiRS := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-xyz", UID: "api-rs-uid", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: api.UID, Controller: ptr.To(true)}}}}
	f.objs = append(f.objs, api, apiRS)
	oom := f.addPod("api-xyz-0", 1, apiRS)
	oom.Spec.RestartPolicy = corev1.RestartPolicyNever
	oom.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}}
	f.gfa.Spec.TargetRef.Name = "api"
	f.gfr.Spec.TargetRef = f.gfa.Spec.TargetRef
	f.build()
	f.run()
	f.run()
	if got := floorMemory(f.status().Floor, "main"); got != bump12(1<<30) {
		t.Fatalf("floor for api %d, want %d", got, bump12(1<<30))
	}

	// Retarget to web; the recommender has written for web since.
	ctx := context.Background()
	gfa := &gpufracv1.GPUFractionAutoscaler{}
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, gfa); err != nil {
		t.Fatal(err)
	}
	gfa.Spec.TargetRef.Name = "web"
	if err := f.c.Update(ctx, gfa); err != nil {
		t.Fatal(err)
	}
	gfr := &gpufracv1.GPUFractionRecommendation{}
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, gfr); err != nil {
		t.Fatal(err)
	}
	gfr.Spec.TargetRef = gfa.Spec.TargetRef
	if err := f.c.Update(ctx, gfr); err != nil {
		t.Fatal(err)
	}
	if mem, _ := contract.Floor(gfa, "main", time.Now()); mem >= 0 {
		t.Errorf("contract.Floor for web = %d before the updater ran: api's floor applies to web's new pods", mem)
	}
	f.run()
	if live := f.livePods(); !live["web-abc-0"] || !live["web-abc-1"] {
		t.Fatalf("web's pods replaced to api's floor: %v (updates %+v)", live, f.status().Updates)
	}
	st := f.status()
	if st.Floor != nil {
		t.Errorf("floor %+v carried over to web", st.Floor)
	}
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, gfa); err != nil {
		t.Fatal(err)
	}
	if mem, _ := contract.Floor(gfa, "main", time.Now()); mem >= 0 {
		t.Errorf("contract.Floor for web = %d", mem)
	}
}

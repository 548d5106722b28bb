package updater

import (
	"encoding/json"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// A compute rollback floor (782m) is in force while the recommendation time-slices
// compute (250m, placed by a request of 100m). The webhook and the updater share the
// rule (contract.WithFloor): a replacement the webhook writes holds a partition
// at the floor and is in date for the updater (no eviction loop between the two), and a
// pod placed time-sliced, which holds no partition, is below the floor and is replaced
// as a rollback. Before, the webhook wrote new pods time-sliced under the floor and the
// updater took them as in date: the compute the rollback restored never reached them.
func TestComputeFloorOverTimeSlicing(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendAnnotations, 1, 1)
	r := &f.gfr.Status.ContainerRecommendations[0]
	r.SharingMode, r.ComputeRequest = gpufracv1.SharingModeTimeSlicing, q("100m")
	f.gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{Until: metav1.NewTime(time.Now().Add(time.Hour)), Reason: "latency objective breached",
		Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Compute: q("782m")}}}}
	// web-abc-0 was placed time-sliced by the webhook before the floor.
	sliced := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendAnnotations, Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{{
		Name: "main", Memory: q("1Gi"), WrittenMemory: q("1Gi"), WrittenComputeRequest: q("100m")}}}
	b, _ := json.Marshal(sliced)
	f.pods[0].Annotations[gpufracv1.AnnotationApplied] = string(b)
	f.build()

	// The webhook's replacement, created an hour ago (old enough for any change).
	c := corev1.Container{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: limits("nvidia.com/gpu", "1")}}
	resp := f.webhookResponse(t, c)
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("webhook: allowed %v, patches %v, warnings %v", resp.Allowed, resp.Patches, resp.Warnings)
	}
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{GenerateName: "web-abc-",
		OwnerReferences: f.pods[0].OwnerReferences}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	raw, _ := json.Marshal(pod)
	pb, _ := json.Marshal(resp.Patches)
	p, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = p.Apply(raw); err != nil {
		t.Fatal(err)
	}
	written := &corev1.Pod{}
	if err := json.Unmarshal(raw, written); err != nil {
		t.Fatal(err)
	}
	if got := written.Annotations[gpufracv1.AnnotationGPUCompute]; got != "782m" {
		t.Errorf("replacement gpu-compute %q, want the floor 782m", got)
	}
	written.Name, written.Namespace, written.UID = "web-abc-w", ns, types.UID("uid-web-abc-w")
	written.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	written.Status = f.pods[0].Status
	if err := f.c.Create(t.Context(), written); err != nil {
		t.Fatal(err)
	}

	f.run()
	live := f.livePods()
	if live["web-abc-0"] || !live["web-abc-w"] {
		t.Errorf("live pods %v: want the time-sliced web-abc-0 replaced (below the compute floor) and the webhook's web-abc-w kept", live)
	}
	// Next cycle: the webhook's pod is still in date (nothing listed, nothing evicted).
	f.run()
	if st := f.status(); len(st.Updates) != 0 || !f.livePods()["web-abc-w"] {
		t.Errorf("updates %+v, live %v: want the webhook's pod in date", st.Updates, f.livePods())
	}
}

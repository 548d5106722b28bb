package updater

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// Issue 14 kind 3: a GPU HPA scales the workload; the recommendation shrinks memory
// (3Gi → 1Gi) and compute (250m → 100m). The updater publishes the compute the pods hold
// (heldCompute 250m) before it replaces anything, replaces for memory only, says so in
// the event, and the webhook's replacement gets 250m (25 % gpucores), not 100m; with the
// opt-in annotation the webhook writes the recommended 100m.
func TestComputeHeldInReplacements(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
	f.gfr.Status.ContainerRecommendations[0].Target.Compute = q("100m")
	f.gfr.Status.ContainerRecommendations[0].LowerBound.Compute = q("80m")
	f.gfr.Status.ContainerRecommendations[0].UpperBound.Compute = q("150m")
	f.addGPUHPA()
	f.build()

	// First cycle: held compute not published yet, nothing replaced.
	f.run()
	if len(f.livePods()) != 2 {
		t.Fatal("evicted before heldCompute was published")
	}
	st := f.status()
	if len(st.Updates) == 0 || st.Updates[0].SkipReason != SkipHeldComputePending {
		t.Fatalf("updates %+v, want %s", st.Updates, SkipHeldComputePending)
	}
	if len(st.HeldCompute) != 1 || st.HeldCompute[0].ContainerName != "main" || st.HeldCompute[0].Compute.MilliValue() != 250 {
		t.Fatalf("heldCompute %+v, want main 250m (what the pods hold)", st.HeldCompute)
	}

	// Second cycle: one pod replaced for memory; the event says compute is not shrunk.
	f.run()
	if len(f.livePods()) != 1 {
		t.Fatalf("live pods %v, want one evicted", f.livePods())
	}
	evs := f.events()
	if !hasEvent(evs, "compute not shrunk") || !hasEvent(evs, "at least main: compute 250m") {
		t.Errorf("events %q: want the eviction to say compute is not shrunk (250m)", evs)
	}

	// The updater compares with what the webhook writes: compute 250m.
	gfa := &gpufracv1.GPUFractionAutoscaler{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, gfa); err != nil {
		t.Fatal(err)
	}
	if got := contract.TargetsOf(gfa, f.gfr)["main"].Compute; got != 250 {
		t.Errorf("TargetsOf compute %dm, want 250m while held", got)
	}

	// The webhook (same rule, contract.HeldCompute) gives the replacement 250m.
	m := admission.NewMutator(f.c, f.scheme, admission.Config{})
	if got := gpucores(t, m, f.pods[0].Spec.Containers[0]); got != "25" {
		t.Errorf("replacement gpucores %q, want 25 (the held 250m, not the recommended 100m)", got)
	}
	// Opt-in: ComputeShrinkHeld False (OptedIn): the recommended 100m.
	meta.SetStatusCondition(&gfa.Status.Updater.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionFalse, Reason: ReasonOptedIn})
	if err := f.c.Status().Update(context.Background(), gfa); err != nil {
		t.Fatal(err)
	}
	if got := gpucores(t, m, f.pods[0].Spec.Containers[0]); got != "10" {
		t.Errorf("opted in: gpucores %q, want 10", got)
	}
}

// gpucores runs the webhook on a new pod of ReplicaSet web-abc with container c and
// returns the nvidia.com/gpucores limit it writes.
func gpucores(t *testing.T, m *admission.Mutator, c corev1.Container) string {
	t.Helper()
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-abc-", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{*c.DeepCopy()}}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	resp := m.Handle(context.Background(), ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "r", Namespace: ns,
		Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}})
	for _, p := range resp.Patches {
		if strings.HasSuffix(p.Path, "limits/nvidia.com~1gpucores") {
			return p.Value.(string)
		}
		if strings.HasSuffix(p.Path, "/limits") {
			if l, ok := p.Value.(corev1.ResourceList); ok {
				if v, ok := l["nvidia.com/gpucores"]; ok {
					return v.String()
				}
			}
		}
	}
	t.Fatalf("no gpucores written: %+v %v", resp.Patches, resp.Warnings)
	return ""
}

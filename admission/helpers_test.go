package admission

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
)

const testNS = "team-a"

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// gpuContainer is a container asking for n nvidia.com/gpu.
func gpuContainer(name string, n int64) corev1.Container {
	l := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}
	return corev1.Container{Name: name, Image: "img", Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}}
}

// deployment objects: Deployment web -> ReplicaSet web-abc -> pod (not stored).
func deploymentObjects() (*appsv1.Deployment, *appsv1.ReplicaSet) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web", UID: "dep-uid"}}
	ctrl := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web-abc", UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep-uid", Controller: &ctrl}}}}
	return dep, rs
}

// podOf returns a pod of ReplicaSet web-abc with generateName only and no namespace, as
// the ReplicaSet controller sends it.
func podOf(containers ...corev1.Container) *corev1.Pod {
	ctrl := true
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-abc-", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid", Controller: &ctrl}}},
		Spec: corev1.PodSpec{Containers: containers, SchedulerName: corev1.DefaultSchedulerName},
	}
}

func autoscaler(name string, mode gpufracv1.UpdateMode, backend gpufracv1.BackendType) *gpufracv1.GPUFractionAutoscaler {
	return &gpufracv1.GPUFractionAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(name + "-uid")},
		Spec: gpufracv1.GPUFractionAutoscalerSpec{
			TargetRef:    autoscalingRef("Deployment", "web"),
			UpdatePolicy: &gpufracv1.UpdatePolicy{UpdateMode: &mode},
			Backend:      &gpufracv1.Backend{Type: backend},
		},
	}
}

func recommendation(name string, confidence int32, recs ...gpufracv1.ContainerRecommendation) *gpufracv1.GPUFractionRecommendation {
	ctrl := true
	return &gpufracv1.GPUFractionRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Generation: 3,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: name, UID: types.UID(name + "-uid"), Controller: &ctrl}}},
		Status: gpufracv1.GPUFractionRecommendationStatus{
			ObservedGeneration:       1,
			ContainerRecommendations: recs,
			ConfidencePercent:        &confidence,
			Conditions:               []metav1.Condition{{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "Ok", LastTransitionTime: metav1.Now()}},
		},
	}
}

func containerRec(name, mem, compute string) gpufracv1.ContainerRecommendation {
	r := gpufracv1.ContainerRecommendation{ContainerName: name}
	if mem != "" {
		r.Target.Memory = q(mem)
	}
	if compute != "" {
		r.Target.Compute = q(compute)
	}
	return r
}

func newFakeReader(t testing.TB, objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.MustNew()).WithObjects(objs...).
		WithIndex(&gpufracv1.GPUFractionAutoscaler{}, TargetIndexField, IndexAutoscalerTarget).Build()
}

func createRequest(t testing.TB, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "req-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: testNS,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

// patched applies the response's patches to the request's pod, as the API server does.
func patched(t testing.TB, req admission.Request, resp admission.Response) *corev1.Pod {
	t.Helper()
	doc := req.Object.Raw
	if len(resp.Patches) > 0 {
		pb, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(pb)
		if err != nil {
			t.Fatalf("decode patch %s: %v", pb, err)
		}
		if doc, err = p.Apply(doc); err != nil {
			t.Fatalf("apply patch %s: %v", pb, err)
		}
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(doc, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func autoscalingRef(kind, name string) autoscalingv1.CrossVersionObjectReference {
	return autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: kind, Name: name}
}

func resourceValue(c *corev1.Container, list string, name corev1.ResourceName) (int64, bool) {
	l := c.Resources.Limits
	if list == "requests" {
		l = c.Resources.Requests
	}
	q, ok := l[name]
	return q.Value(), ok
}

func env(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

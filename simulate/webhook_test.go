package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/trace"
)

// webhookWrites runs the admission webhook (admission.Mutator with cfg) on a new pod of
// Deployment ns/web asking for one GPU, under autoscaler gfa and recommendation gfr, and
// returns the patched pod's annotations (nil: the pod was admitted unchanged).
func webhookWrites(t *testing.T, cfg admission.Config, gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, now time.Time) map[string]string {
	t.Helper()
	ctrl := true
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "dep-uid"}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abc", UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep-uid", Controller: &ctrl}}}}
	c := fake.NewClientBuilder().WithScheme(scheme.MustNew()).WithObjects(dep, rs, gfa, gfr).
		WithIndex(&gpufracv1.GPUFractionAutoscaler{}, admission.TargetIndexField, admission.IndexAutoscalerTarget).Build()
	m := admission.NewMutator(c, scheme.MustNew(), cfg)
	m.Now = func() time.Time { return now }
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-abc-", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid", Controller: &ctrl}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img", Resources: corev1.ResourceRequirements{Limits: gpu, Requests: gpu.DeepCopy()}}}}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	resp := m.Handle(context.Background(), ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "r", Namespace: "ns",
		Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}})
	if !resp.Allowed {
		t.Fatalf("pod denied: %+v", resp.Result)
	}
	if len(resp.Patches) == 0 {
		return nil
	}
	pb, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = p.Apply(raw); err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out.Annotations
}

// TestWrittenIsWhatTheWebhookWrites: the grant a simulated pod gets from a recommendation
// (recDecision, floored under the workload's rollback floor, written by the backend) is
// what the admission webhook itself writes into a new pod for the same recommendation,
// floor and flags, read back as the scheduler and the updater read it: the memory request
// the pod is packed by, the limit it is out of memory above, and the applied record's
// memory; or, where the webhook leaves the pod unchanged, the whole GPU. Recommendations:
// a plain target, a memoryLimit above the target and its upper bound (the memory spread
// of --memory-spread-backends), one at a whole GPU, a young workload's share, each with
// and without a rollback floor; backends: annotations (observed-peak request, none) and
// kai-nvfractions (each request and limit source).
func TestWrittenIsWhatTheWebhookWrites(t *testing.T) {
	capacity := 80 * gib
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := func(b int64) *resource.Quantity { return resource.NewQuantity(b, resource.BinarySI) }
	rec := func(target, upper, limit, peak int64, young int32) gpufracv1.ContainerRecommendation {
		r := gpufracv1.ContainerRecommendation{ContainerName: "main", ConfidencePercent: 100, HistoryHours: 48, YoungMarginPercent: young,
			Target: gpufracv1.GPUResources{Memory: q(target)}, LowerBound: gpufracv1.GPUResources{Memory: q(target / 2)},
			UpperBound: gpufracv1.GPUResources{Memory: q(upper)}, ObservedPeakMemory: q(peak)}
		if limit > 0 {
			r.MemoryLimit = q(limit)
		}
		return r
	}
	recs := map[string]gpufracv1.ContainerRecommendation{
		"plain":              rec(4*gib, 6*gib, 0, 7*gib/2, 0),
		"memory limit":       rec(4*gib, 5*gib, 7*gib+12345, 7*gib/2, 0),
		"limit at a GPU":     rec(30*gib, 35*gib, 80*gib, 25*gib, 0),
		"young share":        rec(8*gib, 20*gib, 20*gib, 6*gib, 25),
		"young share capped": rec(41*gib, 80*gib, 80*gib, 30*gib, 25),
		"partitioned compute": func() gpufracv1.ContainerRecommendation {
			r := rec(4*gib, 6*gib, 0, 7*gib/2, 0)
			r.SharingMode, r.Target.Compute, r.LowerBound.Compute, r.UpperBound.Compute = gpufracv1.SharingModeMPS, resource.NewMilliQuantity(300, resource.DecimalSI),
				resource.NewMilliQuantity(200, resource.DecimalSI), resource.NewMilliQuantity(500, resource.DecimalSI)
			return r
		}(),
		"time-sliced without a compute request": func() gpufracv1.ContainerRecommendation {
			r := rec(4*gib, 6*gib, 0, 7*gib/2, 0)
			r.SharingMode, r.Target.Compute = gpufracv1.SharingModeTimeSlicing, resource.NewMilliQuantity(0, resource.DecimalSI)
			return r
		}(),
		"time-sliced compute": func() gpufracv1.ContainerRecommendation {
			r := rec(4*gib, 6*gib, 0, 7*gib/2, 0)
			r.SharingMode, r.Target.Compute, r.ComputeRequest = gpufracv1.SharingModeTimeSlicing, resource.NewMilliQuantity(300, resource.DecimalSI), resource.NewMilliQuantity(250, resource.DecimalSI)
			return r
		}(),
	}
	policies := map[string]*gpufracv1.ContainerPolicy{
		"":                nil,
		"maxMemory 3Gi":   {ContainerName: gpufracv1.ContainerPolicyDefault, MaxMemory: q(3 * gib)},
		"minMemory 12Gi":  {ContainerName: gpufracv1.ContainerPolicyDefault, MinMemory: q(12 * gib)},
		"maxCompute 200m": {ContainerName: gpufracv1.ContainerPolicyDefault, MaxCompute: resource.NewMilliQuantity(200, resource.DecimalSI)},
		"minCompute 400m": {ContainerName: gpufracv1.ContainerPolicyDefault, MinCompute: resource.NewMilliQuantity(400, resource.DecimalSI)},
	}
	type be struct {
		bt gpufracv1.BackendType
		nv backend.NVFractionsConfig
		ac backend.AnnotationsConfig
	}
	backends := []be{
		{ac: backend.AnnotationsConfig{MemoryRequest: backend.AnnotationsMemoryRequestObservedPeak}},
		{ac: backend.AnnotationsConfig{MemoryRequest: backend.AnnotationsMemoryRequestNone}},
		{bt: gpufracv1.BackendKAINVFractions, nv: backend.NVFractionsConfig{Request: backend.NVFractionsRequestTarget}},
		{bt: gpufracv1.BackendKAINVFractions, nv: backend.NVFractionsConfig{Request: backend.NVFractionsRequestObservedPeak}},
		{bt: gpufracv1.BackendKAINVFractions, nv: backend.NVFractionsConfig{Limit: backend.NVFractionsLimitTarget}},
	}
	for name, r := range recs {
		for _, floorGiB := range []int64{0, 10} {
			for pname, pol := range policies {
				for _, b := range backends {
					r := r
					label := fmt.Sprintf("%s, floor %dGi, policy %q, backend %q %+v %+v", name, floorGiB, pname, b.bt, b.nv, b.ac)
					tr := trace.Trace{Pods: []trace.Pod{pod("web", 0, []float64{1}, []float64{0})}}
					rp, err := newReplay(&tr, Options{GPUMemoryBytes: capacity, Policies: []string{PolicyGPUFrac}, Backend: b.bt, NVFractions: b.nv, Annotations: b.ac})
					if err != nil {
						t.Fatal(err)
					}
					spec := AutoscalerSpec(history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}, nil, b.bt)
					if pol != nil {
						spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{*pol}}
					}
					gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "gfa-uid"}, Spec: spec}
					ps := &polState{floors: []*gpufracv1.UpdaterFloor{nil}}
					if floorGiB > 0 {
						f := &gpufracv1.UpdaterFloor{Reason: "OOMKilled", Until: metav1.NewTime(now.Add(time.Hour)),
							Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q(floorGiB * gib)}}}
						ps.floors[0] = f
						gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: f}
					}
					dec := recDecision(&spec, &r, 0.5, 24*time.Hour, capacity)
					var got grant
					if dec.ok {
						got = rp.written(ps.floored(0, "main", dec, now, capacity))
					} else {
						got = rp.coldStart()
					}

					conf := int32(100)
					ctrl := true
					gfr := &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web",
						OwnerReferences: []metav1.OwnerReference{{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: "web", UID: "gfa-uid", Controller: &ctrl}}},
						Status: gpufracv1.GPUFractionRecommendationStatus{ContainerRecommendations: []gpufracv1.ContainerRecommendation{r}, ConfidencePercent: &conf,
							Conditions: []metav1.Condition{{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "Ok", LastTransitionTime: metav1.Now()}}}}
					ann := webhookWrites(t, admission.Config{Config: backend.Config{GPUMemoryBytes: capacity, NVFractions: b.nv, Annotations: b.ac}}, gfa, gfr, now)
					applied, _ := gpufracv1.ParseApplied(ann)
					var ac *gpufracv1.AppliedContainer
					if applied != nil {
						ac = applied.Container("main")
					}
					if ac == nil || ac.Memory == nil {
						if got != rp.coldStart() {
							t.Errorf("%s: the webhook leaves the pod's whole GPU, the simulator grants %+v", label, got)
						}
						continue
					}
					var wantReq, wantLimit resource.Quantity
					if b.bt == gpufracv1.BackendKAINVFractions {
						wantReq = resource.MustParse(ann["nvidia.com/container.main.gpu-memory.request"])
						wantLimit = resource.MustParse(ann["nvidia.com/container.main.gpu-memory.limit"])
					} else {
						wantLimit = resource.MustParse(ann[gpufracv1.AnnotationContainerPrefix+"main"+gpufracv1.AnnotationContainerMemorySuffix])
						wantReq = wantLimit
						if b.ac.MemoryRequest != backend.AnnotationsMemoryRequestNone {
							wantReq = resource.MustParse(ann[gpufracv1.AnnotationContainerPrefix+"main"+gpufracv1.AnnotationContainerMemoryRequestSuffix])
						}
					}
					if got.alloc.MemoryBytes != wantReq.Value() || got.limit != wantLimit.Value() || got.record != ac.Memory.Value() {
						t.Errorf("%s: simulator request %d MiB, limit %d MiB, record %d MiB; the webhook wrote request %s, limit %s, record %s",
							label, got.alloc.MemoryBytes>>20, got.limit>>20, got.record>>20, wantReq.String(), wantLimit.String(), ac.Memory.String())
					}
					wantCompute, wantRequest := int64(-1), int64(0)
					if ac.WrittenCompute != nil {
						wantCompute = ac.WrittenCompute.MilliValue()
					}
					if ac.WrittenComputeRequest != nil {
						wantRequest = ac.WrittenComputeRequest.MilliValue()
					}
					wantPlaced := max(wantCompute, wantRequest, 0)
					if got.compute != wantCompute || got.request != wantRequest || got.alloc.ComputeMilli != wantPlaced {
						t.Errorf("%s: simulator compute %dm, request %dm, placed by %dm; the webhook wrote compute %dm, request %dm",
							label, got.compute, got.request, got.alloc.ComputeMilli, wantCompute, wantRequest)
					}
				}
			}
		}
	}
}

// TestTimeSlicedWithoutRequestIsInDate: a pod written for a recommendation that
// time-slices compute without a compute request (an idle workload's, or under a negative
// --contention-budget) holds no compute partition, as the webhook writes none: the
// updater finds it in date and the simulator replaces nothing over two hours. Before,
// the simulator recorded a partition of 0m, which the updater's sharing-mode rule reads
// as a partition the recommendation no longer wants, and replaced the pod again and
// again, each replacement written as the one before.
func TestTimeSlicedWithoutRequestIsInDate(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{pod("w", 0, repeat(4, 120), repeat(0, 120))}}
	res := runStub(t, tr, gpufracOptions(), func(int, int) decision {
		d := memDecision(8, 4, 16)
		d.target.TimeSlicesCompute, d.target.SharingMode = true, gpufracv1.SharingModeTimeSlicing
		return d
	})
	if n := res.Policies[0].Replacements; n != 0 {
		t.Errorf("%d replacements of a pod written as its recommendation, want 0", n)
	}
}

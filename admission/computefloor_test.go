package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/internal/scheme"
)

// TestMutateComputeFloorPartitionsTimeSlicedCompute: while a compute rollback floor is
// in force (status.updater.floor, raised after a shrink breached the latency objective),
// a new pod of a recommendation that time-slices compute gets a compute partition of at
// least the floor (contract.WithFloor, the rule the updater compares pods with):
// annotations writes gpu-compute and no placement request, hami gpucores, dra an MPS
// claim with the floor's active thread percentage; the applied record says the floor.
// Once the floor expires the pod is time-sliced again. Before, the webhook wrote no
// partition under the floor (time-slicing guarantees no compute), so every new pod
// lost what the rollback restored.
func TestMutateComputeFloorPartitionsTimeSlicedCompute(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sliced := containerRec("main", "4Gi", "120m")
	sliced.SharingMode, sliced.ComputeRequest = gpufracv1.SharingModeTimeSlicing, q("100m")
	withFloor := func(b gpufracv1.BackendType, until time.Time) *gpufracv1.GPUFractionAutoscaler {
		gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, b)
		gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{Until: metav1.NewTime(until), Reason: "latency objective breached",
			Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Compute: q("782m")}}}}
		return gfa
	}
	for _, tc := range []struct {
		name  string
		until time.Time
		// compute and request are the annotations backend's gpu-compute and
		// gpu-compute-request ("" absent), gpucores hami's (-1 absent), recorded the
		// applied record's compute.
		compute, request, recorded string
		gpucores                   int64
	}{
		{name: "floor in force", until: now.Add(time.Hour), compute: "782m", recorded: "782m", gpucores: 79},
		{name: "floor expired", until: now, request: "100m", gpucores: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mutator(t, Config{}, withFloor(gpufracv1.BackendAnnotations, tc.until), recommendation("web", 80, sliced))
			m.Now = func() time.Time { return now }
			o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("annotations: skipped %s %v", o.skip, o.warnings)
			}
			if c, r := got.Annotations[gpufracv1.AnnotationGPUCompute], got.Annotations[gpufracv1.AnnotationGPUComputeRequest]; c != tc.compute || r != tc.request {
				t.Errorf("annotations: gpu-compute %q, gpu-compute-request %q; want %q, %q", c, r, tc.compute, tc.request)
			}
			if rec, _ := gpufracv1.ParseApplied(got.Annotations); rec == nil || rec.Container("main") == nil || rec.Container("main").Compute.String() != tc.recorded && !(tc.recorded == "" && rec.Container("main").Compute == nil) {
				t.Errorf("annotations: applied record %+v, want compute %q", rec, tc.recorded)
			}

			m = mutator(t, Config{}, withFloor(gpufracv1.BackendHAMi, tc.until), recommendation("web", 80, sliced))
			m.Now = func() time.Time { return now }
			o, _, got = handle(t, m, podOf(gpuContainer("main", 1)))
			if o.skip != "" {
				t.Fatalf("hami: skipped %s %v", o.skip, o.warnings)
			}
			v, ok := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpucores")
			if !ok {
				v = -1
			}
			if v != tc.gpucores {
				t.Errorf("hami: gpucores %d, want %d", v, tc.gpucores)
			}

			strategy, pct := draSharing(t, withFloor(gpufracv1.BackendDRA, tc.until), recommendation("web", 80, sliced), now)
			wantStrategy, wantPct := backend.GpuSharingTimeSlicing, ""
			if tc.compute != "" {
				wantStrategy, wantPct = backend.GpuSharingMPS, `"defaultActiveThreadPercentage":79`
			}
			if !strings.Contains(strategy, `"strategy":"`+wantStrategy+`"`) || !strings.Contains(strategy, wantPct) || pct != (wantPct != "") {
				t.Errorf("dra: claim template's GpuConfig %s, want strategy %s %s", strategy, wantStrategy, wantPct)
			}
		})
	}
}

// draSharing runs the webhook with the dra backend on a pod of ReplicaSet web-abc whose
// container main uses the claim gpu of template gpu-tmpl (one request of class
// gpu.nvidia.com), and returns the GpuConfig of the template the pod is pointed at and
// whether it sets an active thread percentage.
func draSharing(t *testing.T, gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, now time.Time) (string, bool) {
	t.Helper()
	src := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "gpu-tmpl"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}}}}}}
	dep, rs := deploymentObjects()
	c := newFakeReader(t, dep, rs, gfa, gfr, src)
	m := NewMutator(c, scheme.MustNew(), Config{Config: backend.Config{DRA: backend.DRAConfig{Templates: backend.ClientClaimTemplates{Reader: c, Writer: c}}}})
	m.Now = func() time.Time { return now }
	tmpl := "gpu-tmpl"
	pod := podOf(corev1.Container{Name: "main", Image: "img", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}})
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	o, _, got := handle(t, m, pod)
	if o.skip != "" {
		t.Fatalf("dra: skipped %s %v", o.skip, o.warnings)
	}
	name := got.Spec.ResourceClaims[0].ResourceClaimTemplateName
	if name == nil || *name == tmpl {
		t.Fatalf("dra: claim still points at %v", name)
	}
	derived := &resourcev1.ResourceClaimTemplate{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: *name}, derived); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	for _, cfg := range derived.Spec.Spec.Devices.Config {
		if o := cfg.Opaque; o != nil {
			raw = o.Parameters.Raw
		}
	}
	return string(raw), strings.Contains(string(raw), "defaultActiveThreadPercentage")
}

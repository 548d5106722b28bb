package backend

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// draClient is a fake client holding objs.
func draClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	return fake.NewClientBuilder().WithObjects(objs...).Build()
}

// draSource is a workload's template in namespace ns: one request "gpu" of class, with
// an old GpuConfig for it (replaced by gpufrac) and a config of another driver (kept).
func draSource(name, class string) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}},
			Config: []resourcev1.DeviceClaimConfiguration{{Requests: []string{"gpu"}, DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: "gpu.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`)}}}}},
		}}},
	}
}

// draPod is a pod in ns whose containers all use the claim "gpu" from template tmpl.
func draPod(tmpl string, containers ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}})
	}
	return pod
}

// TestDRAFallbacks: whatever is missing leaves the pod alone — no client, a container
// without a claim, a claim of another device class, an API error, a template of the
// gpufrac name with another spec, an all-Exclusive claim; TimeSlicing writes the
// interval and records no limit.
func TestDRAFallbacks(t *testing.T) {
	ctx := context.Background()
	src := draSource("gpu-tmpl", "gpu.nvidia.com")
	codecWith := func(c client.Client) Codec {
		return backend(t, Config{DRA: DRAConfig{Templates: ClientClaimTemplates{Reader: c, Writer: c}, TimeSliceInterval: "Long"}}, gpufracv1.BackendDRA)
	}
	unchanged := func(t *testing.T, pod *corev1.Pod, tmpl string) {
		t.Helper()
		if n := *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName; n != tmpl {
			t.Errorf("claim template %s, want %s unchanged", n, tmpl)
		}
	}
	t.Run("no client", func(t *testing.T) {
		_, err := backend(t, Config{}, gpufracv1.BackendDRA).Apply(draPod("gpu-tmpl", "a"), []*Target{target("a", 0, 1024, -1)})
		wantUnsafe(t, err, UnsafeDRA)
	})
	t.Run("container without a claim", func(t *testing.T) {
		pod := draPod("gpu-tmpl", "a")
		pod.Spec.Containers[0].Resources.Claims = nil
		tg := target("a", 0, 1024, -1)
		w, err := codecWith(draClient(t, src.DeepCopy())).Apply(pod, []*Target{tg})
		if err != nil || len(w) != 1 || tg.Wrote() {
			t.Errorf("warnings %v, err %v, wrote %v; want one warning and nothing written", w, err, tg.Wrote())
		}
	})
	t.Run("another device class", func(t *testing.T) {
		pod := draPod("nic", "a")
		tg := target("a", 0, 1024, -1)
		w, err := codecWith(draClient(t, draSource("nic", "nic.example.com"))).Apply(pod, []*Target{tg})
		if err != nil || len(w) != 1 || tg.Wrote() {
			t.Errorf("warnings %v, err %v, wrote %v; want one warning and nothing written", w, err, tg.Wrote())
		}
		unchanged(t, pod, "nic")
	})
	t.Run("API error", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(draClient(t).Scheme()).WithObjects(src.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
			Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
				return errors.New("etcd unavailable")
			}}).Build()
		pod := draPod("gpu-tmpl", "a")
		_, err := codecWith(c).Apply(pod, []*Target{target("a", 0, 1024, -1)})
		wantUnsafe(t, err, UnsafeDRA)
	})
	// A template that carries gpufrac's label and names itself as its source (re-created
	// from a gpufrac template's YAML under its source's name), or two that name each
	// other: the workload's own template is not known. Before, the lookup followed the
	// chain without end (each hop an API read; with a reader that answers at once, a
	// stack overflow that ends the webhook's process).
	for _, loop := range [][2]string{{"gpu-tmpl", "gpu-tmpl"}, {"gpu-tmpl", "other"}} {
		t.Run("source chain "+loop[0]+" -> "+loop[1], func(t *testing.T) {
			mark := func(name, source string) *resourcev1.ResourceClaimTemplate {
				tm := draSource(name, "gpu.nvidia.com")
				tm.Labels = map[string]string{LabelManagedBy: "gpufrac"}
				tm.Annotations = map[string]string{AnnotationSourceTemplate: source}
				return tm
			}
			objs := []client.Object{mark(loop[0], loop[1])}
			if loop[1] != loop[0] {
				objs = append(objs, mark(loop[1], loop[0]))
			}
			pod := draPod(loop[0], "a")
			_, err := codecWith(draClient(t, objs...)).Apply(pod, []*Target{target("a", 0, 1024, -1)})
			wantUnsafe(t, err, UnsafeDRA)
			if err == nil || !strings.Contains(err.Error(), "itself a gpufrac template") {
				t.Errorf("error %v, want it to say the source is a gpufrac template", err)
			}
			unchanged(t, pod, loop[0])
		})
	}
	t.Run("name taken by another spec", func(t *testing.T) {
		c := draClient(t, src.DeepCopy())
		codec := codecWith(c)
		pod := draPod("gpu-tmpl", "a")
		if _, err := codec.Apply(pod, []*Target{target("a", 0, 1024, -1)}); err != nil {
			t.Fatal(err)
		}
		var got resourcev1.ResourceClaimTemplate
		name := *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: name}, &got); err != nil {
			t.Fatal(err)
		}
		got.Spec.Spec.Devices.Config = nil
		if err := c.Update(ctx, &got); err != nil {
			t.Fatal(err)
		}
		_, err := codec.Apply(draPod("gpu-tmpl", "a"), []*Target{target("a", 0, 1024, -1)})
		wantUnsafe(t, err, UnsafeDRA)
	})
	t.Run("exclusive", func(t *testing.T) {
		pod := draPod("gpu-tmpl", "a")
		tg := target("a", 0, 1024, 900)
		tg.SharingMode = gpufracv1.SharingModeExclusive
		if _, err := codecWith(draClient(t, src.DeepCopy())).Apply(pod, []*Target{tg}); err != nil || tg.Wrote() {
			t.Errorf("err %v, wrote %v; want nothing written", err, tg.Wrote())
		}
		unchanged(t, pod, "gpu-tmpl")
	})
	t.Run("time-slicing", func(t *testing.T) {
		c := draClient(t, src.DeepCopy())
		pod := draPod("gpu-tmpl", "a")
		tg := target("a", 0, 1024, -1)
		tg.SharingMode = gpufracv1.SharingModeTimeSlicing
		if _, err := codecWith(c).Apply(pod, []*Target{tg}); err != nil || tg.Wrote() {
			t.Fatalf("err %v, wrote %v; want no limit written", err, tg.Wrote())
		}
		var got resourcev1.ResourceClaimTemplate
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName}, &got); err != nil {
			t.Fatal(err)
		}
		if p := string(got.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw); !strings.Contains(p, `"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}`) {
			t.Errorf("parameters %s, want TimeSlicing with interval Long", p)
		}
	})
	t.Run("dry run creates nothing", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(draClient(t).Scheme()).WithObjects(src.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				o := &client.CreateOptions{}
				o.ApplyOptions(opts)
				if len(o.DryRun) == 0 {
					return errors.New("not a dry run")
				}
				return nil
			}}).Build()
		_, err := codecWith(c).(DryRunner).DryRun().Apply(draPod("gpu-tmpl", "a"), []*Target{target("a", 0, 1024, -1)})
		if err != nil {
			t.Error(err)
		}
	})
}

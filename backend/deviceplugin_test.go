package backend

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/sharingplan/plantest"
)

// sharingPolicy is a GPUSharingPolicy selecting autoscalers labelled share=<name> with a
// plan of mode × n on 80Gi GPUs; applied sets its Applied condition True.
func sharingPolicy(name string, mode gpufracv1.SharingMode, n int32, applied bool) *gpufracv1.GPUSharingPolicy {
	p := plantest.Policy(name, mode, n, applied)
	p.Spec.AutoscalerSelector.MatchLabels = map[string]string{"share": name}
	return p
}

// planClient is a fake client holding the policies.
func planClient(t *testing.T, pols ...*gpufracv1.GPUSharingPolicy) client.Client {
	t.Helper()
	s := scheme.MustNew()
	b := fake.NewClientBuilder().WithScheme(s)
	for _, p := range pols {
		b = b.WithObjects(p)
	}
	return b.Build()
}

// sharedBackend is backend bt reading pols, bound to an autoscaler labelled share=pool.
func sharedBackend(t *testing.T, bt gpufracv1.BackendType, pool string, pols ...*gpufracv1.GPUSharingPolicy) Codec {
	t.Helper()
	codec := backend(t, Config{DevicePlugin: DevicePluginConfig{Policies: planClient(t, pols...)}}, bt)
	gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Labels: map[string]string{"share": pool}}}
	return codec.(AutoscalerScoped).ForAutoscaler(gfa)
}

// TestDevicePluginApply: the pod gets one nvidia.com/gpu per GPU container (requests =
// limits), the nodeSelector on the plan's config label and the plan annotations; a
// container without a GPU is skipped with a warning; a memory target above the replica
// share is noted (CappedNote). Nothing is written — the pod is unsafe with the reason —
// without exactly one applied plan of the backend's mode that selects the autoscaler,
// for a container asking for two GPUs, or a nodeSelector naming another config.
func TestDevicePluginApply(t *testing.T) {
	ts := sharingPolicy("pool", gpufracv1.SharingModeTimeSlicing, 3, true)
	codec := sharedBackend(t, gpufracv1.BackendNVIDIATimeSlicing, "pool", ts)
	pod := podOf(gpuContainer("a", 1), corev1.Container{Name: "b"})
	pod.Spec.Containers[0].Resources.Requests = nil // a limit alone: the request is written too
	big, none := target("a", 0, 30000, 500), target("b", 1, 1024, -1)
	warnings, err := codec.Apply(pod, []*Target{big, none})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if r, l := c.Resources.Requests["nvidia.com/gpu"], c.Resources.Limits["nvidia.com/gpu"]; r.Value() != 1 || l.Value() != 1 {
		t.Errorf("nvidia.com/gpu request %s limit %s, want 1 and 1", r.String(), l.String())
	}
	if got := pod.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel]; got != "gpufrac-pool" {
		t.Errorf("nodeSelector %v, want %s=gpufrac-pool", pod.Spec.NodeSelector, gpufracv1.DevicePluginConfigLabel)
	}
	if pod.Annotations[AnnotationSharingReplicas] != "3" || pod.Annotations[AnnotationSharingGPUMemory] != "80Gi" || pod.Annotations[AnnotationSharingPolicy] != "pool" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	share := int64(27306) * MiB // 80Gi / 3 = 27306.67MiB, whole MiB down
	if big.WrittenMemoryBytes != share || big.WrittenComputeMilli != -1 || none.Wrote() {
		t.Errorf("written a: %d bytes %dm, b wrote %v; want %d bytes, no compute (time-slicing), nothing for b", big.WrittenMemoryBytes, big.WrittenComputeMilli, none.Wrote(), share)
	}
	if !strings.Contains(big.CappedNote, "30000MiB exceeds") || !strings.Contains(big.CappedNote, "27306MiB") {
		t.Errorf("capped note %q", big.CappedNote)
	}
	if len(warnings) != 2 || warnings[0] != big.CappedNote || !strings.Contains(warnings[1], "container b asks for no nvidia.com/gpu") {
		t.Errorf("warnings %q, want a capped, then b skipped", warnings)
	}

	for _, tc := range []struct {
		name   string
		codec  Codec
		pod    *corev1.Pod
		reason string
		msg    string
	}{
		{"no policy selects the autoscaler", sharedBackend(t, gpufracv1.BackendNVIDIATimeSlicing, "other", ts), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "no GPUSharingPolicy selects"},
		{"dry run", sharedBackend(t, gpufracv1.BackendNVIDIATimeSlicing, "pool", sharingPolicy("pool", gpufracv1.SharingModeTimeSlicing, 3, false)), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "not applied"},
		{"another mode", sharedBackend(t, gpufracv1.BackendNVIDIAMPS, "pool", ts), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "not MPS sharing"},
		{"no sharing", sharedBackend(t, gpufracv1.BackendNVIDIATimeSlicing, "pool", sharingPolicy("pool", gpufracv1.SharingModeExclusive, 1, true)), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "Exclusive × 1"},
		{"two policies", sharedBackend(t, gpufracv1.BackendNVIDIATimeSlicing, "pool", ts, func() *gpufracv1.GPUSharingPolicy {
			p := sharingPolicy("second", gpufracv1.SharingModeTimeSlicing, 2, true)
			p.Spec.AutoscalerSelector = metav1.LabelSelector{}
			return p
		}()), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "ambiguous"},
		{"no reader", backend(t, Config{}, gpufracv1.BackendNVIDIAMPS).(AutoscalerScoped).ForAutoscaler(&gpufracv1.GPUFractionAutoscaler{}), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "no client"},
		{"unbound", backend(t, Config{}, gpufracv1.BackendNVIDIAMPS), podOf(gpuContainer("a", 1)), UnsafeNoSharingPlan, "no autoscaler"},
		{"two GPUs", codec, podOf(gpuContainer("a", 2)), UnsafeMultiGPU, "asks for 2"},
		{"another config", codec, func() *corev1.Pod {
			p := podOf(gpuContainer("a", 1))
			p.Spec.NodeSelector = map[string]string{gpufracv1.DevicePluginConfigLabel: "mine"}
			return p
		}(), UnsafeNodeSelectorConflict, "mine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.codec.Apply(tc.pod, []*Target{target("a", 0, 1024, 100)})
			wantUnsafe(t, err, tc.reason)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q, want it to say %q", err, tc.msg)
			}
		})
	}
}

// TestDevicePluginRead: a pod without the plan annotations, or with values that do not
// parse, holds no share; containers asking for no GPU or for two are absent.
func TestDevicePluginRead(t *testing.T) {
	codec := backend(t, Config{}, gpufracv1.BackendNVIDIAMPS)
	for _, ann := range []map[string]string{
		nil,
		{AnnotationSharingReplicas: "3"},
		{AnnotationSharingReplicas: "0", AnnotationSharingGPUMemory: "80Gi"},
		{AnnotationSharingReplicas: "x", AnnotationSharingGPUMemory: "80Gi"},
		{AnnotationSharingReplicas: "3", AnnotationSharingGPUMemory: "-1"},
	} {
		pod := podOf(gpuContainer("a", 1))
		pod.Annotations = ann
		if got := codec.Read(pod); len(got) != 0 {
			t.Errorf("annotations %v: read %v, want nothing", ann, got)
		}
	}
	pod := podOf(gpuContainer("a", 1), gpuContainer("b", 2), corev1.Container{Name: "c"})
	pod.Annotations = map[string]string{AnnotationSharingReplicas: "4", AnnotationSharingGPUMemory: "40Gi"}
	got := codec.Read(pod)
	if len(got) != 1 || got["a"] != (Allocation{Memory: 10 << 30, Compute: 250}) {
		t.Errorf("read %v, want only a with 10Gi and 250m", got)
	}
}

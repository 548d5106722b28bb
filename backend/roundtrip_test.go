package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestRoundTrip: for every backend, Read of what Apply wrote returns the targets after
// the backend's documented rounding — memory up to whole MiB (KAI gpu-fraction: up to
// hundredths of the usable memory, read back truncated to bytes), compute up to whole
// percent (hami, mps) or exact (annotations), none where the backend writes none — and
// equals what Apply recorded as written. Containers Apply did not write are absent.
func TestRoundTrip(t *testing.T) {
	const gpu = 15 << 30
	usable := int64(gpu - 512*MiB)
	for _, tc := range []struct {
		name    string
		cfg     Config
		backend gpufracv1.BackendType
		targets []*Target // half a MiB is added to each memory target: it rounds up
		// want per container: memory bytes and compute milli (-1: not written).
		want map[string]Allocation
	}{
		{name: "hami", backend: gpufracv1.BackendHAMi,
			targets: []*Target{target("a", 0, 4096, 351), target("b", 1, 1024, -1)},
			want:    map[string]Allocation{"a": {Memory: 4097 * MiB, Compute: 360}, "b": {Memory: 1025 * MiB, Compute: -1}}},
		{name: "kai gpu-memory", backend: gpufracv1.BackendKAI,
			targets: []*Target{target("a", 0, 4096, 351)},
			want:    map[string]Allocation{"a": {Memory: 4097 * MiB, Compute: -1}}},
		{name: "kai gpu-fraction of the usable memory", backend: gpufracv1.BackendKAI,
			cfg:     Config{GPUMemoryBytes: gpu, KAI: KAIConfig{Mode: KAIModeFraction, ReservedMemoryBytes: 512 * MiB}},
			targets: []*Target{target("a", 0, 5980, -1)},
			want:    map[string]Allocation{"a": {Memory: usable * 41 / 100, Compute: -1}}},
		{name: "kai, second container named", backend: gpufracv1.BackendKAI,
			targets: []*Target{target("b", 1, 2048, -1)},
			want:    map[string]Allocation{"b": {Memory: 2049 * MiB, Compute: -1}}},
		{name: "kai-nvfractions", backend: gpufracv1.BackendKAINVFractions,
			targets: []*Target{target("b", 1, 2048, 500)},
			want:    map[string]Allocation{"b": {Memory: 2049 * MiB, Compute: -1}}},
		{name: "mps", backend: gpufracv1.BackendMPS,
			targets: []*Target{target("a", 0, 4096, 251), target("b", 1, -1, 1000)},
			want:    map[string]Allocation{"a": {Memory: 4097 * MiB, Compute: 260}, "b": {Memory: -1, Compute: 1000}}},
		{name: "annotations", backend: gpufracv1.BackendAnnotations,
			targets: []*Target{target("a", 0, 4096, 251), target("b", 1, 100, -1)},
			want:    map[string]Allocation{"a": {Memory: 4097 * MiB, Compute: 251}, "b": {Memory: 101 * MiB, Compute: -1}}},
		// A memory request below the limit (the observed peak) is placement only: Read
		// returns the limit.
		{name: "annotations, memory request below the limit", backend: gpufracv1.BackendAnnotations,
			cfg:     Config{Annotations: AnnotationsConfig{MemoryRequest: AnnotationsMemoryRequestObservedPeak}},
			targets: []*Target{peakAt(target("a", 0, 4096, 251), 3000), peakAt(target("b", 1, 100, -1), 50)},
			want:    map[string]Allocation{"a": {Memory: 4097 * MiB, Compute: 251}, "b": {Memory: 101 * MiB, Compute: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codec := backend(t, tc.cfg, tc.backend)
			pod := podOf(gpuContainer("a", 1), gpuContainer("b", 1))
			if len(tc.targets) == 1 {
				// KAI gives one container a fraction; the other asks for no GPU.
				other := 1 - tc.targets[0].Index
				pod.Spec.Containers[other] = corev1.Container{Name: pod.Spec.Containers[other].Name}
			}
			for _, tg := range tc.targets {
				if tg.HasMemory {
					tg.MemoryBytes += MiB / 2 // not a whole MiB: rounds up
				}
			}
			if _, err := codec.Apply(pod, tc.targets); err != nil {
				t.Fatal(err)
			}
			got := codec.Read(pod)
			if len(got) != len(tc.want) {
				t.Errorf("read %v, want %v", got, tc.want)
			}
			for _, tg := range tc.targets {
				want, g := tc.want[tg.Container], got[tg.Container]
				if g != want {
					t.Errorf("%s: read %+v, want %+v", tg.Container, g, want)
				}
				written := Allocation{Memory: -1, Compute: tg.WrittenComputeMilli}
				if tg.WrittenMemoryBytes > 0 {
					written.Memory = tg.WrittenMemoryBytes
				}
				if diff := g.Memory - written.Memory; diff < -1 || diff > 1 || g.Compute != written.Compute {
					t.Errorf("%s: read %+v, Apply recorded %+v written", tg.Container, g, written)
				}
			}
		})
	}
}

// peakAt sets t's observed memory peak to peakMiB and returns t.
func peakAt(t *Target, peakMiB int64) *Target {
	t.PeakMemoryBytes = peakMiB * MiB
	return t
}

// TestDRARoundTrip: the dra backend writes a ResourceClaimTemplate whose GpuConfig holds
// the MPS limits (largest target of the containers on the claim, whole MiB and percent
// rounded up), points the pod's claim at it, and Read of the pod returns those limits for
// every container on the claim; the same recommendation reuses the same template, and a
// template of that name with another spec is never reused.
func TestDRARoundTrip(t *testing.T) {
	cl := draClient(t, draSource("gpu-tmpl", "gpu.nvidia.com"))
	cfg := Config{DRA: DRAConfig{Templates: ClientClaimTemplates{Reader: cl, Writer: cl}}}
	codec := backend(t, cfg, gpufracv1.BackendDRA)

	apply := func(targets ...*Target) (*corev1.Pod, []*Target) {
		t.Helper()
		pod := draPod("gpu-tmpl", "a", "b")
		for _, tg := range targets {
			tg.MemoryBytes += MiB / 2 // not a whole MiB: rounds up
		}
		if _, err := codec.Apply(pod, targets); err != nil {
			t.Fatal(err)
		}
		return pod, targets
	}
	pod, targets := apply(target("a", 0, 4096, 251), target("b", 1, 1024, -1))
	name := *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName
	if name == "gpu-tmpl" || !strings.HasPrefix(name, "gpu-tmpl-gpufrac-") {
		t.Fatalf("claim template %q, want a gpufrac template derived from gpu-tmpl", name)
	}
	want := Allocation{Memory: 4097 * MiB, Compute: 260}
	got := codec.Read(pod)
	for _, tg := range targets {
		if got[tg.Container] != want {
			t.Errorf("%s: read %+v, want %+v (the claim's limits)", tg.Container, got[tg.Container], want)
		}
		if tg.WrittenMemoryBytes != want.Memory {
			t.Errorf("%s: recorded %d bytes written, want %d", tg.Container, tg.WrittenMemoryBytes, want.Memory)
		}
	}
	if targets[0].WrittenComputeMilli != 260 || targets[1].WrittenComputeMilli != -1 {
		t.Errorf("compute recorded %d, %d; want 260 for a, none for b (no compute target)", targets[0].WrittenComputeMilli, targets[1].WrittenComputeMilli)
	}
	// The written template: the driver's GpuConfig for the GPU request, as NVIDIA's API reads it.
	var tmpl resourcev1.ResourceClaimTemplate
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &tmpl); err != nil {
		t.Fatal(err)
	}
	cfgs := tmpl.Spec.Spec.Devices.Config
	if len(cfgs) != 1 || cfgs[0].Opaque == nil || cfgs[0].Opaque.Driver != "gpu.nvidia.com" || !slices.Equal(cfgs[0].Requests, []string{"gpu"}) {
		t.Fatalf("config %+v, want one opaque gpu.nvidia.com config for request gpu (the source's old one replaced)", cfgs)
	}
	wantJSON := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":26,"defaultPinnedDeviceMemoryLimit":"4097Mi"}}}`
	if string(cfgs[0].Opaque.Parameters.Raw) != wantJSON {
		t.Errorf("parameters %s\nwant %s", cfgs[0].Opaque.Parameters.Raw, wantJSON)
	}

	// The same recommendation: the same template, reused.
	again, _ := apply(target("a", 0, 4096, 251), target("b", 1, 1024, -1))
	if n := *again.Spec.ResourceClaims[0].ResourceClaimTemplateName; n != name {
		t.Errorf("same recommendation wrote template %s, want %s reused", n, name)
	}
	// Another recommendation: another template; a pod already on a gpufrac template is
	// re-derived from the workload's own.
	other := draPod(name, "a", "b")
	if _, err := codec.Apply(other, []*Target{target("a", 0, 2048, -1)}); err != nil {
		t.Fatal(err)
	}
	if n := *other.Spec.ResourceClaims[0].ResourceClaimTemplateName; n == name || !strings.HasPrefix(n, "gpu-tmpl-gpufrac-") {
		t.Errorf("new recommendation wrote template %s, want another one derived from gpu-tmpl", n)
	}
	if got := codec.Read(other)["a"]; got != (Allocation{Memory: 2048 * MiB, Compute: -1}) {
		t.Errorf("read %+v, want 2048MiB and no compute", got)
	}
}

// Native sidecars (issue 14 kind 4): every backend writes a fraction into a GPU native
// sidecar (spec.initContainers, restartPolicy Always) as into a regular container and
// reads it back; an init container that runs to completion is never read, even with the
// keys a backend writes; the regular container without a GPU is untouched. KAI names the
// sidecar (it is never the first regular container) and removes its whole GPU; dra
// writes the claim the sidecar uses; nvidia-timeslicing and nvidia-mps place it on one
// replica of the plan (the replica's share read back).
func TestRoundTripNativeSidecar(t *testing.T) {
	for _, b := range Types {
		t.Run(string(b), func(t *testing.T) {
			cl := draClient(t, draSource("gpu-tmpl", "gpu.nvidia.com"))
			codec := backend(t, Config{DRA: DRAConfig{Templates: ClientClaimTemplates{Reader: cl, Writer: cl}}}, b)
			mode, onPlan := DevicePluginMode(b)
			if onPlan {
				codec = sharedBackend(t, b, "pool", sharingPolicy("pool", mode, 4, true))
			}
			claim := []corev1.ResourceClaim{{Name: "gpu"}} // dra: the sidecar's and the init container's
			side := gpuContainer("gpu-server", 1)
			always := corev1.ContainerRestartPolicyAlways
			side.RestartPolicy, side.Resources.Claims = &always, claim
			warm := corev1.Container{Name: "warmup", Env: []corev1.EnvVar{{Name: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", Value: "50"}}, Resources: corev1.ResourceRequirements{Claims: claim}}
			pod := podOf(corev1.Container{Name: "app", Image: "img"})
			pod.Namespace = "ns"
			tmpl := "gpu-tmpl"
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
			pod.Spec.InitContainers = []corev1.Container{warm, side}
			pod.Annotations = map[string]string{"gpufrac.io/container.warmup.gpu-compute": "500m"}
			tg := target("gpu-server", 1, 3072, 250)
			tg.Init = true
			if _, err := codec.Apply(pod, []*Target{tg}); err != nil {
				t.Fatal(err)
			}
			if !tg.Wrote() {
				t.Fatal("nothing written for the sidecar")
			}
			got := codec.Read(pod)
			want := Allocation{Memory: 3072 * MiB, Compute: -1}
			if codec.WritesCompute() {
				want.Compute = 250
			}
			if onPlan { // one replica of 4 of an 80Gi GPU (MPS compute 25 %, as the target)
				want.Memory = 20 << 30
			}
			if len(got) != 1 || got["gpu-server"] != want {
				t.Errorf("read %v, want only gpu-server %+v", got, want)
			}
			if app := pod.Spec.Containers[0]; len(app.Resources.Limits) != 0 || len(app.Env) != 0 {
				t.Errorf("regular container changed: %+v", app)
			}
			switch b {
			case gpufracv1.BackendKAI, gpufracv1.BackendKAINVFractions:
				if _, ok := pod.Spec.InitContainers[1].Resources.Limits["nvidia.com/gpu"]; ok || pod.Annotations["gpu-fraction-container-name"] != "gpu-server" {
					t.Errorf("KAI: sidecar limits %v, container name %q", pod.Spec.InitContainers[1].Resources.Limits, pod.Annotations["gpu-fraction-container-name"])
				}
			case gpufracv1.BackendAnnotations:
				if pod.Annotations["gpufrac.io/gpu-memory"] != "3Gi" {
					t.Errorf("pod total %q, want the sidecar's 3Gi", pod.Annotations["gpufrac.io/gpu-memory"])
				}
			}
		})
	}
}

// TestDevicePluginRoundTrip: nvidia-timeslicing and nvidia-mps read back, for every GPU
// container Apply placed on the plan, one replica's share of the plan's GPU — memory
// GPU memory / N in whole MiB down; compute 100 / N percent down for MPS (the device
// plugin's per-client limits), none for time-slicing — whatever the targets were, and
// exactly what Apply recorded as written. Read needs no policy (the pod's annotations
// carry the plan): the unbound codec without a client reads it.
func TestDevicePluginRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		bt   gpufracv1.BackendType
		n    int32
		want Allocation
	}{
		{gpufracv1.BackendNVIDIATimeSlicing, 3, Allocation{Memory: 27306 * MiB, Compute: -1}},
		{gpufracv1.BackendNVIDIAMPS, 3, Allocation{Memory: 27306 * MiB, Compute: 330}},
		{gpufracv1.BackendNVIDIAMPS, 7, Allocation{Memory: 11702 * MiB, Compute: 140}},
	} {
		t.Run(fmt.Sprintf("%s×%d", tc.bt, tc.n), func(t *testing.T) {
			mode, _ := DevicePluginMode(tc.bt)
			codec := sharedBackend(t, tc.bt, "pool", sharingPolicy("pool", mode, tc.n, true))
			pod := podOf(gpuContainer("a", 1), gpuContainer("b", 1))
			targets := []*Target{target("a", 0, 4096, 251), target("b", 1, -1, 1000)}
			if _, err := codec.Apply(pod, targets); err != nil {
				t.Fatal(err)
			}
			got := backend(t, Config{}, tc.bt).Read(pod) // the unbound codec reads
			if len(got) != 2 || got["a"] != tc.want || got["b"] != tc.want {
				t.Errorf("read %v, want %+v for a and b", got, tc.want)
			}
			for _, tg := range targets {
				if tg.WrittenMemoryBytes != tc.want.Memory || tg.WrittenComputeMilli != tc.want.Compute {
					t.Errorf("%s: recorded %d bytes %dm written, want %+v", tg.Container, tg.WrittenMemoryBytes, tg.WrittenComputeMilli, tc.want)
				}
			}
		})
	}
}

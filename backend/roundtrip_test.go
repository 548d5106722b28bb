package backend

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

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

package admission

import (
	"context"
	"strconv"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// Through the webhook: with --gpu-memory 80Gi and --kai-mode gpu-fraction, a pod whose
// nodeSelector pins it to L4s (nvidia.com/gpu.memory 23034 MiB) gets a fraction of the
// L4 that holds its recommendation (before: 10Gi was 0.13, 2994 MiB of the L4), an
// unpinned pod a fraction of 80Gi, and a pinned pod whose recommendation the L4 cannot
// hold as a fraction is admitted unchanged.
func TestMutateKAIFractionOfThePinnedGPU(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pinnedMiB int64
		mem       string
		gpuMiB    int64 // the GPU the fraction is of; 0: pod unchanged
	}{
		{"pinned to L4", 23034, "10Gi", 23034},
		{"pinned to L4, 1Gi", 23034, "1Gi", 23034},
		{"pinned to H200", 143771, "10Gi", 143771},
		{"unpinned", 0, "10Gi", 80 << 10},
		{"pinned to L4, all of it", 23034, "23000Mi", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Config: backend.Config{GPUMemoryBytes: 80 << 30, KAI: backend.KAIConfig{Mode: backend.KAIModeFraction}}}
			m := mutator(t, cfg, autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendKAI), recommendation("web", 80, containerRec("main", tc.mem, "")))
			pod := podOf(gpuContainer("main", 1))
			if tc.pinnedMiB > 0 {
				pod.Spec.NodeSelector = map[string]string{backend.LabelGPUMemory: strconv.FormatInt(tc.pinnedMiB, 10)}
			}
			req := createRequest(t, pod)
			resp := m.Handle(context.Background(), req)
			if !resp.Allowed {
				t.Fatalf("not allowed: %+v", resp)
			}
			if tc.gpuMiB == 0 {
				if len(resp.Patches) != 0 {
					t.Fatalf("patched %+v, want the pod unchanged", resp.Patches)
				}
				return
			}
			got := patched(t, req, resp)
			f, err := strconv.ParseFloat(got.Annotations["gpu-fraction"], 64)
			if err != nil {
				t.Fatalf("gpu-fraction %q: %v", got.Annotations["gpu-fraction"], err)
			}
			want := containerRec("main", tc.mem, "").Target.Memory.Value()
			if gets := int64(f * float64(tc.gpuMiB<<20)); gets < want || gets > want+tc.gpuMiB<<20/100 {
				t.Errorf("gpu-fraction %v of a %d MiB GPU is %d MiB, want %d MiB rounded up to a hundredth", f, tc.gpuMiB, gets>>20, want>>20)
			}
		})
	}
}

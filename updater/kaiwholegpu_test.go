package updater

import (
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// A memory target above what KAI writes as a fraction (its usable memory: the GPU less
// --kai-reserved-memory) comes back as a whole GPU, as a target above one GPU does: pods
// already on a whole GPU are in date (no eviction whose replacement comes back
// unchanged, again after every replacement-unchanged pause), and a pod on a fraction
// grows to the whole GPU.
func TestTargetAboveTheBackendsLargestFraction(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bt      gpufracv1.BackendType
		mode    string
		fracMiB int64 // the first pod's fraction, MiB (0: whole GPU)
		evicted bool
	}{
		{"kai gpu-memory, whole GPU", gpufracv1.BackendKAI, backend.KAIModeMemory, 0, false},
		{"kai gpu-fraction, whole GPU", gpufracv1.BackendKAI, backend.KAIModeFraction, 0, false},
		{"kai-nvfractions, whole GPU", gpufracv1.BackendKAINVFractions, "", 0, false},
		{"kai gpu-memory, on a fraction", gpufracv1.BackendKAI, backend.KAIModeMemory, 12 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, tc.bt, 3, 16)
			f.cfg.Backend.GPUMemoryBytes = 16 << 30
			f.cfg.Backend.KAI.Mode = tc.mode
			f.cfg.Backend.KAI.ReservedMemoryBytes = 1 << 30
			f.cfg.MinPodAge = time.Minute
			f.setTarget("16320Mi", "15616Mi", "16352Mi") // 15.9Gi: above KAI's 15Gi usable; with the 64Mi overhead of kai-nvfractions below, one GPU
			f.cfg.Backend.MemoryOverhead = map[gpufracv1.BackendType]int64{gpufracv1.BackendKAINVFractions: 64 << 20}
			for _, p := range f.pods {
				delete(p.Annotations, gpufracv1.AnnotationApplied)
			}
			if tc.fracMiB > 0 {
				f.pods[0].Annotations["gpu-memory"] = "12288"
			}
			f.build()
			f.run()
			if got := !f.livePods()["web-abc-0"]; got != tc.evicted {
				st := f.status()
				t.Fatalf("evicted %v, want %v (blocked %s: %s; updates %+v)", got, tc.evicted, st.BlockedReason, st.BlockedMessage, st.Updates)
			}
			if n := len(f.livePods()); n < 2 {
				t.Fatalf("pods %v", f.livePods())
			}
		})
	}
}

// A pod pinned by its nodeSelector to GPUs smaller than --gpu-memory (GPU feature
// discovery's nvidia.com/gpu.memory) gets a KAI fraction of that GPU from the webhook
// (backend.Config.ForPod), and a target that needs all of that GPU comes back as a whole
// GPU: the updater does not replace its whole-GPU pods for it (their replacements would
// come back unchanged, pause after pause), where the same target is a fraction on an
// unpinned pod, on a pod pinned to a GPU as large as --gpu-memory, or as gpu-memory MiB.
func TestTargetAboveThePinnedGPUsLargestFraction(t *testing.T) {
	const l4, h100 = "23034", "81559" // MiB
	for _, tc := range []struct {
		name    string
		mode    string
		pinned  string // nodeSelector nvidia.com/gpu.memory ("": none)
		target  string
		evicted bool
	}{
		{"gpu-fraction, L4, all of it", backend.KAIModeFraction, l4, "22900Mi", false},
		{"gpu-fraction, L4, 99 hundredths", backend.KAIModeFraction, l4, "22700Mi", true},
		{"gpu-fraction, H100, the same target", backend.KAIModeFraction, h100, "22900Mi", true},
		{"gpu-fraction, unpinned", backend.KAIModeFraction, "", "22900Mi", true},
		{"gpu-memory, L4, below its MiB", backend.KAIModeMemory, l4, "22900Mi", true},
		{"gpu-memory, L4, all of it", backend.KAIModeMemory, l4, "23034Mi", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendKAI, 3, 80)
			f.cfg.Backend.GPUMemoryBytes = 80 << 30
			f.cfg.Backend.KAI.Mode = tc.mode
			f.cfg.MinPodAge = time.Minute
			f.setTarget(tc.target, tc.target, tc.target)
			for _, p := range f.pods {
				delete(p.Annotations, gpufracv1.AnnotationApplied)
				if tc.pinned != "" {
					p.Spec.NodeSelector = map[string]string{backend.LabelGPUMemory: tc.pinned}
				}
			}
			f.build()
			f.run()
			if got := !f.livePods()["web-abc-0"]; got != tc.evicted {
				st := f.status()
				t.Fatalf("evicted %v, want %v (blocked %s: %s; updates %+v)", got, tc.evicted, st.BlockedReason, st.BlockedMessage, st.Updates)
			}
		})
	}
}

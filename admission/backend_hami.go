package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// hamiBackend writes HAMi's per-container extended resources next to nvidia.com/gpu:
// nvidia.com/gpumem (per-GPU memory, MiB, rounded up) and nvidia.com/gpucores (per-GPU
// compute, percent 1–100, rounded up), into both limits and requests. HAMi reads them
// only as resources, never as annotations. HAMi-core enforces the memory limit, so the
// configured overhead is already included in Target.MemoryBytes. A container that asks
// for no nvidia.com/gpu is left alone with a warning (HAMi would not give it a GPU);
// one that asks for more than one GPU makes the pod unsafe (the limits are per GPU while
// the recommendation is per container).
type hamiBackend struct{ cfg Config }

// Type implements Backend.
func (b *hamiBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendHAMi }

// Apply implements Backend.
func (b *hamiBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	var warnings []string
	for _, t := range targets {
		c := &pod.Spec.Containers[t.Index]
		switch n := GPUCount(c, b.cfg.GPUResource); {
		case n == 0:
			warnings = append(warnings, fmt.Sprintf("gpufrac: container %s asks for no %s; hami fraction not written for it", c.Name, b.cfg.GPUResource))
			continue
		case n > 1:
			return nil, unsafe(UnsafeMultiGPU, "container %s asks for %d %s; gpufrac writes fractions of one GPU only", c.Name, n, b.cfg.GPUResource)
		}
		if t.HasMemory {
			mib := ceilMiB(t.MemoryBytes)
			setResource(c, b.cfg.HAMi.MemoryResource, mib)
			removeResource(c, b.cfg.HAMi.MemoryPercentageResource)
			t.wroteMemory(mib * MiB)
		}
		if t.HasCompute {
			p := ceilPercent(t.ComputeMilli)
			setResource(c, b.cfg.HAMi.CoresResource, p)
			t.wroteCompute(p * 10)
		}
	}
	return warnings, nil
}

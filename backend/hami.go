package backend

import (
	"flag"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
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

// Type implements Codec.
func (b *hamiBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendHAMi }

// Apply implements Codec.
func (b *hamiBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	g := perGPUContainers{res: b.cfg.GPUResource, skipped: "hami fraction not written for it", multiGPU: oneGPUOnly}
	return g.each(pod, targets, func(t *Target, c *corev1.Container) string {
		if t.HasMemory {
			mib := ceilMiB(t.MemoryBytes)
			SetResource(c, b.cfg.HAMi.MemoryResource, mib)
			RemoveResource(c, b.cfg.HAMi.MemoryPercentageResource)
			t.wroteMemory(mib * MiB)
		}
		if t.HasCompute {
			p := ceilPercent(t.ComputeMilli)
			SetResource(c, b.cfg.HAMi.CoresResource, p)
			t.wroteCompute(p * 10)
		}
		return ""
	})
}

// WritesCompute implements Codec: nvidia.com/gpucores.
func (b *hamiBackend) WritesCompute() bool { return true }

// Read implements Codec: the limits MemoryResource (MiB), else MemoryPercentageResource
// (percent 1–100 of the GPU's memory, as HAMi reads it when MemoryResource is absent:
// of GPUMemoryBytes or the GPU the pod is pinned to, Config.ForPod, the smallest it may
// land on), and CoresResource (percent).
func (b *hamiBackend) Read(pod *corev1.Pod) map[string]Allocation {
	return readEach(pod, func(pc workload.PodContainer, a *Allocation) {
		c := pc.Container
		if q, ok := c.Resources.Limits[b.cfg.HAMi.MemoryResource]; ok {
			a.Memory = q.Value() * MiB
		} else if q, ok := c.Resources.Limits[b.cfg.HAMi.MemoryPercentageResource]; ok && q.Value() >= 1 && q.Value() <= 100 {
			a.Memory = b.cfg.ForPod(pod).GPUMemoryBytes * q.Value() / 100
		}
		if q, ok := c.Resources.Limits[b.cfg.HAMi.CoresResource]; ok {
			a.Compute = q.Value() * 10
		}
	})
}

// HAMiConfig names the resources of the hami backend (HAMi lets clusters rename them).
type HAMiConfig struct {
	// MemoryResource is the per-GPU memory limit, MiB. Default nvidia.com/gpumem.
	MemoryResource corev1.ResourceName
	// CoresResource is the per-GPU compute limit, percent. Default nvidia.com/gpucores.
	CoresResource corev1.ResourceName
	// MemoryPercentageResource is HAMi's alternative memory limit in percent; it is
	// removed when MemoryResource is written. Default nvidia.com/gpumem-percentage.
	MemoryPercentageResource corev1.ResourceName
}

func (h *HAMiConfig) withDefaults() {
	defaultResource(&h.MemoryResource, "nvidia.com/gpumem")
	defaultResource(&h.CoresResource, "nvidia.com/gpucores")
	defaultResource(&h.MemoryPercentageResource, "nvidia.com/gpumem-percentage")
}

func (h *HAMiConfig) addFlags(fs *flag.FlagSet, d HAMiConfig) {
	resourceFlag(fs, &h.MemoryResource, "hami-memory-resource", d.MemoryResource, "HAMi per-GPU memory limit resource, MiB")
	resourceFlag(fs, &h.CoresResource, "hami-cores-resource", d.CoresResource, "HAMi per-GPU compute limit resource, percent")
	resourceFlag(fs, &h.MemoryPercentageResource, "hami-memory-percentage-resource", d.MemoryPercentageResource, "HAMi percent memory resource, removed when memory is written")
}

package admission

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// mpsBackend writes CUDA MPS client limits as environment variables of each GPU
// container: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (compute, percent 1–100, rounded up) and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<device>=<MiB>M", rounded up). Both act per client
// process, when the process starts, and can only tighten what the MPS control daemon
// already sets as defaults (for example the equal per-replica share the NVIDIA device
// plugin gives with MPS sharing). So when the share is known (MPSConfig.
// ReplicaMemoryBytes) no memory limit above it is written: it is capped with a warning
// to the pod's creator and a MemoryCapped event on the autoscaler (Target.CappedNote).
// An entry of the same name (valueFrom included) is replaced in place. A container with
// a recommendation but no GPU resource is skipped with a warning; one with more than one
// GPU makes the pod unsafe.
type mpsBackend struct{ cfg Config }

// Type implements Backend.
func (b *mpsBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendMPS }

// Apply implements Backend.
func (b *mpsBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	var warnings []string
	shareMiB := b.cfg.MPS.ReplicaMemoryBytes / MiB
	for _, t := range targets {
		c := &pod.Spec.Containers[t.Index]
		if !isGPUContainer(c, b.cfg.GPUResourcePrefix) {
			warnings = append(warnings, fmt.Sprintf("gpufrac: container %s asks for no %s* resource; mps limits not written for it", c.Name, b.cfg.GPUResourcePrefix))
			continue
		}
		if n := GPUCount(c, b.cfg.GPUResource); n > 1 {
			return nil, unsafe(UnsafeMultiGPU, "container %s asks for %d %s; gpufrac writes fractions of one GPU only", c.Name, n, b.cfg.GPUResource)
		}
		if t.HasCompute {
			p := ceilPercent(t.ComputeMilli)
			setEnv(c, b.cfg.MPS.ThreadPercentageEnv, strconv.FormatInt(p, 10))
			t.wroteCompute(p * 10)
		}
		if t.HasMemory {
			mib := ceilMiB(t.MemoryBytes)
			if shareMiB > 0 && mib > shareMiB {
				t.CappedNote = fmt.Sprintf("gpufrac: container %s: recommended %dMiB exceeds the MPS replica share %dMiB; limit capped to the share", c.Name, mib, shareMiB)
				warnings = append(warnings, t.CappedNote)
				mib = shareMiB
			}
			setEnv(c, b.cfg.MPS.PinnedMemoryEnv, fmt.Sprintf("%s=%dM", b.cfg.MPS.Device, mib))
			t.wroteMemory(mib * MiB)
		}
	}
	return warnings, nil
}

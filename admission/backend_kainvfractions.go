package admission

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// nvFractionsBackend writes KAI's NvFractions per-container annotations
// nvidia.com/container.<container>.gpu-memory.request and .limit as MiB quantities
// ("4096Mi", rounded up). The request is the target plus overheads; the limit is, by
// default, the recommendation's upper bound plus overheads (at least the request, at
// most one GPU), or the request itself with --nvfractions-limit=target. Like the kai
// backend it needs the KAI scheduler, removes the container's nvidia.com/gpu, and serves
// one container per pod; stale NvFractions keys of other containers and the legacy
// gpu-memory/gpu-fraction annotations are removed so KAI sees exactly one request.
// Compute is not written (NvFractions compute sharing is a scheduler setting).
type nvFractionsBackend struct{ cfg Config }

// Type implements Backend.
func (b *nvFractionsBackend) Type() gpufracv1.BackendType {
	return gpufracv1.BackendKAINVFractions
}

const (
	nvRequestSuffix = ".gpu-memory.request"
	nvLimitSuffix   = ".gpu-memory.limit"
)

// Apply implements Backend.
func (b *nvFractionsBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	if len(targets) == 1 {
		// Check the keys before prepareKAI changes anything visible in errors.
		for _, s := range []string{nvRequestSuffix, nvLimitSuffix} {
			if err := checkAnnotationKey(b.cfg.NVFractions.Prefix + targets[0].Container + s); err != nil {
				return nil, err
			}
		}
	}
	t, err := prepareKAI(pod, targets, b.cfg, string(gpufracv1.BackendKAINVFractions))
	if err != nil {
		return nil, err
	}
	gpuMiB := b.cfg.GPUMemoryBytes / MiB
	req := ceilMiB(t.MemoryBytes)
	if req >= gpuMiB {
		return nil, unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB)", req, t.Container, gpuMiB)
	}
	limit := req
	if b.cfg.NVFractions.Limit == NVFractionsLimitUpperBound && t.UpperMemoryBytes > t.MemoryBytes {
		limit = min(ceilMiB(t.UpperMemoryBytes), gpuMiB)
	}
	prefix := b.cfg.NVFractions.Prefix
	for k := range pod.Annotations {
		if rest, ok := strings.CutPrefix(k, prefix); ok && (strings.HasSuffix(rest, nvRequestSuffix) || strings.HasSuffix(rest, nvLimitSuffix)) {
			delete(pod.Annotations, k)
		}
	}
	delete(pod.Annotations, b.cfg.KAI.MemoryAnnotation)
	delete(pod.Annotations, b.cfg.KAI.FractionAnnotation)
	setAnnotation(pod, prefix+t.Container+nvRequestSuffix, mibQuantity(req).String())
	setAnnotation(pod, prefix+t.Container+nvLimitSuffix, mibQuantity(limit).String())
	t.wroteMemory(req * MiB)
	return nil, nil
}

package backend

import (
	"flag"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
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

// Type implements Codec.
func (b *nvFractionsBackend) Type() gpufracv1.BackendType {
	return gpufracv1.BackendKAINVFractions
}

const (
	nvRequestSuffix = ".gpu-memory.request"
	nvLimitSuffix   = ".gpu-memory.limit"
)

// Apply implements Codec.
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
		return nil, Unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB)", req, t.Container, gpuMiB)
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
	SetAnnotation(pod, prefix+t.Container+nvRequestSuffix, mibQuantity(req).String())
	SetAnnotation(pod, prefix+t.Container+nvLimitSuffix, mibQuantity(limit).String())
	t.wroteMemory(req * MiB)
	return nil, nil
}

// WritesCompute implements Codec: NvFractions compute sharing is a scheduler setting.
func (b *nvFractionsBackend) WritesCompute() bool { return false }

// Read implements Codec: each container's gpu-memory.request key (the limit is not what
// the container is sized to).
func (b *nvFractionsBackend) Read(pod *corev1.Pod) map[string]Allocation {
	return readEach(pod, func(pc workload.PodContainer, a *Allocation) {
		c := pc.Container
		if q, err := resource.ParseQuantity(pod.Annotations[b.cfg.NVFractions.Prefix+c.Name+nvRequestSuffix]); err == nil {
			a.Memory = q.Value()
		}
	})
}

// NVFractions limit sources.
const (
	// NVFractionsLimitUpperBound writes the recommendation's upper bound (plus overhead,
	// at least the request, at most one GPU) as the limit.
	NVFractionsLimitUpperBound = "upper-bound"
	// NVFractionsLimitTarget writes the request as the limit.
	NVFractionsLimitTarget = "target"
)

// NVFractionsConfig configures the kai-nvfractions backend.
type NVFractionsConfig struct {
	// Prefix starts the per-container keys <Prefix><container>.gpu-memory.request and
	// .limit. Default nvidia.com/container.
	Prefix string
	// Limit is NVFractionsLimitUpperBound (default) or NVFractionsLimitTarget.
	Limit string
}

func (n *NVFractionsConfig) withDefaults() {
	defaultString(&n.Prefix, "nvidia.com/container.")
	defaultString(&n.Limit, NVFractionsLimitUpperBound)
}

func (n NVFractionsConfig) validate() []error {
	if n.Limit != NVFractionsLimitUpperBound && n.Limit != NVFractionsLimitTarget {
		return []error{fmt.Errorf("nvfractions-limit %q: want %s or %s", n.Limit, NVFractionsLimitUpperBound, NVFractionsLimitTarget)}
	}
	return nil
}

func (n *NVFractionsConfig) addFlags(fs *flag.FlagSet, d NVFractionsConfig) {
	fs.StringVar(&n.Prefix, "nvfractions-prefix", d.Prefix, "Prefix of the kai-nvfractions keys <prefix><container>.gpu-memory.request/.limit.")
	fs.StringVar(&n.Limit, "nvfractions-limit", d.Limit, "kai-nvfractions limit: upper-bound (recommendation upper bound, capped to one GPU) or target (same as the request).")
}

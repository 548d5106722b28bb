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
// ("4096Mi", rounded up), as NVFractionsConfig.RequestLimit computes them: by default
// the request is the target plus overheads and the limit the recommendation's upper
// bound plus overheads (at least the target, at most one GPU). Like the kai
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
	if m := ceilMiB(t.MemoryBytes); m >= gpuMiB {
		return nil, Unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB)", m, t.Container, gpuMiB)
	}
	req, limit := b.cfg.NVFractions.RequestLimit(t.MemoryBytes, t.UpperMemoryBytes, t.PeakMemoryBytes, b.cfg.GPUMemoryBytes)
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
		if v, ok := NVFractionsRequest(pod, b.cfg, pc.Container.Name); ok {
			a.Memory = v
		}
	})
}

// NVFractionsRequest returns the memory request, bytes, of pod's container named
// container from its kai-nvfractions gpu-memory.request annotation (cfg.NVFractions.Prefix),
// and false when the annotation is absent or does not parse.
func NVFractionsRequest(pod *corev1.Pod, cfg Config, container string) (int64, bool) {
	q, err := resource.ParseQuantity(pod.Annotations[cfg.NVFractions.Prefix+container+nvRequestSuffix])
	return q.Value(), err == nil
}

// RequestLimit returns the request and the limit, MiB (rounded up), that the
// kai-nvfractions backend writes for memoryBytes (the target plus overheads),
// upperBytes (the upper bound plus overheads; 0: none) and peakBytes (the observed
// memory peak plus overheads; 0: unknown) on a GPU of gpuBytes. KAI places a pod by its
// request and lets it use memory up to its limit while the GPU has room (Run:ai's
// dynamic GPU fractions: the request is guaranteed, the rest up to the limit is not).
//
//   - Request NVFractionsRequestTarget: the target. NVFractionsRequestObservedPeak: the
//     observed peak when known and below the target, else the target; the headroom then
//     sits between request and limit instead of being reserved.
//   - Limit NVFractionsLimitUpperBound: the larger of the upper bound and the target (so
//     never below what a hard-limit backend would give the pod), at most one GPU.
//     NVFractionsLimitTarget: the target, at most one GPU.
//
// The limit is never below the request. The simulator calls it, so that a simulated pod
// gets what this backend writes.
func (n NVFractionsConfig) RequestLimit(memoryBytes, upperBytes, peakBytes, gpuBytes int64) (requestMiB, limitMiB int64) {
	gpuMiB := max(gpuBytes/MiB, 1)
	target := min(ceilMiB(memoryBytes), gpuMiB)
	requestMiB, limitMiB = target, target
	if n.Request == NVFractionsRequestObservedPeak {
		requestMiB = ObservedPeakRequestMiB(memoryBytes, peakBytes, gpuBytes)
	}
	if n.Limit != NVFractionsLimitTarget && upperBytes > memoryBytes {
		limitMiB = min(ceilMiB(upperBytes), gpuMiB)
	}
	return requestMiB, max(limitMiB, requestMiB)
}

// ObservedPeakRequestMiB is the memory request, MiB (rounded up), of a backend that
// packs pods by a request and enforces the target as a limit above it (kai-nvfractions
// with NVFractionsRequestObservedPeak, annotations with AnnotationsMemoryRequestObservedPeak):
// peakBytes (the recommendation's observed peak plus the memory overheads,
// Target.PeakMemoryBytes) when known (positive) and below memoryBytes (the target plus
// overheads), else memoryBytes; at most gpuBytes (one GPU). The headroom between the
// two is room to burst into, not reserved.
func ObservedPeakRequestMiB(memoryBytes, peakBytes, gpuBytes int64) int64 {
	target := min(ceilMiB(memoryBytes), max(gpuBytes/MiB, 1))
	if peakBytes > 0 {
		return min(ceilMiB(peakBytes), target)
	}
	return target
}

// NVFractions request sources.
const (
	// NVFractionsRequestTarget writes the target as the request (the default).
	NVFractionsRequestTarget = "target"
	// NVFractionsRequestObservedPeak writes the recommendation's observed memory peak
	// (status observedPeakMemory, plus overhead) as the request when it is below the
	// target: pods are packed by what they were seen to use, and the memory headroom is
	// burst room up to the limit rather than reserved.
	NVFractionsRequestObservedPeak = "observed-peak"
)

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
	// Request is NVFractionsRequestTarget (default) or NVFractionsRequestObservedPeak.
	Request string
}

func (n *NVFractionsConfig) withDefaults() {
	defaultString(&n.Prefix, "nvidia.com/container.")
	defaultString(&n.Limit, NVFractionsLimitUpperBound)
	defaultString(&n.Request, NVFractionsRequestTarget)
}

func (n NVFractionsConfig) validate() []error {
	if n.Limit != NVFractionsLimitUpperBound && n.Limit != NVFractionsLimitTarget {
		return []error{fmt.Errorf("--nvfractions-limit %q: want %s or %s", n.Limit, NVFractionsLimitUpperBound, NVFractionsLimitTarget)}
	}
	if n.Request != NVFractionsRequestTarget && n.Request != NVFractionsRequestObservedPeak {
		return []error{fmt.Errorf("--nvfractions-request %q: want %s or %s", n.Request, NVFractionsRequestTarget, NVFractionsRequestObservedPeak)}
	}
	if n.Request == NVFractionsRequestObservedPeak && n.Limit == NVFractionsLimitTarget {
		return []error{fmt.Errorf("--nvfractions-request %s needs --nvfractions-limit %s: the headroom the request leaves out must be in the limit", NVFractionsRequestObservedPeak, NVFractionsLimitUpperBound)}
	}
	return nil
}

func (n *NVFractionsConfig) addFlags(fs *flag.FlagSet, d NVFractionsConfig) {
	fs.StringVar(&n.Prefix, "nvfractions-prefix", d.Prefix, "Prefix of the kai-nvfractions keys <prefix><container>.gpu-memory.request/.limit.")
	fs.StringVar(&n.Limit, "nvfractions-limit", d.Limit, "kai-nvfractions limit: upper-bound (recommendation upper bound, at least the target, capped to one GPU) or target.")
	fs.StringVar(&n.Request, "nvfractions-request", d.Request, "kai-nvfractions request: target, or observed-peak (the recommendation's observed memory peak when below the target; needs --nvfractions-limit=upper-bound).")
}

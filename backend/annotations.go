package backend

import (
	"flag"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// annotationsBackend writes neutral gpufrac.io/* annotations for clusters that enforce
// fractions themselves: the pod's totals gpufrac.io/gpu-memory (MiB quantity, "4096Mi",
// rounded up per container) and gpufrac.io/gpu-compute (milli share of one GPU, "350m"),
// and per container gpufrac.io/container.<container>.gpu-memory and .gpu-compute; for
// a time-sliced container, which holds no compute limit, its compute request instead
// (gpufrac.io/gpu-compute-request and .gpu-compute-request, placement only). With
// AnnotationsConfig.MemoryRequest observed-peak (opt-in) it also writes a memory
// request for placement (gpufrac.io/gpu-memory-request and .gpu-memory-request,
// ObservedPeakRequestMiB): a scheduler packs by it and the memory value stays the limit.
// A per-container key that would be invalid (container name too long) is not written,
// with a warning. A pod total counts the containers not written too, by the
// per-container keys they carry (a template's or a user's own). A container whose
// GPU-prefixed resources are all 0 (its GPU turned off) is not written, with a warning.
// Nothing else in the pod changes.
type annotationsBackend struct{ cfg Config }

// Type implements Codec.
func (b *annotationsBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendAnnotations }

// Apply implements Codec.
func (b *annotationsBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	ac := b.cfg.Annotations
	for _, k := range []string{ac.MemoryKey, ac.ComputeKey} {
		if err := checkAnnotationKey(k); err != nil {
			return nil, err
		}
	}
	var warnings []string
	var memMiB, memRequestMiB, milli, request int64
	var anyMem, anyCompute bool
	writeRequest := ac.MemoryRequest == AnnotationsMemoryRequestObservedPeak
	for _, t := range targets {
		if c := t.container(pod); IsGPUContainer(c, b.cfg.GPUResourcePrefix) && !AsksGPU(c, b.cfg.GPUResourcePrefix) {
			// Its GPU turned off (nvidia.com/gpu: 0, as a chart does) while the
			// recommendation still names it: no fraction of a GPU it does not ask for, in
			// its keys or the pod totals, as the other backends (a container asking for
			// nothing at all may get its GPU by the annotations alone, or a claim).
			warnings = append(warnings, fmt.Sprintf("gpufrac: container %s asks for 0 of every %s* resource it names; annotations not written for it", c.Name, b.cfg.GPUResourcePrefix))
			continue
		}
		memKey := ac.ContainerPrefix + t.Container + gpufracv1.AnnotationContainerMemorySuffix
		cpuKey := ac.ContainerPrefix + t.Container + gpufracv1.AnnotationContainerComputeSuffix
		perContainer := checkAnnotationKey(memKey) == nil && checkAnnotationKey(cpuKey) == nil
		if !perContainer {
			warnings = append(warnings, fmt.Sprintf("gpufrac: container name %s is too long for per-container annotations; only pod totals written", t.Container))
		}
		if t.HasMemory {
			mib := ceilMiB(t.MemoryBytes)
			memMiB += mib
			anyMem = true
			if perContainer {
				SetAnnotation(pod, memKey, mibQuantity(mib).String())
			}
			if writeRequest {
				req := ObservedPeakRequestMiB(t.MemoryBytes, t.PeakMemoryBytes, b.cfg.GPUMemoryBytes)
				memRequestMiB += req
				if req < mib {
					t.WrittenMemoryRequestBytes = req * MiB
				}
				if reqKey := ac.ContainerPrefix + t.Container + gpufracv1.AnnotationContainerMemoryRequestSuffix; checkAnnotationKey(reqKey) == nil {
					SetAnnotation(pod, reqKey, mibQuantity(req).String())
				}
			}
			t.wroteMemory(mib * MiB)
		}
		if t.HasCompute {
			milli += t.ComputeMilli
			anyCompute = true
			if perContainer {
				SetAnnotation(pod, cpuKey, MilliQuantity(t.ComputeMilli).String())
			}
			t.wroteCompute(t.ComputeMilli)
		} else if t.ComputeRequestMilli > 0 {
			request += t.ComputeRequestMilli
			t.WrittenComputeRequestMilli = t.ComputeRequestMilli
			if reqKey := ac.ContainerPrefix + t.Container + gpufracv1.AnnotationContainerComputeRequestSuffix; checkAnnotationKey(reqKey) == nil {
				SetAnnotation(pod, reqKey, MilliQuantity(t.ComputeRequestMilli).String())
			}
		}
	}
	// The pod totals count every container: one the webhook does not write (no
	// recommendation, or not for this resource) keeps the per-container key the pod
	// carries (its template's, a user's own), and the total holds it too.
	written := map[string]*Target{}
	for _, t := range targets {
		written[t.Container] = t
	}
	for _, pc := range containers(pod) {
		t := written[pc.Container.Name]
		prefix := ac.ContainerPrefix + pc.Container.Name
		carried := func(suffix string, milli bool) (int64, bool) {
			v, ok := pod.Annotations[prefix+suffix]
			if !ok {
				return 0, false
			}
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() < 0 {
				warnings = append(warnings, fmt.Sprintf("gpufrac: %s%s %q is no quantity; the pod total leaves it out", prefix, suffix, v))
				return 0, false
			}
			if milli {
				return q.MilliValue(), true
			}
			return ceilMiB(q.Value()), true
		}
		if anyMem && (t == nil || !t.HasMemory) {
			mib, ok := carried(gpufracv1.AnnotationContainerMemorySuffix, false)
			memMiB += mib
			if writeRequest {
				if req, rok := carried(gpufracv1.AnnotationContainerMemoryRequestSuffix, false); rok {
					memRequestMiB += req
				} else if ok {
					memRequestMiB += mib // placed by its limit
				}
			}
		}
		if anyCompute && (t == nil || !t.HasCompute) {
			m, _ := carried(gpufracv1.AnnotationContainerComputeSuffix, true)
			milli += m
		}
		if request > 0 && (t == nil || t.HasCompute || t.ComputeRequestMilli <= 0) {
			m, _ := carried(gpufracv1.AnnotationContainerComputeRequestSuffix, true)
			request += m
		}
	}
	if request > 0 {
		SetAnnotation(pod, gpufracv1.AnnotationGPUComputeRequest, MilliQuantity(request).String())
	}
	if anyMem {
		SetAnnotation(pod, ac.MemoryKey, mibQuantity(memMiB).String())
		if writeRequest {
			SetAnnotation(pod, gpufracv1.AnnotationGPUMemoryRequest, mibQuantity(memRequestMiB).String())
		}
	}
	if anyCompute {
		SetAnnotation(pod, ac.ComputeKey, MilliQuantity(milli).String())
	}
	return warnings, nil
}

// WritesCompute implements Codec: the per-container gpu-compute key.
func (b *annotationsBackend) WritesCompute() bool { return true }

// Read implements Codec: the per-container memory and compute keys (the pod totals are
// not per container). The memory is the limit, what the container is sized to; the
// memory request, placement only, is not read.
func (b *annotationsBackend) Read(pod *corev1.Pod) map[string]Allocation {
	return readEach(pod, func(pc workload.PodContainer, a *Allocation) {
		c := pc.Container
		prefix := b.cfg.Annotations.ContainerPrefix + c.Name
		if q, err := resource.ParseQuantity(pod.Annotations[prefix+gpufracv1.AnnotationContainerMemorySuffix]); err == nil {
			a.Memory = q.Value()
		}
		if q, err := resource.ParseQuantity(pod.Annotations[prefix+gpufracv1.AnnotationContainerComputeSuffix]); err == nil {
			a.Compute = q.MilliValue()
		}
	})
}

// AnnotationsConfig names the keys of the neutral annotations backend.
type AnnotationsConfig struct {
	// MemoryKey is the pod's total memory. Default gpufrac.io/gpu-memory.
	MemoryKey string
	// ComputeKey is the pod's total compute. Default gpufrac.io/gpu-compute.
	ComputeKey string
	// ContainerPrefix starts the per-container keys. Default gpufrac.io/container.
	ContainerPrefix string
	// MemoryRequest is AnnotationsMemoryRequestObservedPeak (default) or
	// AnnotationsMemoryRequestNone.
	MemoryRequest string
}

// Memory request sources of the annotations backend (--annotation-memory-request).
const (
	// AnnotationsMemoryRequestObservedPeak writes a placement-only memory request,
	// gpufrac.io/gpu-memory-request (pod total) and per container .gpu-memory-request:
	// the recommendation's observed peak (plus overheads) when below the target, else the
	// target (ObservedPeakRequestMiB). A scheduler that packs by it leaves the memory
	// headroom as burst room up to the limit, gpufrac.io/gpu-memory, instead of
	// reserving it. The default: on GenTD26 after 12 h it holds 1.17× the
	// clairvoyant-memory bound at 80 GiB where placing by the limit holds 1.62×, with
	// no pod or GPU over its memory after warm-up; the compute contention of the
	// tenants it adds per GPU is held by the tenant reserve learnt from contention
	// (estimate.Config.TenantReserve; docs/benchmarks/savings.md, "Memory request on
	// the annotations backend" and "Contention as evidence: the closed loop").
	AnnotationsMemoryRequestObservedPeak = "observed-peak"
	// AnnotationsMemoryRequestNone writes no memory request: pods are placed by the
	// limit, which a scheduler then reserves whole.
	AnnotationsMemoryRequestNone = "none"
)

func (a *AnnotationsConfig) withDefaults() {
	defaultString(&a.MemoryKey, gpufracv1.AnnotationGPUMemory)
	defaultString(&a.ComputeKey, gpufracv1.AnnotationGPUCompute)
	defaultString(&a.ContainerPrefix, gpufracv1.AnnotationContainerPrefix)
	defaultString(&a.MemoryRequest, AnnotationsMemoryRequestObservedPeak)
}

func (a AnnotationsConfig) validate() []error {
	if a.MemoryRequest != AnnotationsMemoryRequestObservedPeak && a.MemoryRequest != AnnotationsMemoryRequestNone {
		return []error{fmt.Errorf("--annotation-memory-request %q: want %s or %s", a.MemoryRequest, AnnotationsMemoryRequestObservedPeak, AnnotationsMemoryRequestNone)}
	}
	return nil
}

func (a *AnnotationsConfig) addFlags(fs *flag.FlagSet, d AnnotationsConfig) {
	fs.StringVar(&a.MemoryKey, "annotation-memory-key", d.MemoryKey, "Pod total memory key of the annotations backend.")
	fs.StringVar(&a.ComputeKey, "annotation-compute-key", d.ComputeKey, "Pod total compute key of the annotations backend.")
	fs.StringVar(&a.ContainerPrefix, "annotation-container-prefix", d.ContainerPrefix, "Prefix of the per-container keys of the annotations backend.")
	fs.StringVar(&a.MemoryRequest, "annotation-memory-request", d.MemoryRequest, "Memory request of the annotations backend, placement only (gpufrac.io/gpu-memory-request): observed-peak (the default: the recommendation's observed memory peak when below the target, else the target; gpufrac.io/gpu-memory stays the limit) or none (not written; pods are placed by gpufrac.io/gpu-memory).")
}

// WrittenKeys returns the annotation keys the annotations backend wrote into a pod by
// its record rec (gpufrac.io/applied): per container the record lists, the memory and
// memory request keys where it holds memory, the compute key where it holds a compute
// partition and the compute request key where it holds a request, and each pod total
// of a resource some container holds. A change in place (updater.MutatorInPlacer)
// takes them out before it writes the pod afresh, so a key the recommendation no
// longer writes goes and no pod total counts an old one; keys of a container the
// record does not list, or of a resource it does not hold (a user's own), are never
// returned. Nil unless rec is the annotations backend's.
func (a AnnotationsConfig) WrittenKeys(rec *gpufracv1.AppliedRecord) []string {
	if rec == nil || rec.Backend != gpufracv1.BackendAnnotations {
		return nil
	}
	a.withDefaults()
	var out []string
	for _, k := range []struct {
		has    func(gpufracv1.AppliedContainer) bool
		totals []string
		suffix []string
	}{
		{func(c gpufracv1.AppliedContainer) bool { return c.WrittenMemory != nil || c.Memory != nil },
			[]string{a.MemoryKey, gpufracv1.AnnotationGPUMemoryRequest},
			[]string{gpufracv1.AnnotationContainerMemorySuffix, gpufracv1.AnnotationContainerMemoryRequestSuffix}},
		{func(c gpufracv1.AppliedContainer) bool { return c.WrittenCompute != nil || c.Compute != nil },
			[]string{a.ComputeKey}, []string{gpufracv1.AnnotationContainerComputeSuffix}},
		{func(c gpufracv1.AppliedContainer) bool { return c.WrittenComputeRequest != nil },
			[]string{gpufracv1.AnnotationGPUComputeRequest}, []string{gpufracv1.AnnotationContainerComputeRequestSuffix}},
	} {
		held := false
		for _, c := range rec.Containers {
			if k.has(c) {
				held = true
				for _, s := range k.suffix {
					out = append(out, a.ContainerPrefix+c.Name+s)
				}
			}
		}
		if held {
			out = append(out, k.totals...)
		}
	}
	return out
}

package updater

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// AllocationSource says where a pod's applied fraction was read from.
type AllocationSource string

const (
	// SourceAppliedRecord: the admission webhook's gpufrac.io/applied annotation (the
	// recommendation's target exactly as it was applied).
	SourceAppliedRecord AllocationSource = "applied-record"
	// SourceBackendFields: the fields the backend writes (limits, annotations, env),
	// with the configured memory overheads subtracted. Used for pods without a record.
	SourceBackendFields AllocationSource = "backend-fields"
	// SourceWholeGPU: no fraction at all; a container that asks for one whole GPU is
	// taken to hold all of its memory and compute.
	SourceWholeGPU AllocationSource = "whole-gpu"
)

// Alloc is one container's applied fraction. A negative field was not written (the
// backend does not write it, or it was not controlled) and is never compared.
type Alloc struct {
	// Memory is GPU memory, bytes; -1 when unknown.
	Memory int64
	// Compute is thousandths of one GPU; -1 when unknown.
	Compute int64
	// Source is where the values come from.
	Source AllocationSource
}

// PodAllocation is the applied fraction of each of a pod's GPU containers.
type PodAllocation struct {
	// Containers maps container name to its fraction; containers without a GPU, or
	// asking for several whole GPUs (which the webhook leaves unchanged), are absent.
	Containers map[string]Alloc
	// Record is the parsed applied record, nil when absent or invalid.
	Record *gpufracv1.AppliedRecord
	// RecordError is set when the pod carries an applied record that does not parse.
	RecordError error
}

// backendWritesCompute reports whether a backend writes a compute limit (KAI fractions
// are memory fractions: kai and kai-nvfractions write none).
func backendWritesCompute(b gpufracv1.BackendType) bool {
	switch b {
	case gpufracv1.BackendHAMi, gpufracv1.BackendMPS, gpufracv1.BackendAnnotations:
		return true
	}
	return false
}

// ReadAllocation reads what fraction a pod runs with: from the applied record when
// present and valid, else from the backend's fields minus memoryOverhead (bytes: the
// webhook's per-backend overhead plus spec.backend.memoryOverhead), else, for containers
// asking for exactly one cfg.GPUResource, a whole GPU (cfg.GPUMemoryBytes, and 1000
// milli of compute where the backend writes compute). cfg must have defaults applied.
func ReadAllocation(pod *corev1.Pod, backend gpufracv1.BackendType, cfg admission.Config, memoryOverhead int64) PodAllocation {
	out := PodAllocation{Containers: map[string]Alloc{}}
	rec, err := gpufracv1.ParseApplied(pod.Annotations)
	if err != nil {
		out.RecordError = err
	}
	if rec != nil && err == nil {
		out.Record = rec
		for _, c := range rec.Containers {
			a := Alloc{Memory: -1, Compute: -1, Source: SourceAppliedRecord}
			if c.Memory != nil {
				a.Memory = c.Memory.Value()
			}
			if c.Compute != nil {
				a.Compute = c.Compute.MilliValue()
			}
			out.Containers[c.Name] = a
		}
		return out
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		a := backendFields(pod, i, backend, cfg)
		if a.Memory >= 0 {
			a.Memory = max(a.Memory-memoryOverhead, 0)
		}
		if a.Memory >= 0 || a.Compute >= 0 {
			a.Source = SourceBackendFields
			out.Containers[c.Name] = a
			continue
		}
		if n := admission.GPUCount(c, cfg.GPUResource); n == 1 {
			a := Alloc{Memory: cfg.GPUMemoryBytes, Compute: -1, Source: SourceWholeGPU}
			if backendWritesCompute(backend) {
				a.Compute = 1000
			}
			out.Containers[c.Name] = a
		}
	}
	return out
}

// backendFields reads the values a backend wrote into container i, before subtracting
// overheads; fields not found are -1.
func backendFields(pod *corev1.Pod, i int, backend gpufracv1.BackendType, cfg admission.Config) Alloc {
	c := &pod.Spec.Containers[i]
	a := Alloc{Memory: -1, Compute: -1}
	const mib = admission.MiB
	switch backend {
	case gpufracv1.BackendHAMi:
		if q, ok := c.Resources.Limits[cfg.HAMi.MemoryResource]; ok {
			a.Memory = q.Value() * mib
		}
		if q, ok := c.Resources.Limits[cfg.HAMi.CoresResource]; ok {
			a.Compute = q.Value() * 10
		}
	case gpufracv1.BackendMPS:
		for _, e := range c.Env {
			switch e.Name {
			case cfg.MPS.PinnedMemoryEnv:
				// "<device>=<MiB>M", possibly several devices; the configured one counts.
				for part := range strings.SplitSeq(e.Value, ",") {
					dev, v, ok := strings.Cut(strings.TrimSpace(part), "=")
					if !ok || dev != cfg.MPS.Device {
						continue
					}
					if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSuffix(v, "M"), "m"), 10, 64); err == nil && n >= 0 {
						a.Memory = n * mib
					}
				}
			case cfg.MPS.ThreadPercentageEnv:
				if n, err := strconv.ParseInt(strings.TrimSpace(e.Value), 10, 64); err == nil && n >= 0 {
					a.Compute = n * 10
				}
			}
		}
	case gpufracv1.BackendAnnotations:
		prefix := cfg.Annotations.ContainerPrefix + c.Name
		if q, err := resource.ParseQuantity(pod.Annotations[prefix+gpufracv1.AnnotationContainerMemorySuffix]); err == nil {
			a.Memory = q.Value()
		}
		if q, err := resource.ParseQuantity(pod.Annotations[prefix+gpufracv1.AnnotationContainerComputeSuffix]); err == nil {
			a.Compute = q.MilliValue()
		}
	case gpufracv1.BackendKAI:
		if !isKAIContainer(pod, i, cfg) {
			break
		}
		if n, err := strconv.ParseInt(pod.Annotations[cfg.KAI.MemoryAnnotation], 10, 64); err == nil && n > 0 {
			a.Memory = n * mib
		} else if f, err := strconv.ParseFloat(pod.Annotations[cfg.KAI.FractionAnnotation], 64); err == nil && f > 0 && f < 1 {
			a.Memory = int64(f * float64(cfg.UsableGPUMemoryBytes()))
		}
	case gpufracv1.BackendKAINVFractions:
		if q, err := resource.ParseQuantity(pod.Annotations[cfg.NVFractions.Prefix+c.Name+".gpu-memory.request"]); err == nil {
			a.Memory = q.Value()
		}
	}
	return a
}

// isKAIContainer reports whether container i receives a pod's KAI fraction: the one
// named by the container-name annotation, else the first container.
func isKAIContainer(pod *corev1.Pod, i int, cfg admission.Config) bool {
	if name, ok := pod.Annotations[cfg.KAI.ContainerNameAnnotation]; ok && name != "" {
		return pod.Spec.Containers[i].Name == name
	}
	return i == 0
}

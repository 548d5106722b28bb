package updater

import (
	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/workload"
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
	// ComputeRequest is the placement-only compute request the backend wrote for a
	// time-sliced container (the applied record's writtenComputeRequest), thousandths of
	// one GPU; 0 when none was written or it is unknown.
	ComputeRequest int64
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
	// RecordError is set when the pod carries an applied record that does not parse:
	// Containers are then read as without a record, and Evaluate never shrinks the pod
	// (SkipRecordInvalid).
	RecordError error
}

// ReadAllocation reads what fraction a pod runs with: from the applied record when
// present and valid, else from the backend's fields (backend.Codec.Read) minus
// memoryOverhead (bytes: the webhook's per-backend overhead plus
// spec.backend.memoryOverhead), else, for containers asking for exactly one
// cfg.GPUResource, a whole GPU. Containers are the regular ones and the native sidecars;
// init containers that run to completion are never read (cfg.GPUMemoryBytes, and 1000 milli of compute where the
// backend writes compute). For the device-plugin backends (nvidia-timeslicing,
// nvidia-mps) a record of another backend is ignored: that pod is not on the plan's shared
// GPUs, so it holds a whole GPU unless bt's own fields say otherwise. A record that does
// not parse is RecordError and read as absent (the fields, else a whole GPU, may
// overstate what the pod holds: Evaluate holds its shrinks). cfg must have defaults
// applied; an unknown backend type reads no fields.
func ReadAllocation(pod *corev1.Pod, bt gpufracv1.BackendType, cfg backend.Config, memoryOverhead int64) PodAllocation {
	out := PodAllocation{Containers: map[string]Alloc{}}
	rec, err := gpufracv1.ParseApplied(pod.Annotations)
	if err != nil {
		out.RecordError = err
	}
	if rec != nil && err == nil && !onOtherBackend(rec, bt) {
		out.Record = rec
		for _, c := range rec.Containers {
			a := Alloc{Memory: -1, Compute: -1, Source: SourceAppliedRecord}
			if c.Memory != nil {
				a.Memory = c.Memory.Value()
			}
			if c.Compute != nil {
				a.Compute = c.Compute.MilliValue()
			}
			if c.WrittenComputeRequest != nil {
				a.ComputeRequest = c.WrittenComputeRequest.MilliValue()
			}
			out.Containers[c.Name] = a
		}
		return out
	}
	codec := backend.New(cfg)[bt]
	var fields map[string]backend.Allocation
	if codec != nil {
		fields = codec.Read(pod)
	}
	for _, pc := range workload.Containers(pod) {
		if pc.Type == gpufracv1.ContainerTypeInit {
			continue // never written: the webhook writes regular containers and native sidecars
		}
		c := pc.Container
		if f, ok := fields[c.Name]; ok {
			a := Alloc{Memory: f.Memory, Compute: f.Compute, Source: SourceBackendFields}
			if a.Memory >= 0 {
				a.Memory = max(a.Memory-memoryOverhead, 0)
			}
			out.Containers[c.Name] = a
			continue
		}
		if n := backend.GPUCount(c, cfg.GPUResource); n == 1 {
			a := Alloc{Memory: cfg.GPUMemoryBytes, Compute: -1, Source: SourceWholeGPU}
			if codec != nil && codec.WritesCompute() {
				a.Compute = 1000
			}
			out.Containers[c.Name] = a
		}
	}
	return out
}

package v1alpha1

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Well-known annotation keys that gpufrac writes on or reads from pods. Keys of other
// projects that a backend writes (HAMi resource names, KAI annotations, MPS variables)
// are configured on the admission webhook, not here.
const (
	// AnnotationApplied is written by the admission webhook on every pod it changed.
	// Its value is the JSON encoding of AppliedRecord: which backend wrote what, and which
	// GPUFractionRecommendation (generation, resourceVersion) it came from, so the updater
	// compares a running pod with the current recommendation without re-deriving what
	// the backend wrote. Read it with ParseApplied.
	AnnotationApplied = "gpufrac.io/applied"

	// AnnotationExclude on a pod (or its template) with value "true" makes the admission
	// webhook admit the pod unchanged, whatever its autoscaler says.
	AnnotationExclude = "gpufrac.io/exclude"

	// AnnotationGPUMemory is written by the "annotations" backend: the pod's total
	// recommended GPU memory (sum over its containers, overhead included), a quantity
	// rounded up to whole MiB, e.g. "4096Mi".
	AnnotationGPUMemory = "gpufrac.io/gpu-memory"

	// AnnotationGPUCompute is written by the "annotations" backend: the pod's total
	// recommended GPU compute (sum over its containers), a share of one GPU as a milli
	// quantity, e.g. "350m" for 0.35 of one GPU.
	AnnotationGPUCompute = "gpufrac.io/gpu-compute"

	// AnnotationGPUComputeRequest is written by the "annotations" backend for
	// time-sliced containers (sharingMode TimeSlicing): the pod's total compute request
	// (sum of the containers' status computeRequest), a share of one GPU as a milli
	// quantity, e.g. "120m". A scheduler places by it (co-tenants' requests sum to at
	// most one GPU) and enforces no limit from it; AnnotationGPUCompute is then absent.
	AnnotationGPUComputeRequest = "gpufrac.io/gpu-compute-request"

	// AnnotationContainerComputeRequestSuffix ends the per-container compute request
	// key (see AnnotationContainerPrefix and AnnotationGPUComputeRequest); not written
	// for container names over 33 characters.
	AnnotationContainerComputeRequestSuffix = ".gpu-compute-request"

	// AnnotationGPUMemoryRequest is written by the "annotations" backend with
	// --annotation-memory-request=observed-peak (the default): the pod's total memory request for placement
	// (sum over its containers of the recommendation's observed memory peak plus overhead
	// when below the target, else the target plus overhead), a quantity rounded up to
	// whole MiB per container, e.g. "3072Mi". A scheduler places by it (co-tenants'
	// requests sum to at most one GPU); AnnotationGPUMemory stays the limit, so the
	// memory headroom is burst room above the request rather than reserved.
	AnnotationGPUMemoryRequest = "gpufrac.io/gpu-memory-request"

	// AnnotationContainerMemoryRequestSuffix ends the per-container memory request key
	// (see AnnotationContainerPrefix and AnnotationGPUMemoryRequest); not written for
	// container names over 34 characters.
	AnnotationContainerMemoryRequestSuffix = ".gpu-memory-request"

	// AnnotationContainerPrefix starts the per-container keys of the "annotations"
	// backend: gpufrac.io/container.<container>.gpu-memory and
	// gpufrac.io/container.<container>.gpu-compute, same units as AnnotationGPUMemory and
	// AnnotationGPUCompute. A key longer than the 63 characters Kubernetes allows after
	// the "/" (container names over 41 characters) is not written.
	AnnotationContainerPrefix = "gpufrac.io/container."

	// AnnotationContainerMemorySuffix ends the per-container memory key (see
	// AnnotationContainerPrefix).
	AnnotationContainerMemorySuffix = ".gpu-memory"

	// AnnotationContainerComputeSuffix ends the per-container compute key (see
	// AnnotationContainerPrefix).
	AnnotationContainerComputeSuffix = ".gpu-compute"
)

// AppliedRecord is the value of AnnotationApplied: what the admission webhook wrote into
// a pod when it was created.
// +kubebuilder:object:generate=false
type AppliedRecord struct {
	// Backend is the backend that wrote the values.
	Backend BackendType `json:"backend"`
	// Autoscaler is the name of the GPUFractionAutoscaler (same namespace as the pod).
	Autoscaler string `json:"autoscaler"`
	// RecommendationGeneration is metadata.generation of the GPUFractionRecommendation
	// that was applied.
	RecommendationGeneration int64 `json:"recommendationGeneration"`
	// RecommendationResourceVersion is metadata.resourceVersion of the
	// GPUFractionRecommendation that was applied (it changes with every status update,
	// unlike the generation). Compare it for equality only.
	RecommendationResourceVersion string `json:"recommendationResourceVersion"`
	// ObservedGeneration is status.observedGeneration of the recommendation: the
	// autoscaler generation it was computed for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ConfidencePercent is the recommendation's status.confidencePercent, 0–100.
	ConfidencePercent int32 `json:"confidencePercent"`
	// Containers lists the containers whose values were written, in pod order.
	Containers []AppliedContainer `json:"containers"`
}

// AppliedContainer is what was applied to one container.
// +kubebuilder:object:generate=false
type AppliedContainer struct {
	// Name is the container's name.
	Name string `json:"name"`
	// Memory is the recommendation's target memory that was applied, bytes, exactly as
	// read from the recommendation. Nil when memory was not written.
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is the recommendation's target compute that was applied, share of one GPU,
	// exactly as read. Nil when compute was not written.
	Compute *resource.Quantity `json:"compute,omitempty"`
	// WrittenMemory is the memory the backend wrote, bytes: Memory plus the memory
	// overheads, rounded up to whole MiB, and capped where the backend caps it (MPS
	// replica share).
	WrittenMemory *resource.Quantity `json:"writtenMemory,omitempty"`
	// WrittenMemoryRequest is the placement-only memory request the backend wrote below
	// WrittenMemory (the annotations backend's gpufrac.io/gpu-memory-request), bytes:
	// what a scheduler that packs by request reserves for the container. Nil when none
	// was written (WrittenMemory is then what the pod is placed by).
	WrittenMemoryRequest *resource.Quantity `json:"writtenMemoryRequest,omitempty"`
	// WrittenCompute is the compute the backend wrote, share of one GPU, after rounding
	// to the backend's unit (whole percent for HAMi and MPS).
	WrittenCompute *resource.Quantity `json:"writtenCompute,omitempty"`
	// WrittenComputeRequest is the placement-only compute request the backend wrote for
	// a time-sliced container with no compute limit (the annotations backend's
	// gpufrac.io/gpu-compute-request), share of one GPU: what a scheduler that packs by
	// request reserves for the container. Nil when none was written.
	WrittenComputeRequest *resource.Quantity `json:"writtenComputeRequest,omitempty"`
}

// ParseApplied reads AnnotationApplied from a pod's annotations. It returns nil and no
// error when the annotation is absent, and an error when it is present but not valid
// JSON of an AppliedRecord.
func ParseApplied(annotations map[string]string) (*AppliedRecord, error) {
	v, ok := annotations[AnnotationApplied]
	if !ok {
		return nil, nil
	}
	rec := &AppliedRecord{}
	if err := json.Unmarshal([]byte(v), rec); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationApplied, err)
	}
	return rec, nil
}

// Container returns the applied values of the named container, or nil.
func (r *AppliedRecord) Container(name string) *AppliedContainer {
	if r == nil {
		return nil
	}
	for i := range r.Containers {
		if r.Containers[i].Name == name {
			return &r.Containers[i]
		}
	}
	return nil
}

package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
)

// EffectiveUpdateMode returns spec.updatePolicy.updateMode, or Off when unset (the
// default: creating an autoscaler changes no pod).
func (s *GPUFractionAutoscalerSpec) EffectiveUpdateMode() UpdateMode {
	if p := s.UpdatePolicy; p != nil && p.UpdateMode != nil {
		return *p.UpdateMode
	}
	return UpdateModeOff
}

// EffectiveBackend returns spec.backend.type, or annotations when unset.
func (s *GPUFractionAutoscalerSpec) EffectiveBackend() BackendType {
	if b := s.Backend; b != nil && b.Type != "" {
		return b.Type
	}
	return BackendAnnotations
}

// ContainerPolicy returns the policy of the named container, else the "*" policy, else
// nil (no policy: every default applies).
func (s *GPUFractionAutoscalerSpec) ContainerPolicy(container string) *ContainerPolicy {
	if s.ResourcePolicy == nil {
		return nil
	}
	var def *ContainerPolicy
	for i := range s.ResourcePolicy.ContainerPolicies {
		p := &s.ResourcePolicy.ContainerPolicies[i]
		switch p.ContainerName {
		case container:
			return p
		case ContainerPolicyDefault:
			def = p
		}
	}
	return def
}

// Enabled reports whether gpufrac recommends for the container (mode not Off). A nil
// policy is enabled.
func (p *ContainerPolicy) Enabled() bool {
	return p == nil || p.Mode == nil || *p.Mode != ContainerScalingModeOff
}

// Controls reports whether the policy lets gpufrac size res (all resources when
// controlledResources is empty). A nil policy controls everything.
func (p *ContainerPolicy) Controls(res GPUResourceName) bool {
	return p == nil || len(p.ControlledResources) == 0 || slices.Contains(p.ControlledResources, res)
}

// WrittenMemory is the GPU memory limit a pod's container is written with, bytes:
// MemoryLimit where it is above Target.Memory (burst room above the need for a backend
// that places pods by a request), else Target.Memory; nil when the recommendation has no
// memory.
func (r *ContainerRecommendation) WrittenMemory() *resource.Quantity {
	if r.MemoryLimit != nil && r.Target.Memory != nil && r.MemoryLimit.Cmp(*r.Target.Memory) > 0 {
		return r.MemoryLimit
	}
	return r.Target.Memory
}

// YoungShare returns the memory a young container of r is written at, bytes as a
// quantity, or nil: its upper bound, the whole share of one GPU its target falls in, when
// the recommendation is young (youngMarginPercent above 0) and its memoryLimit is at or
// above that bound, itself above the target (the recommender writes such a limit for
// backends that place pods by their observed peak). The admission webhook writes the
// share as the limit and in the applied record, and the updater compares pods with it
// (contract.Target.YoungShare); target.memory stays the need.
func (r *ContainerRecommendation) YoungShare() *resource.Quantity {
	if r.YoungMarginPercent <= 0 || r.Target.Memory == nil || r.UpperBound.Memory == nil || r.MemoryLimit == nil {
		return nil
	}
	if r.UpperBound.Memory.Cmp(*r.Target.Memory) <= 0 || r.MemoryLimit.Cmp(*r.UpperBound.Memory) < 0 {
		return nil
	}
	return r.UpperBound.Memory
}

// PartitionsCompute reports whether a container recommendation's compute target is a
// share to reserve and enforce: yes for Exclusive and MPS, no for TimeSlicing, whose
// workloads are bursty or mostly idle and share the GPU's time, so reserving a percentile
// of their activity would only keep co-tenants apart (compute contention is measured
// instead: gpufrac_* metrics and the simulator). The admission webhook then writes no
// compute limit and the updater compares no compute; the target stays in status as the
// measured need.
func (r *ContainerRecommendation) PartitionsCompute() bool {
	return r.SharingMode != SharingModeTimeSlicing
}

package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// annotationsBackend writes neutral gpufrac.io/* annotations for clusters that enforce
// fractions themselves: the pod's totals gpufrac.io/gpu-memory (MiB quantity, "4096Mi",
// rounded up per container) and gpufrac.io/gpu-compute (milli share of one GPU, "350m"),
// and per container gpufrac.io/container.<container>.gpu-memory and .gpu-compute. A
// per-container key that would be invalid (container name over 41 characters) is not
// written, with a warning. Nothing else in the pod changes.
type annotationsBackend struct{ cfg Config }

// Type implements Backend.
func (b *annotationsBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendAnnotations }

// Apply implements Backend.
func (b *annotationsBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	ac := b.cfg.Annotations
	for _, k := range []string{ac.MemoryKey, ac.ComputeKey} {
		if err := checkAnnotationKey(k); err != nil {
			return nil, err
		}
	}
	var warnings []string
	var memMiB, milli int64
	var anyMem, anyCompute bool
	for _, t := range targets {
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
				setAnnotation(pod, memKey, mibQuantity(mib).String())
			}
			t.wroteMemory(mib * MiB)
		}
		if t.HasCompute {
			milli += t.ComputeMilli
			anyCompute = true
			if perContainer {
				setAnnotation(pod, cpuKey, milliQuantity(t.ComputeMilli).String())
			}
			t.wroteCompute(t.ComputeMilli)
		}
	}
	if anyMem {
		setAnnotation(pod, ac.MemoryKey, mibQuantity(memMiB).String())
	}
	if anyCompute {
		setAnnotation(pod, ac.ComputeKey, milliQuantity(milli).String())
	}
	return warnings, nil
}

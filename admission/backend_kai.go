package admission

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// kaiBackend writes KAI scheduler's pod-level fraction annotations: gpu-memory (MiB,
// integer, rounded up) or gpu-fraction (memory divided by the GPU's usable memory,
// GPUMemoryBytes − KAI.ReservedMemoryBytes, rounded up
// to hundredths, strictly between 0 and 1), never both; it sets spec.schedulerName to
// kai-scheduler and removes the container's nvidia.com/gpu request and limit, which KAI
// rejects next to a fraction. KAI gives a fraction to one container per pod (the first,
// or the one named by gpu-fraction-container-name, which is written when the target is
// not the first). KAI's legacy fractions share compute by time-slicing, so compute is
// not written. Unsafe (pod left unchanged): several containers with recommendations, a
// recommendation that needs a whole GPU, another container or an init container asking
// for whole GPUs, a multi-device fraction, a pod bound to another scheduler.
type kaiBackend struct{ cfg Config }

// Type implements Backend.
func (b *kaiBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendKAI }

// Apply implements Backend.
func (b *kaiBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	t, err := prepareKAI(pod, targets, b.cfg, string(gpufracv1.BackendKAI))
	if err != nil {
		return nil, err
	}
	kc := b.cfg.KAI
	// A fraction is a share of the GPU's usable memory: its total less the per-GPU
	// reserve (driver and contexts), so the pod gets at least its memory in MiB.
	usable := b.cfg.UsableGPUMemoryBytes()
	usableMiB := usable / MiB
	switch kc.Mode {
	case KAIModeFraction:
		// Hundredths of the GPU's usable memory, rounded up, so the pod never gets less
		// memory than recommended.
		h := (t.MemoryBytes*100 + usable - 1) / usable
		if h >= 100 {
			return nil, unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB usable); a KAI gpu-fraction must be below 1", ceilMiB(t.MemoryBytes), t.Container, usableMiB)
		}
		h = max(h, 1)
		setAnnotation(pod, kc.FractionAnnotation, strconv.FormatFloat(float64(h)/100, 'f', -1, 64))
		delete(pod.Annotations, kc.MemoryAnnotation)
		t.wroteMemory(h * usable / 100)
	default:
		mib := ceilMiB(t.MemoryBytes)
		if mib >= usableMiB {
			return nil, unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB usable)", mib, t.Container, usableMiB)
		}
		setAnnotation(pod, kc.MemoryAnnotation, strconv.FormatInt(mib, 10))
		delete(pod.Annotations, kc.FractionAnnotation)
		t.wroteMemory(mib * MiB)
	}
	return nil, nil
}

// prepareKAI checks and applies what the kai and kai-nvfractions backends share: one
// target container with memory, no whole-GPU request anywhere else, no multi-device
// fraction, the KAI scheduler, the optional queue label, and the container name
// annotation when the target is not the first container. It returns the one target.
func prepareKAI(pod *corev1.Pod, targets []*Target, cfg Config, backend string) (*Target, error) {
	kc := cfg.KAI
	if len(targets) != 1 {
		names := make([]string, len(targets))
		for i, t := range targets {
			names[i] = t.Container
		}
		return nil, unsafe(UnsafeMultiContainer, "%s gives a fraction to one container per pod, but containers %v have recommendations", backend, names)
	}
	t := targets[0]
	if !t.HasMemory {
		return nil, unsafe(UnsafeNeedsMemory, "%s fractions are memory fractions, but memory is not controlled for container %s", backend, t.Container)
	}
	for i := range pod.Spec.InitContainers {
		if GPUCount(&pod.Spec.InitContainers[i], cfg.GPUResource) > 0 {
			return nil, unsafe(UnsafeInitContainerGPU, "init container %s asks for %s, which KAI rejects next to a fraction", pod.Spec.InitContainers[i].Name, cfg.GPUResource)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		n := GPUCount(c, cfg.GPUResource)
		switch {
		case i == t.Index && n > 1:
			return nil, unsafe(UnsafeMultiGPU, "container %s asks for %d %s; gpufrac writes fractions of one GPU only", c.Name, n, cfg.GPUResource)
		case i == t.Index:
			removeResource(c, cfg.GPUResource)
		case n > 0:
			return nil, unsafe(UnsafeWholeGPUNeighbour, "container %s asks for whole GPUs (%s), which KAI rejects next to a fraction", c.Name, cfg.GPUResource)
		}
	}
	if v, ok := pod.Annotations[kc.NumDevicesAnnotation]; ok && v != "1" {
		return nil, unsafe(UnsafeMultiDevice, "pod asks for fractions of %s devices (%s); gpufrac sizes fractions of one GPU", v, kc.NumDevicesAnnotation)
	}
	switch pod.Spec.SchedulerName {
	case "", corev1.DefaultSchedulerName, kc.SchedulerName:
		pod.Spec.SchedulerName = kc.SchedulerName
	default:
		return nil, unsafe(UnsafeSchedulerConflict, "pod is bound to scheduler %q; %s needs %q", pod.Spec.SchedulerName, backend, kc.SchedulerName)
	}
	if kc.Queue != "" {
		if _, ok := pod.Labels[kc.QueueLabel]; !ok {
			if errs := validation.IsValidLabelValue(kc.Queue); len(errs) > 0 {
				return nil, unsafe(UnsafeInvalidLabel, "queue %q is not a valid label value", kc.Queue)
			}
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			pod.Labels[kc.QueueLabel] = kc.Queue
		}
	}
	if _, ok := pod.Annotations[kc.ContainerNameAnnotation]; ok || t.Index != 0 {
		setAnnotation(pod, kc.ContainerNameAnnotation, t.Container)
	}
	return t, nil
}

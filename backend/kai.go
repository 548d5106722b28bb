package backend

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// kaiBackend writes KAI scheduler's pod-level fraction annotations: gpu-memory (MiB,
// integer, rounded up) or gpu-fraction (memory divided by the GPU's usable memory,
// GPUMemoryBytes − KAI.ReservedMemoryBytes, rounded up
// to hundredths, strictly between 0 and 1), never both; GPUMemoryBytes is that of the
// GPUs the pod's nodeSelector or required node affinity pins it to by GPU feature
// discovery's nvidia.com/gpu.memory label where they do (Config.ForPod: the smallest
// they allow), so a fraction is never a share of a larger GPU than the pod lands on; it sets spec.schedulerName to
// kai-scheduler and removes the container's nvidia.com/gpu request and limit, which KAI
// rejects next to a fraction. KAI gives a fraction to one container per pod (the first,
// or the one named by gpu-fraction-container-name, which is written when the target is
// not the first). KAI's legacy fractions share compute by time-slicing, so compute is
// not written. Unsafe (pod left unchanged): several containers with recommendations, a
// recommendation that needs a whole GPU, another container or an init container asking
// for whole GPUs, a multi-device fraction, a pod bound to another scheduler, a target
// container that asks for no GPU (UnsafeNoGPU).
type kaiBackend struct{ cfg Config }

// Type implements Codec.
func (b *kaiBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendKAI }

// Apply implements Codec.
func (b *kaiBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	t, err := prepareKAI(pod, targets, b.cfg, string(gpufracv1.BackendKAI))
	if err != nil {
		return nil, err
	}
	kc := b.cfg.KAI
	// A fraction is a share of the GPU's usable memory: its total less the per-GPU
	// reserve (driver and contexts), so the pod gets at least its memory in MiB. The GPU
	// is the one the pod's node constraints pin it to (Config.ForPod), else --gpu-memory.
	usable := b.cfg.ForPod(pod).UsableGPUMemoryBytes()
	usableMiB := usable / MiB
	switch kc.Mode {
	case KAIModeFraction:
		// Hundredths of the GPU's usable memory, rounded up, so the pod never gets less
		// memory than recommended.
		h := (t.MemoryBytes*100 + usable - 1) / usable
		if h >= 100 {
			return nil, Unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB usable); a KAI gpu-fraction must be below 1", ceilMiB(t.MemoryBytes), t.Container, usableMiB)
		}
		h = max(h, 1)
		SetAnnotation(pod, kc.FractionAnnotation, strconv.FormatFloat(float64(h)/100, 'f', -1, 64))
		delete(pod.Annotations, kc.MemoryAnnotation)
		t.wroteMemory(h * usable / 100)
	default:
		mib := ceilMiB(t.MemoryBytes)
		if mib >= usableMiB {
			return nil, Unsafe(UnsafeWholeGPU, "recommended memory %dMiB of container %s needs a whole GPU (%dMiB usable)", mib, t.Container, usableMiB)
		}
		SetAnnotation(pod, kc.MemoryAnnotation, strconv.FormatInt(mib, 10))
		delete(pod.Annotations, kc.FractionAnnotation)
		t.wroteMemory(mib * MiB)
	}
	return nil, nil
}

// WritesCompute implements Codec: KAI's legacy fractions share compute by time-slicing.
func (b *kaiBackend) WritesCompute() bool { return false }

// Read implements Codec: for the container that receives the fraction (isKAIContainer),
// the memory annotation (MiB) or else the fraction annotation times the GPU's usable
// memory (truncated to bytes; the GPU Apply sized it by, Config.ForPod).
func (b *kaiBackend) Read(pod *corev1.Pod) map[string]Allocation {
	kc := b.cfg.KAI
	return readEach(pod, func(c workload.PodContainer, a *Allocation) {
		if !isKAIContainer(pod, c, kc) {
			return
		}
		if n, err := strconv.ParseInt(pod.Annotations[kc.MemoryAnnotation], 10, 64); err == nil && n > 0 {
			a.Memory = n * MiB
		} else if f, err := strconv.ParseFloat(pod.Annotations[kc.FractionAnnotation], 64); err == nil && f > 0 && f < 1 {
			a.Memory = int64(f * float64(b.cfg.ForPod(pod).UsableGPUMemoryBytes()))
		}
	})
}

// isKAIContainer reports whether c receives a pod's KAI fraction: the container (regular
// or native sidecar) named by the container-name annotation, else the first regular
// container.
func isKAIContainer(pod *corev1.Pod, c workload.PodContainer, kc KAIConfig) bool {
	if name, ok := pod.Annotations[kc.ContainerNameAnnotation]; ok && name != "" {
		return c.Container.Name == name
	}
	return c.Type == gpufracv1.ContainerTypeRegular && c.Index == 0
}

// prepareKAI checks and applies what the kai and kai-nvfractions backends share: one
// target container (a regular container or a native sidecar) with memory, no whole-GPU
// request anywhere else (init containers included), no multi-device fraction, the KAI
// scheduler, the optional queue label, and the container name annotation when the
// target is not the first regular container (KAI looks the name up in spec.containers,
// then spec.initContainers). It returns the one target.
func prepareKAI(pod *corev1.Pod, targets []*Target, cfg Config, backend string) (*Target, error) {
	kc := cfg.KAI
	if len(targets) != 1 {
		names := make([]string, len(targets))
		for i, t := range targets {
			names[i] = t.Container
		}
		return nil, Unsafe(UnsafeMultiContainer, "%s gives a fraction to one container per pod, but containers %v have recommendations", backend, names)
	}
	t := targets[0]
	if !t.HasMemory {
		return nil, Unsafe(UnsafeNeedsMemory, "%s fractions are memory fractions, but memory is not controlled for container %s", backend, t.Container)
	}
	for _, pc := range workload.Containers(pod) {
		c := pc.Container
		n := GPUCount(c, cfg.GPUResource)
		target := pc.InitList() == t.Init && pc.Index == t.Index
		switch {
		case target && n > 1:
			return nil, Unsafe(UnsafeMultiGPU, "container %s asks for %d %s; %s", c.Name, n, cfg.GPUResource, oneGPUOnly)
		case target && n < 1 && (hasResource(c, cfg.GPUResource) || !hasKAIFraction(pod, kc) || !isKAIContainer(pod, pc, kc)):
			// nvidia.com/gpu: 0, or no GPU and no fraction of the pod's for it (a stale
			// recommendation of a container that no longer asks for one): a fraction
			// would give it a GPU share it does not ask for.
			return nil, Unsafe(UnsafeNoGPU, "container %s asks for no %s and holds no KAI fraction; a fraction would give it a GPU", c.Name, cfg.GPUResource)
		case target:
			RemoveResource(c, cfg.GPUResource)
		case n > 0 && pc.InitList():
			return nil, Unsafe(UnsafeInitContainerGPU, "init container %s asks for %s, which KAI rejects next to a fraction", c.Name, cfg.GPUResource)
		case n > 0:
			return nil, Unsafe(UnsafeWholeGPUNeighbour, "container %s asks for whole GPUs (%s), which KAI rejects next to a fraction", c.Name, cfg.GPUResource)
		}
	}
	if v, ok := pod.Annotations[kc.NumDevicesAnnotation]; ok && v != "1" {
		return nil, Unsafe(UnsafeMultiDevice, "pod asks for fractions of %s devices (%s); gpufrac sizes fractions of one GPU", v, kc.NumDevicesAnnotation)
	}
	switch pod.Spec.SchedulerName {
	case "", corev1.DefaultSchedulerName, kc.SchedulerName:
		pod.Spec.SchedulerName = kc.SchedulerName
	default:
		return nil, Unsafe(UnsafeSchedulerConflict, "pod is bound to scheduler %q; %s needs %q", pod.Spec.SchedulerName, backend, kc.SchedulerName)
	}
	if kc.Queue != "" {
		if _, ok := pod.Labels[kc.QueueLabel]; !ok {
			if errs := validation.IsValidLabelValue(kc.Queue); len(errs) > 0 {
				return nil, Unsafe(UnsafeInvalidLabel, "queue %q is not a valid label value", kc.Queue)
			}
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			pod.Labels[kc.QueueLabel] = kc.Queue
		}
	}
	if _, ok := pod.Annotations[kc.ContainerNameAnnotation]; ok || t.Init || t.Index != 0 {
		SetAnnotation(pod, kc.ContainerNameAnnotation, t.Container)
	}
	return t, nil
}

// hasKAIFraction reports whether pod carries a KAI fraction (the memory or the fraction
// annotation), as a pod whose template holds one does.
func hasKAIFraction(pod *corev1.Pod, kc KAIConfig) bool {
	_, mem := pod.Annotations[kc.MemoryAnnotation]
	_, frac := pod.Annotations[kc.FractionAnnotation]
	return mem || frac
}

// hasResource reports whether c names res in its limits or requests, whatever the
// quantity.
func hasResource(c *corev1.Container, res corev1.ResourceName) bool {
	_, l := c.Resources.Limits[res]
	_, r := c.Resources.Requests[res]
	return l || r
}

// KAI annotation modes.
const (
	// KAIModeMemory writes the gpu-memory annotation, MiB.
	KAIModeMemory = "gpu-memory"
	// KAIModeFraction writes the gpu-fraction annotation, memory / GPUMemoryBytes (of
	// the pod's pinned GPU where it has one, Config.ForPod).
	KAIModeFraction = "gpu-fraction"
)

// KAIConfig names what the kai and kai-nvfractions backends write.
type KAIConfig struct {
	// Mode is KAIModeMemory (default) or KAIModeFraction.
	Mode string
	// SchedulerName is written into spec.schedulerName. Default kai-scheduler.
	SchedulerName string
	// MemoryAnnotation is KAI's memory annotation, MiB. Default gpu-memory.
	MemoryAnnotation string
	// FractionAnnotation is KAI's fraction annotation, 0 < x < 1. Default gpu-fraction.
	FractionAnnotation string
	// ContainerNameAnnotation names the container that receives the fraction when it is
	// not the first. Default gpu-fraction-container-name.
	ContainerNameAnnotation string
	// NumDevicesAnnotation asks KAI for fractions of several GPUs; pods that set it to
	// anything but 1 are left unchanged. Default gpu-fraction-num-devices.
	NumDevicesAnnotation string
	// QueueLabel is the label naming the KAI queue. Default kai.scheduler/queue.
	QueueLabel string
	// Queue, when set, is written into QueueLabel of pods that have no queue. Default
	// empty (pods keep whatever queue their template names).
	Queue string
	// ReservedMemoryBytes is the memory of each GPU that no fraction can use (the
	// driver's and each CUDA context's share), bytes. gpu-fraction is memory divided by
	// GPUMemoryBytes − ReservedMemoryBytes, and no gpu-memory above that usable memory
	// is written. Default 0: KAI documents no reserve, so the fraction is taken of the
	// total memory as before.
	ReservedMemoryBytes int64
}

func (k *KAIConfig) withDefaults() {
	defaultString(&k.Mode, KAIModeMemory)
	defaultString(&k.SchedulerName, "kai-scheduler")
	defaultString(&k.MemoryAnnotation, "gpu-memory")
	defaultString(&k.FractionAnnotation, "gpu-fraction")
	defaultString(&k.ContainerNameAnnotation, "gpu-fraction-container-name")
	defaultString(&k.NumDevicesAnnotation, "gpu-fraction-num-devices")
	defaultString(&k.QueueLabel, "kai.scheduler/queue")
}

// validate reports the settings that cannot work on a GPU of gpuMemory bytes.
func (k KAIConfig) validate(gpuMemory int64) []error {
	var errs []error
	if k.Mode != KAIModeMemory && k.Mode != KAIModeFraction {
		errs = append(errs, fmt.Errorf("--kai-mode %q: want %s or %s", k.Mode, KAIModeMemory, KAIModeFraction))
	}
	if k.ReservedMemoryBytes < 0 {
		errs = append(errs, errors.New("kai-reserved-memory must not be negative"))
	} else if k.ReservedMemoryBytes >= gpuMemory && gpuMemory > 0 {
		errs = append(errs, fmt.Errorf("--kai-reserved-memory %d bytes: want less than --gpu-memory (%d bytes)", k.ReservedMemoryBytes, gpuMemory))
	}
	return errs
}

func (k *KAIConfig) addFlags(fs *flag.FlagSet, d KAIConfig) {
	fs.StringVar(&k.Mode, "kai-mode", d.Mode, "KAI annotation to write: gpu-memory (MiB) or gpu-fraction (memory / --gpu-memory, or / the GPU a pod's nodeSelector or required node affinity pins it to by the nvidia.com/gpu.memory label). With GPUs of several sizes prefer gpu-memory: a fraction of --gpu-memory lands on a smaller GPU as less memory.")
	fs.StringVar(&k.SchedulerName, "kai-scheduler-name", d.SchedulerName, "spec.schedulerName written by the kai and kai-nvfractions backends.")
	fs.StringVar(&k.MemoryAnnotation, "kai-memory-annotation", d.MemoryAnnotation, "KAI memory annotation key (MiB).")
	fs.StringVar(&k.FractionAnnotation, "kai-fraction-annotation", d.FractionAnnotation, "KAI fraction annotation key (0 < x < 1).")
	fs.StringVar(&k.ContainerNameAnnotation, "kai-container-name-annotation", d.ContainerNameAnnotation, "KAI annotation naming the container that gets the fraction.")
	fs.StringVar(&k.NumDevicesAnnotation, "kai-num-devices-annotation", d.NumDevicesAnnotation, "KAI multi-device fraction annotation; pods asking for more than 1 device are left unchanged.")
	fs.StringVar(&k.QueueLabel, "kai-queue-label", d.QueueLabel, "Label naming a pod's KAI queue.")
	fs.StringVar(&k.Queue, "kai-queue", "", "Queue written into --kai-queue-label of pods that have none (empty: leave pods as they are).")
	fs.Func("kai-reserved-memory", "Memory of each GPU reserved for the driver and CUDA contexts (quantity, bytes): the KAI gpu-fraction is memory divided by --gpu-memory minus this, and no larger gpu-memory is written (default 0).", quantityFlag(&k.ReservedMemoryBytes))
}

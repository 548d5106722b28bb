package admission

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Config holds what the mutating webhook needs to decide and write a fraction. The zero
// value plus WithDefaults is a usable configuration; cmd/admission maps flags onto it
// with AddFlags.
type Config struct {
	// MinConfidence is the lowest recommendation confidence (status.confidencePercent,
	// 0–100) that is applied; 0 applies any recommendation. Nil means 50.
	MinConfidence *int32
	// OwnerWait is how long the mutating webhook waits for a pod's ReplicaSet or Job to
	// appear in the informer cache (it may have been created a moment before the pod).
	// The wait polls the cache only; no API request is made. Default 200ms.
	OwnerWait time.Duration
	// GPUResource is the extended resource that asks for whole GPUs. Default
	// nvidia.com/gpu.
	GPUResource corev1.ResourceName
	// GPUResourcePrefix marks a container as a GPU container when one of its request or
	// limit names starts with it. Default "nvidia.com/".
	GPUResourcePrefix string
	// GPUMemoryBytes is the memory of one GPU, bytes. No larger memory is ever written,
	// and the KAI gpu-fraction is memory divided by it. Default 80Gi.
	GPUMemoryBytes int64
	// MemoryOverhead is added per backend to the recommended memory of each container
	// before it is written, bytes (spec.backend.memoryOverhead of the autoscaler is added
	// on top). Default 0 for every backend.
	MemoryOverhead map[gpufracv1.BackendType]int64

	// HAMi configures the hami backend.
	HAMi HAMiConfig
	// KAI configures the kai backend (and the KAI settings kai-nvfractions shares).
	KAI KAIConfig
	// NVFractions configures the kai-nvfractions backend.
	NVFractions NVFractionsConfig
	// MPS configures the mps backend.
	MPS MPSConfig
	// Annotations configures the annotations backend.
	Annotations AnnotationsConfig
}

// HAMiConfig names the resources of the hami backend (HAMi lets clusters rename them).
type HAMiConfig struct {
	// MemoryResource is the per-GPU memory limit, MiB. Default nvidia.com/gpumem.
	MemoryResource corev1.ResourceName
	// CoresResource is the per-GPU compute limit, percent. Default nvidia.com/gpucores.
	CoresResource corev1.ResourceName
	// MemoryPercentageResource is HAMi's alternative memory limit in percent; it is
	// removed when MemoryResource is written. Default nvidia.com/gpumem-percentage.
	MemoryPercentageResource corev1.ResourceName
}

// KAI annotation modes.
const (
	// KAIModeMemory writes the gpu-memory annotation, MiB.
	KAIModeMemory = "gpu-memory"
	// KAIModeFraction writes the gpu-fraction annotation, memory / GPUMemoryBytes.
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

// UsableGPUMemoryBytes is the memory of one GPU a KAI fraction is a share of:
// GPUMemoryBytes minus KAI.ReservedMemoryBytes, bytes.
func (c Config) UsableGPUMemoryBytes() int64 {
	return c.GPUMemoryBytes - max(c.KAI.ReservedMemoryBytes, 0)
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

// MPSConfig configures the mps backend.
type MPSConfig struct {
	// ThreadPercentageEnv is the compute limit variable, percent 1–100. Default
	// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
	ThreadPercentageEnv string
	// PinnedMemoryEnv is the memory limit variable, "<device>=<MiB>M". Default
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
	PinnedMemoryEnv string
	// Device is the device index (as the client process sees it) the memory limit is
	// for. Default "0": a pod with one GPU sees it as device 0.
	Device string
	// ReplicaMemoryBytes, when positive, is the memory share the device plugin already
	// gives each MPS replica (GPU memory / replicas), bytes. No limit above it is ever
	// written: the MPS daemon enforces the share anyway. Default 0 (no share known).
	ReplicaMemoryBytes int64
}

// AnnotationsConfig names the keys of the neutral annotations backend.
type AnnotationsConfig struct {
	// MemoryKey is the pod's total memory. Default gpufrac.io/gpu-memory.
	MemoryKey string
	// ComputeKey is the pod's total compute. Default gpufrac.io/gpu-compute.
	ComputeKey string
	// ContainerPrefix starts the per-container keys. Default gpufrac.io/container.
	ContainerPrefix string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.MinConfidence == nil {
		v := int32(50)
		c.MinConfidence = &v
	}
	if c.OwnerWait == 0 {
		c.OwnerWait = 200 * time.Millisecond
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defR := func(s *corev1.ResourceName, v corev1.ResourceName) {
		if *s == "" {
			*s = v
		}
	}
	defR(&c.GPUResource, "nvidia.com/gpu")
	def(&c.GPUResourcePrefix, "nvidia.com/")
	if c.GPUMemoryBytes <= 0 {
		c.GPUMemoryBytes = 80 << 30
	}
	defR(&c.HAMi.MemoryResource, "nvidia.com/gpumem")
	defR(&c.HAMi.CoresResource, "nvidia.com/gpucores")
	defR(&c.HAMi.MemoryPercentageResource, "nvidia.com/gpumem-percentage")
	def(&c.KAI.Mode, KAIModeMemory)
	def(&c.KAI.SchedulerName, "kai-scheduler")
	def(&c.KAI.MemoryAnnotation, "gpu-memory")
	def(&c.KAI.FractionAnnotation, "gpu-fraction")
	def(&c.KAI.ContainerNameAnnotation, "gpu-fraction-container-name")
	def(&c.KAI.NumDevicesAnnotation, "gpu-fraction-num-devices")
	def(&c.KAI.QueueLabel, "kai.scheduler/queue")
	def(&c.NVFractions.Prefix, "nvidia.com/container.")
	def(&c.NVFractions.Limit, NVFractionsLimitUpperBound)
	def(&c.MPS.ThreadPercentageEnv, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
	def(&c.MPS.PinnedMemoryEnv, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
	def(&c.MPS.Device, "0")
	def(&c.Annotations.MemoryKey, gpufracv1.AnnotationGPUMemory)
	def(&c.Annotations.ComputeKey, gpufracv1.AnnotationGPUCompute)
	def(&c.Annotations.ContainerPrefix, gpufracv1.AnnotationContainerPrefix)
	return c
}

// minConfidence is MinConfidence or its default.
func (c Config) minConfidence() int32 {
	if c.MinConfidence == nil {
		return 50
	}
	return *c.MinConfidence
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.MinConfidence != nil && (*c.MinConfidence < 0 || *c.MinConfidence > 100) {
		errs = append(errs, fmt.Errorf("min-confidence %d: want 0–100", *c.MinConfidence))
	}
	if c.OwnerWait < 0 {
		errs = append(errs, fmt.Errorf("owner-wait %v: want ≥ 0", c.OwnerWait))
	}
	if c.KAI.Mode != KAIModeMemory && c.KAI.Mode != KAIModeFraction {
		errs = append(errs, fmt.Errorf("kai-mode %q: want %s or %s", c.KAI.Mode, KAIModeMemory, KAIModeFraction))
	}
	if c.NVFractions.Limit != NVFractionsLimitUpperBound && c.NVFractions.Limit != NVFractionsLimitTarget {
		errs = append(errs, fmt.Errorf("nvfractions-limit %q: want %s or %s", c.NVFractions.Limit, NVFractionsLimitUpperBound, NVFractionsLimitTarget))
	}
	if c.KAI.ReservedMemoryBytes < 0 {
		errs = append(errs, errors.New("kai-reserved-memory must not be negative"))
	} else if c.KAI.ReservedMemoryBytes >= c.GPUMemoryBytes && c.GPUMemoryBytes > 0 {
		errs = append(errs, fmt.Errorf("kai-reserved-memory %d bytes: want less than gpu-memory (%d bytes)", c.KAI.ReservedMemoryBytes, c.GPUMemoryBytes))
	}
	if c.MPS.ReplicaMemoryBytes < 0 {
		errs = append(errs, errors.New("mps-replica-memory must not be negative"))
	}
	for b, v := range c.MemoryOverhead {
		if !slices.Contains(BackendTypes, b) {
			errs = append(errs, fmt.Errorf("memory-overhead: unknown backend %q", b))
		}
		if v < 0 {
			errs = append(errs, fmt.Errorf("memory-overhead %s: must not be negative", b))
		}
	}
	return errors.Join(errs...)
}

// BackendTypes lists every backend the webhook knows, in documentation order.
var BackendTypes = []gpufracv1.BackendType{
	gpufracv1.BackendHAMi, gpufracv1.BackendKAI, gpufracv1.BackendKAINVFractions,
	gpufracv1.BackendMPS, gpufracv1.BackendAnnotations,
}

// AddFlags registers the mutating webhook's flags on fs, writing into c. Call
// WithDefaults after parsing for the fields left empty.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	d := Config{}.WithDefaults()
	fs.Func("min-confidence", fmt.Sprintf("Lowest recommendation confidence applied to new pods, percent 0–100; 0 applies any (default %d).", *d.MinConfidence), func(s string) error {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return err
		}
		c.MinConfidence = ptrTo(int32(v))
		return nil
	})
	fs.DurationVar(&c.OwnerWait, "owner-wait", d.OwnerWait, "How long to wait for a new pod's ReplicaSet or Job to reach the informer cache (cache polling only, no API request).")
	fs.Func("gpu-resource", fmt.Sprintf("Extended resource that asks for whole GPUs (default %s).", d.GPUResource), func(s string) error { c.GPUResource = corev1.ResourceName(s); return nil })
	fs.StringVar(&c.GPUResourcePrefix, "gpu-resource-prefix", d.GPUResourcePrefix, "A container is a GPU container when a request or limit name starts with this prefix.")
	fs.Func("gpu-memory", "Memory of one GPU (quantity, bytes): no larger memory is written, and the KAI gpu-fraction is memory divided by it (default 80Gi).", quantityFlag(&c.GPUMemoryBytes, true))
	fs.Func("memory-overhead", "Memory added per backend before writing, comma-separated backend=quantity pairs, e.g. hami=256Mi,mps=128Mi (default 0 for every backend); spec.backend.memoryOverhead is added on top.", func(s string) error {
		m, err := parseOverheads(s)
		if err != nil {
			return err
		}
		c.MemoryOverhead = m
		return nil
	})
	resFlag := func(p *corev1.ResourceName, name string, def corev1.ResourceName, usage string) {
		fs.Func(name, fmt.Sprintf("%s (default %s).", usage, def), func(s string) error { *p = corev1.ResourceName(s); return nil })
	}
	resFlag(&c.HAMi.MemoryResource, "hami-memory-resource", d.HAMi.MemoryResource, "HAMi per-GPU memory limit resource, MiB")
	resFlag(&c.HAMi.CoresResource, "hami-cores-resource", d.HAMi.CoresResource, "HAMi per-GPU compute limit resource, percent")
	resFlag(&c.HAMi.MemoryPercentageResource, "hami-memory-percentage-resource", d.HAMi.MemoryPercentageResource, "HAMi percent memory resource, removed when memory is written")
	fs.StringVar(&c.KAI.Mode, "kai-mode", d.KAI.Mode, "KAI annotation to write: gpu-memory (MiB) or gpu-fraction (memory / --gpu-memory).")
	fs.StringVar(&c.KAI.SchedulerName, "kai-scheduler-name", d.KAI.SchedulerName, "spec.schedulerName written by the kai and kai-nvfractions backends.")
	fs.StringVar(&c.KAI.MemoryAnnotation, "kai-memory-annotation", d.KAI.MemoryAnnotation, "KAI memory annotation key (MiB).")
	fs.StringVar(&c.KAI.FractionAnnotation, "kai-fraction-annotation", d.KAI.FractionAnnotation, "KAI fraction annotation key (0 < x < 1).")
	fs.StringVar(&c.KAI.ContainerNameAnnotation, "kai-container-name-annotation", d.KAI.ContainerNameAnnotation, "KAI annotation naming the container that gets the fraction.")
	fs.StringVar(&c.KAI.NumDevicesAnnotation, "kai-num-devices-annotation", d.KAI.NumDevicesAnnotation, "KAI multi-device fraction annotation; pods asking for more than 1 device are left unchanged.")
	fs.StringVar(&c.KAI.QueueLabel, "kai-queue-label", d.KAI.QueueLabel, "Label naming a pod's KAI queue.")
	fs.StringVar(&c.KAI.Queue, "kai-queue", "", "Queue written into --kai-queue-label of pods that have none (empty: leave pods as they are).")
	fs.Func("kai-reserved-memory", "Memory of each GPU reserved for the driver and CUDA contexts (quantity, bytes): the KAI gpu-fraction is memory divided by --gpu-memory minus this, and no larger gpu-memory is written (default 0).", quantityFlag(&c.KAI.ReservedMemoryBytes, false))
	fs.StringVar(&c.NVFractions.Prefix, "nvfractions-prefix", d.NVFractions.Prefix, "Prefix of the kai-nvfractions keys <prefix><container>.gpu-memory.request/.limit.")
	fs.StringVar(&c.NVFractions.Limit, "nvfractions-limit", d.NVFractions.Limit, "kai-nvfractions limit: upper-bound (recommendation upper bound, capped to one GPU) or target (same as the request).")
	fs.StringVar(&c.MPS.ThreadPercentageEnv, "mps-thread-percentage-env", d.MPS.ThreadPercentageEnv, "MPS compute limit variable (percent).")
	fs.StringVar(&c.MPS.PinnedMemoryEnv, "mps-pinned-memory-env", d.MPS.PinnedMemoryEnv, "MPS memory limit variable (<device>=<MiB>M).")
	fs.StringVar(&c.MPS.Device, "mps-device", d.MPS.Device, "Device index of the MPS memory limit as the client sees it.")
	fs.Func("mps-replica-memory", "Memory share the device plugin gives each MPS replica (quantity, bytes); no larger MPS limit is written (default 0: unknown).", quantityFlag(&c.MPS.ReplicaMemoryBytes, false))
	fs.StringVar(&c.Annotations.MemoryKey, "annotation-memory-key", d.Annotations.MemoryKey, "Pod total memory key of the annotations backend.")
	fs.StringVar(&c.Annotations.ComputeKey, "annotation-compute-key", d.Annotations.ComputeKey, "Pod total compute key of the annotations backend.")
	fs.StringVar(&c.Annotations.ContainerPrefix, "annotation-container-prefix", d.Annotations.ContainerPrefix, "Prefix of the per-container keys of the annotations backend.")
}

func quantityFlag(p *int64, positive bool) func(string) error {
	return func(s string) error {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return err
		}
		if q.Sign() < 0 || (positive && q.Sign() == 0) {
			return fmt.Errorf("%q: want a positive quantity", s)
		}
		*p = q.Value()
		return nil
	}
}

// parseOverheads parses "hami=256Mi,mps=0".
func parseOverheads(s string) (map[gpufracv1.BackendType]int64, error) {
	m := map[gpufracv1.BackendType]int64{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want backend=quantity", part)
		}
		b := gpufracv1.BackendType(strings.TrimSpace(k))
		if !slices.Contains(BackendTypes, b) {
			names := make([]string, len(BackendTypes))
			for i, t := range BackendTypes {
				names[i] = string(t)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("%q: unknown backend, want one of %s", k, strings.Join(names, ", "))
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s: overhead must not be negative", k)
		}
		m[b] = q.Value()
	}
	return m, nil
}

func ptrTo[T any](v T) *T { return &v }

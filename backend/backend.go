// Package backend holds gpufrac's backends: the sharing mechanisms a GPU fraction is
// written through (hami, kai, kai-nvfractions, mps, annotations, dra, nvidia-timeslicing,
// nvidia-mps), one file per backend.
// Each backend is a two-way codec (Codec): Apply writes per-container targets into a pod
// (the admission webhook calls it on pod creation) and Read reads back what a pod holds
// (the updater compares it with the recommendation). Reading back what Apply wrote
// returns the targets after the backend's documented rounding (whole MiB, whole percent,
// KAI's hundredths of a GPU); the device-plugin backends, which place a pod on one
// replica of a shared GPU, read back that replica's share.
//
// Config holds the settings every backend reads (GPU resource names, the memory of one
// GPU, the per-backend memory overheads) and each backend's own section; the webhook and
// the updater share it through the same flags (Config.AddFlags).
//
// Adding a backend: one file implementing Codec, one line in registry (backend.go), and
// its BackendType in api/v1alpha1.
package backend

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// MiB is one mebibyte, bytes.
const MiB = 1 << 20

// Target is what the webhook asks a backend to write into one container. The webhook
// fills the inputs; the backend records what it actually wrote.
type Target struct {
	// Container is the container's name.
	Container string
	// Init is true when the container is in pod.spec.initContainers (a native sidecar),
	// false for pod.spec.containers.
	Init bool
	// Index is the container's position in pod.spec.containers (pod.spec.initContainers
	// when Init).
	Index int

	// HasMemory is true when memory is controlled and recommended; MemoryBytes is then
	// the recommendation's target plus the memory overheads, bytes, in (0, one GPU].
	HasMemory bool
	// MemoryBytes is the memory to write before the backend's rounding, bytes.
	MemoryBytes int64
	// UpperMemoryBytes is the recommendation's upper bound plus the overheads, bytes, or 0
	// when the recommendation has none. Only kai-nvfractions reads it (for its limit).
	UpperMemoryBytes int64
	// PeakMemoryBytes is the recommendation's observed memory peak (contract.Target.RequestPeakMemory:
	// with the young-workload margin while the workload is young) plus the overheads,
	// bytes, or 0 when unknown or when a rollback floor raised the memory. Only
	// kai-nvfractions reads it (for its request, NVFractionsRequestObservedPeak).
	PeakMemoryBytes int64
	// HasCompute is true when compute is controlled and recommended; ComputeMilli is then
	// the target in thousandths of one GPU, 0–1000.
	HasCompute bool
	// ComputeMilli is the compute to write before the backend's rounding, thousandths
	// of one GPU.
	ComputeMilli int64

	// ComputeRequestMilli is the compute a time-sliced container reserves for placement
	// with no limit (contract.Target.ComputeRequest), thousandths of one GPU, or 0 when
	// none (HasCompute containers hold ComputeMilli instead). Only annotations writes it
	// (gpufrac.io/gpu-compute-request); the other backends have no placement-only
	// compute field.
	ComputeRequestMilli int64

	// SharingMode is the container's recommended sharing mode ("" when the
	// recommendation names none). Only dra reads it (MPS or TimeSlicing GpuConfig).
	SharingMode gpufracv1.SharingMode

	// Recommended are the recommendation's target quantities as read (before overheads),
	// for the applied record. Nil for resources that are not written.
	RecommendedMemory, RecommendedCompute *resource.Quantity

	// WrittenMemoryBytes is the memory the backend wrote, bytes, or 0 when it wrote none.
	WrittenMemoryBytes int64
	// WrittenMemoryRequestBytes is the placement-only memory request the backend wrote
	// below WrittenMemoryBytes (the annotations backend's gpufrac.io/gpu-memory-request),
	// bytes, or 0 when it wrote none (the written memory is then what the pod is
	// placed by).
	WrittenMemoryRequestBytes int64
	// WrittenComputeMilli is the compute the backend wrote, thousandths of one GPU, or -1
	// when it wrote none.
	WrittenComputeMilli int64
	// WrittenComputeRequestMilli is the placement-only compute request the backend wrote
	// for a time-sliced container (the annotations backend's
	// gpufrac.io/gpu-compute-request, from ComputeRequestMilli), thousandths of one GPU,
	// or 0 when it wrote none.
	WrittenComputeRequestMilli int64
	// CappedNote, when not empty, says that less memory than recommended was written and
	// why (for example the MPS replica share); the webhook warns the pod's creator and
	// records it as a MemoryCapped event on the autoscaler.
	CappedNote string
}

func (t *Target) wroteMemory(bytes int64)  { t.WrittenMemoryBytes = bytes }
func (t *Target) wroteCompute(milli int64) { t.WrittenComputeMilli = milli }

// Wrote reports whether the backend wrote memory, compute or a compute request for the
// container.
func (t *Target) Wrote() bool {
	return t.WrittenMemoryBytes > 0 || t.WrittenComputeMilli >= 0 || t.WrittenComputeRequestMilli > 0
}

// container returns the container of pod that t addresses.
func (t *Target) container(pod *corev1.Pod) *corev1.Container {
	if t.Init {
		return &pod.Spec.InitContainers[t.Index]
	}
	return &pod.Spec.Containers[t.Index]
}

// Allocation is what a backend's fields give one container. A negative value was not
// found (the backend does not write it, or nothing was written).
type Allocation struct {
	// Memory is GPU memory, bytes; -1 when not found.
	Memory int64
	// Compute is thousandths of one GPU; -1 when not found.
	Compute int64
}

// none is an Allocation with nothing found.
var none = Allocation{Memory: -1, Compute: -1}

// found reports whether a holds a value.
func (a Allocation) found() bool { return a.Memory >= 0 || a.Compute >= 0 }

// Codec writes GPU fractions into a pod through one sharing mechanism and reads them
// back. One file per backend implements it.
type Codec interface {
	// Type is the spec.backend.type this backend serves.
	Type() gpufracv1.BackendType
	// Apply writes the targets into pod, a copy the caller owns, and records in each
	// target what it wrote. Warnings describe adjustments (a cap, a container without a
	// GPU that was skipped); they are returned to the client as admission warnings. An
	// error (an *UnsafeError) means the pod cannot be patched safely; the caller then
	// discards pod and admits the original unchanged.
	Apply(pod *corev1.Pod, targets []*Target) (warnings []string, err error)
	// Read returns, per container name, the values this backend's fields hold in pod
	// (before subtracting memory overheads): the written values after the backend's
	// rounding. Containers where no field is found are absent.
	Read(pod *corev1.Pod) map[string]Allocation
	// WritesCompute reports whether the backend writes a compute limit (KAI fractions
	// are memory fractions: kai and kai-nvfractions write none).
	WritesCompute() bool
}

// DryRunner is implemented by backends whose Apply writes objects besides the pod (dra
// writes ResourceClaimTemplates). DryRun returns the backend for a dry-run admission
// request: its writes are server-side dry runs.
type DryRunner interface {
	DryRun() Codec
}

// AutoscalerScoped is implemented by backends whose Apply depends on the autoscaler in
// charge of the pod (nvidia-timeslicing and nvidia-mps place the pod on the plan of the
// GPUSharingPolicy that selects it). ForAutoscaler returns the backend bound to gfa; the
// unbound one only reads.
type AutoscalerScoped interface {
	ForAutoscaler(gfa *gpufracv1.GPUFractionAutoscaler) Codec
}

// registry lists every backend's constructor, in documentation order.
var registry = []func(Config) Codec{
	func(c Config) Codec { return &hamiBackend{cfg: c} },
	func(c Config) Codec { return &kaiBackend{cfg: c} },
	func(c Config) Codec { return &nvFractionsBackend{cfg: c} },
	func(c Config) Codec { return &mpsBackend{cfg: c} },
	func(c Config) Codec { return &annotationsBackend{cfg: c} },
	func(c Config) Codec { return &draBackend{cfg: c} },
	newNVIDIATimeSlicing,
	newNVIDIAMPS,
}

// Types lists every backend type, in documentation order.
var Types = func() []gpufracv1.BackendType {
	out := make([]gpufracv1.BackendType, len(registry))
	for i, f := range registry {
		out[i] = f(Config{}).Type()
	}
	return out
}()

// New returns one backend per BackendType, configured by cfg (with defaults).
func New(cfg Config) map[gpufracv1.BackendType]Codec {
	cfg = cfg.WithDefaults()
	out := make(map[gpufracv1.BackendType]Codec, len(registry))
	for _, f := range registry {
		b := f(cfg)
		out[b.Type()] = b
	}
	return out
}

// UnsafeError says why a pod cannot be patched safely. Reason is a short constant used
// as a metric label; Message is for people.
type UnsafeError struct {
	// Reason is one of the Unsafe* constants.
	Reason string
	// Message says which container or annotation is the problem, and why.
	Message string
}

// Error returns Message.
func (e *UnsafeError) Error() string { return e.Message }

// Reasons of UnsafeError (also the "reason" label of gpufrac_admission_skipped_total).
const (
	// UnsafeMultiGPU: a target container asks for more than one whole GPU.
	UnsafeMultiGPU = "multi-gpu-container"
	// UnsafeMultiContainer: a one-container backend (kai, kai-nvfractions) got several.
	UnsafeMultiContainer = "one-container-only"
	// UnsafeNeedsMemory: a memory-only backend got no memory target.
	UnsafeNeedsMemory = "memory-not-controlled"
	// UnsafeWholeGPU: the fraction would be a whole GPU or more.
	UnsafeWholeGPU = "whole-gpu"
	// UnsafeWholeGPUNeighbour: another container asks for whole GPUs next to a KAI fraction.
	UnsafeWholeGPUNeighbour = "whole-gpu-neighbour"
	// UnsafeSchedulerConflict: the pod names another scheduler than KAI's.
	UnsafeSchedulerConflict = "scheduler-conflict"
	// UnsafeMultiDevice: the pod asks KAI for fractions of several devices.
	UnsafeMultiDevice = "multi-device-fraction"
	// UnsafeAnnotationKey: a key to write is not a valid annotation key.
	UnsafeAnnotationKey = "invalid-annotation-key"
	// UnsafeInvalidValue: a recommended value is negative, out of range or not finite.
	UnsafeInvalidValue = "invalid-recommendation"
	// UnsafeInitContainerGPU: an init container asks for whole GPUs next to a KAI fraction.
	UnsafeInitContainerGPU = "init-container-gpu"
	// UnsafeInvalidLabel: a label or nodeSelector value to write (the configured KAI
	// queue, a sharing plan's config name) is not a valid label value.
	UnsafeInvalidLabel = "invalid-label"
	// UnsafeRecommendationSize: the recommended memory, or the observed peak memory,
	// exceeds one GPU (Config.GPUMemoryBytes).
	UnsafeRecommendationSize = "exceeds-gpu"
	// UnsafeAnnotationsSize: the pod's annotations with those gpufrac writes would exceed
	// the API server's total (apimachinery's TotalAnnotationSizeLimitB, 256 kB), so the
	// patched pod would be rejected.
	UnsafeAnnotationsSize = "annotations-too-large"
	// UnsafeNodeBound: the pod names its node at creation (spec.nodeName), so no
	// scheduler places it, and the backend's fraction needs one (SchedulerPlaced).
	UnsafeNodeBound = "node-bound"
	// UnsafeNoGPU: the container a one-container backend (kai, kai-nvfractions) would
	// give the fraction to asks for no GPU (nvidia.com/gpu: 0, or none and no KAI
	// fraction of the pod names it): the fraction would give it one.
	UnsafeNoGPU = "no-gpu"
)

// SchedulerPlaced reports whether a scheduler must place a pod for backend bt's fraction
// to hold: KAI's (kai, kai-nvfractions), HAMi's scheduler (hami), the scheduler's claim
// allocation (dra), a sharing plan's node pool (nvidia-timeslicing, nvidia-mps: a
// nodeSelector the kubelet rejects elsewhere). The mps backend's limits act wherever the
// pod runs; the annotations backend writes metadata only.
func SchedulerPlaced(bt gpufracv1.BackendType) bool {
	switch bt {
	case gpufracv1.BackendMPS, gpufracv1.BackendAnnotations:
		return false
	}
	return true
}

// Unsafe returns an UnsafeError with reason and a formatted message.
func Unsafe(reason, format string, args ...any) *UnsafeError {
	return &UnsafeError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// LargestFraction is the most memory, bytes, that backend bt writes as a fraction of one
// GPU under cfg (Target.MemoryBytes: the target plus overhead, after the webhook's cap
// at one GPU). A pod that needs more is admitted unchanged, with the whole GPU it asks
// for (UnsafeWholeGPU): KAI's gpu-memory must stay below the GPU's usable MiB
// (UsableGPUMemoryBytes) and its gpu-fraction below 1 of the usable memory, in
// hundredths rounded up; NVFractions' gpu-memory below one GPU's MiB. The other
// backends write up to one GPU (GPUMemoryBytes). The updater uses it so that it never
// replaces a pod at a whole GPU for a fraction the webhook would not write.
func LargestFraction(bt gpufracv1.BackendType, cfg Config) int64 {
	switch bt {
	case gpufracv1.BackendKAI:
		usable := cfg.UsableGPUMemoryBytes()
		if cfg.KAI.Mode == KAIModeFraction {
			return usable * 99 / 100 // ceil(m × 100 / usable) ≤ 99
		}
		return (usable/MiB - 1) * MiB // ceilMiB(m) < usable MiB
	case gpufracv1.BackendKAINVFractions:
		return (cfg.GPUMemoryBytes/MiB - 1) * MiB // ceilMiB(m) < GPU MiB
	}
	return cfg.GPUMemoryBytes
}

// ceilMiB rounds bytes up to whole MiB (at least 1).
func ceilMiB(bytes int64) int64 {
	m := (bytes + MiB - 1) / MiB
	if m < 1 {
		m = 1
	}
	return m
}

// ceilPercent rounds thousandths of a GPU up to a whole percent in 1–100.
func ceilPercent(milli int64) int64 {
	p := (milli + 9) / 10
	return min(max(p, 1), 100)
}

// GPUCount returns the container's count of res (e.g. nvidia.com/gpu), from its limits
// or else its requests; 0 when it asks for none.
func GPUCount(c *corev1.Container, res corev1.ResourceName) int64 {
	if q, ok := c.Resources.Limits[res]; ok {
		return q.Value()
	}
	if q, ok := c.Resources.Requests[res]; ok {
		return q.Value()
	}
	return 0
}

// IsGPUContainer reports whether one of the container's request or limit names starts
// with prefix (Config.GPUResourcePrefix).
func IsGPUContainer(c *corev1.Container, prefix string) bool {
	for n := range c.Resources.Limits {
		if strings.HasPrefix(string(n), prefix) {
			return true
		}
	}
	for n := range c.Resources.Requests {
		if strings.HasPrefix(string(n), prefix) {
			return true
		}
	}
	return false
}

// containers returns the containers a backend writes and reads: the regular containers
// and the native sidecars (init containers with restartPolicy Always, which run for the
// pod's life), in start order (workload.Containers). Init containers that run to
// completion are never written.
func containers(pod *corev1.Pod) []workload.PodContainer {
	var out []workload.PodContainer
	for _, c := range workload.Containers(pod) {
		if c.Type != gpufracv1.ContainerTypeInit {
			out = append(out, c)
		}
	}
	return out
}

// readEach reads every container of containers(pod) with read, which sets what it
// finds in a (nothing found to start with), and keeps those where a value was found.
func readEach(pod *corev1.Pod, read func(c workload.PodContainer, a *Allocation)) map[string]Allocation {
	out := map[string]Allocation{}
	for _, c := range containers(pod) {
		a := none
		if read(c, &a); a.found() {
			out[c.Container.Name] = a
		}
	}
	return out
}

// AsksGPU reports whether one of the container's request or limit names starts with
// prefix (Config.GPUResourcePrefix) with a quantity above zero: a container whose only
// such resources are 0 (nvidia.com/gpu: 0, a chart's way to turn its GPU off) asks for
// none, though IsGPUContainer, the webhook's match condition, matches it.
func AsksGPU(c *corev1.Container, prefix string) bool {
	for _, l := range [...]corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for n, q := range l {
			if strings.HasPrefix(string(n), prefix) && q.Sign() > 0 {
				return true
			}
		}
	}
	return false
}

// perGPUContainers is how a backend whose limits are per GPU, while a recommendation is
// per container (hami, mps, the device plugin's sharing), walks the targets' containers.
type perGPUContainers struct {
	// res is the GPU resource counted (Config.GPUResource).
	res corev1.ResourceName
	// prefix, when set, makes a container a GPU container when one of its resource names
	// starts with it (IsGPUContainer); when empty, when it asks for res.
	prefix string
	// skipped ends the warning for a container without a GPU, which is left alone.
	skipped string
	// multiGPU ends the UnsafeMultiGPU message for a container asking for more than one res.
	multiGPU string
}

// each calls write with every target and its container in pod that has a GPU, and
// returns the warnings: one for each container without a GPU (skipped) and those write
// returns ("" none). A container asking for more than one res makes the pod unsafe
// (UnsafeMultiGPU): each returns that error, leaving the containers before it written.
func (g perGPUContainers) each(pod *corev1.Pod, targets []*Target, write func(t *Target, c *corev1.Container) string) ([]string, error) {
	var warnings []string
	for _, t := range targets {
		c := t.container(pod)
		if !g.hasGPU(c) {
			want := string(g.res)
			if g.prefix != "" {
				want = g.prefix + "* resource"
			}
			warnings = append(warnings, fmt.Sprintf("gpufrac: container %s asks for no %s; %s", c.Name, want, g.skipped))
			continue
		}
		if n := GPUCount(c, g.res); n > 1 {
			return nil, Unsafe(UnsafeMultiGPU, "container %s asks for %d %s; %s", c.Name, n, g.res, g.multiGPU)
		}
		if w := write(t, c); w != "" {
			warnings = append(warnings, w)
		}
	}
	return warnings, nil
}

// hasGPU reports whether c has a GPU as g counts it.
func (g perGPUContainers) hasGPU(c *corev1.Container) bool {
	if g.prefix != "" {
		return AsksGPU(c, g.prefix)
	}
	return GPUCount(c, g.res) != 0
}

// oneGPUOnly ends the UnsafeMultiGPU message of the backends that write fractions.
const oneGPUOnly = "gpufrac writes fractions of one GPU only"

// SetResource writes v into both the limits and the requests of the container (extended
// resources must have equal requests and limits).
func SetResource(c *corev1.Container, name corev1.ResourceName, v int64) {
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Limits[name] = *resource.NewQuantity(v, resource.DecimalSI)
	c.Resources.Requests[name] = *resource.NewQuantity(v, resource.DecimalSI)
}

// RemoveResource deletes name from the container's limits and requests.
func RemoveResource(c *corev1.Container, name corev1.ResourceName) {
	delete(c.Resources.Limits, name)
	delete(c.Resources.Requests, name)
}

// SetEnv sets a plain value for name in the container's env, replacing every entry of
// the same name in place (valueFrom included) or appending one. Every entry, not the
// first: the API server accepts a name defined twice (with a warning) and the kubelet
// gives the process the last definition.
func SetEnv(c *corev1.Container, name, value string) {
	found := false
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i] = corev1.EnvVar{Name: name, Value: value}
			found = true
		}
	}
	if !found {
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
	}
}

// SetAnnotation sets annotation k to v on pod, creating the map when needed.
func SetAnnotation(pod *corev1.Pod, k, v string) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[k] = v
}

// checkAnnotationKey returns an UnsafeError when key is not a valid annotation key.
func checkAnnotationKey(key string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return Unsafe(UnsafeAnnotationKey, "annotation key %q is invalid: %s", key, strings.Join(errs, "; "))
	}
	return nil
}

// MilliQuantity renders thousandths of a GPU as a quantity ("350m", "1").
func MilliQuantity(milli int64) *resource.Quantity {
	return resource.NewMilliQuantity(milli, resource.DecimalSI)
}

// mibQuantity renders whole MiB as a binary quantity ("4Gi", "4097Mi").
func mibQuantity(mib int64) *resource.Quantity {
	return resource.NewQuantity(mib*MiB, resource.BinarySI)
}

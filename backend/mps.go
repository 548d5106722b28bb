package backend

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// mpsBackend writes CUDA MPS client limits as environment variables of each GPU
// container: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (compute, percent 1–100, rounded up) and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<device>=<MiB>M", rounded up). Both act per client
// process, when the process starts, and can only tighten what the MPS control daemon
// already sets as defaults (for example the equal per-replica share the NVIDIA device
// plugin gives with MPS sharing). So when the share is known (MPSConfig.
// ReplicaMemoryBytes) no memory limit above it is written: it is capped with a warning
// to the pod's creator and a MemoryCapped event on the autoscaler (Target.CappedNote).
// Every entry of the same name (valueFrom included) is replaced in place: the kubelet
// gives the process the last definition of a name defined twice. A container with
// a recommendation but no GPU resource is skipped with a warning; one with more than one
// GPU makes the pod unsafe.
type mpsBackend struct{ cfg Config }

// Type implements Codec.
func (b *mpsBackend) Type() gpufracv1.BackendType { return gpufracv1.BackendMPS }

// Apply implements Codec.
func (b *mpsBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	shareMiB := b.cfg.MPS.ReplicaMemoryBytes / MiB
	g := perGPUContainers{res: b.cfg.GPUResource, prefix: b.cfg.GPUResourcePrefix, skipped: "mps limits not written for it", multiGPU: oneGPUOnly}
	return g.each(pod, targets, func(t *Target, c *corev1.Container) string {
		if t.HasCompute {
			p := ceilPercent(t.ComputeMilli)
			SetEnv(c, b.cfg.MPS.ThreadPercentageEnv, strconv.FormatInt(p, 10))
			t.wroteCompute(p * 10)
		}
		if !t.HasMemory {
			return ""
		}
		mib, note := ceilMiB(t.MemoryBytes), ""
		if shareMiB > 0 && mib > shareMiB {
			note = fmt.Sprintf("gpufrac: container %s: recommended %dMiB exceeds the MPS replica share %dMiB; limit capped to the share", c.Name, mib, shareMiB)
			t.CappedNote, mib = note, shareMiB
		}
		SetEnv(c, b.cfg.MPS.PinnedMemoryEnv, fmt.Sprintf("%s=%dM", b.cfg.MPS.Device, mib))
		t.wroteMemory(mib * MiB)
		return note
	})
}

// WritesCompute implements Codec: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
func (b *mpsBackend) WritesCompute() bool { return true }

// Read implements Codec: PinnedMemoryEnv ("<device>=<MiB>M" as Apply writes it, or in
// any unit the MPS client takes, parsePinnedLimit; possibly several devices, the
// configured Device counts) and ThreadPercentageEnv (percent).
func (b *mpsBackend) Read(pod *corev1.Pod) map[string]Allocation {
	return readEach(pod, func(pc workload.PodContainer, a *Allocation) {
		c := pc.Container
		for _, e := range c.Env {
			switch e.Name {
			case b.cfg.MPS.PinnedMemoryEnv:
				for part := range strings.SplitSeq(e.Value, ",") {
					dev, v, ok := strings.Cut(strings.TrimSpace(part), "=")
					if !ok || dev != b.cfg.MPS.Device {
						continue
					}
					if n, ok := parsePinnedLimit(v); ok {
						a.Memory = n
					}
				}
			case b.cfg.MPS.ThreadPercentageEnv:
				if n, err := strconv.ParseInt(strings.TrimSpace(e.Value), 10, 64); err == nil && n >= 0 {
					a.Compute = n * 10
				}
			}
		}
	})
}

// pinnedLimitUnits are the units of a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value, binary
// multiples ("0=1G" is 1 GiB), by their lower-case letter.
var pinnedLimitUnits = map[string]int64{"k": 1 << 10, "m": MiB, "g": 1 << 30, "t": 1 << 40}

// parsePinnedLimit parses the limit of one CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry, a
// whole number with a unit K, M, G or T (any case, B optional: "16G", "512MB",
// "4096M"), or without one in MiB, and returns bytes; false when v is no such value.
func parsePinnedLimit(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	n, err := strconv.ParseInt(v[:end], 10, 64)
	if err != nil {
		return 0, false
	}
	unit := strings.ToLower(v[end:])
	if unit == "" {
		unit = "m"
	}
	scale, ok := pinnedLimitUnits[strings.TrimSuffix(unit, "b")]
	if !ok || n > math.MaxInt64/scale {
		return 0, false
	}
	return n * scale, true
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

func (m *MPSConfig) withDefaults() {
	defaultString(&m.ThreadPercentageEnv, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
	defaultString(&m.PinnedMemoryEnv, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
	defaultString(&m.Device, "0")
}

func (m MPSConfig) validate() []error {
	if m.ReplicaMemoryBytes < 0 {
		return []error{errors.New("mps-replica-memory must not be negative")}
	}
	return nil
}

func (m *MPSConfig) addFlags(fs *flag.FlagSet, d MPSConfig) {
	fs.StringVar(&m.ThreadPercentageEnv, "mps-thread-percentage-env", d.ThreadPercentageEnv, "MPS compute limit variable (percent).")
	fs.StringVar(&m.PinnedMemoryEnv, "mps-pinned-memory-env", d.PinnedMemoryEnv, "MPS memory limit variable (<device>=<MiB>M).")
	fs.StringVar(&m.Device, "mps-device", d.Device, "Device index of the MPS memory limit as the client sees it.")
	fs.Func("mps-replica-memory", "Memory share the device plugin gives each MPS replica (quantity, bytes); no larger MPS limit is written (default 0: unknown).", quantityFlag(&m.ReplicaMemoryBytes))
}

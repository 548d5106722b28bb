package workload

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// HAMiAllocatedAnnotation is the pod annotation in which HAMi's scheduler records the
// devices it allocated to the pod (Project-HAMi/HAMi, pkg/device/nvidia):
// "uuid,type,usedmem(MiB),usedcores:" per device, ";" after each container.
const HAMiAllocatedAnnotation = "hami.io/vgpu-devices-allocated"

// HAMiDevice is one device entry of HAMiAllocatedAnnotation.
type HAMiDevice struct {
	// UUID is the device's UUID.
	UUID string
	// MemoryMiB is the device memory allocated to the container, MiB (the entry's
	// usedmem); -1 when the entry has none or it is not a whole number of MiB ≥ 0.
	MemoryMiB int64
	// CoresPercent is the device's compute allocated to the container, percent of the
	// GPU (the entry's usedcores, HAMi's nvidia.com/gpucores); -1 when the entry has
	// none or it is not a whole number in 0–100.
	CoresPercent int64
}

// HAMiDevices returns the device entries of the pod's HAMiAllocatedAnnotation in order,
// one per container and device (a device two containers share stands twice); an entry
// without a UUID is passed over. Nil when there is none.
func HAMiDevices(pod *corev1.Pod) []HAMiDevice {
	var out []HAMiDevice
	for ctr := range strings.SplitSeq(pod.Annotations[HAMiAllocatedAnnotation], ";") {
		for dev := range strings.SplitSeq(ctr, ":") {
			f := strings.Split(strings.TrimSpace(dev), ",")
			if len(f) < 2 || f[0] == "" {
				continue
			}
			d := HAMiDevice{UUID: f[0], MemoryMiB: -1, CoresPercent: -1}
			if len(f) >= 3 {
				if mem, err := strconv.ParseInt(f[2], 10, 64); err == nil && mem >= 0 {
					d.MemoryMiB = mem
				}
			}
			if len(f) >= 4 {
				if c, err := strconv.ParseInt(f[3], 10, 64); err == nil && c >= 0 && c <= 100 {
					d.CoresPercent = c
				}
			}
			out = append(out, d)
		}
	}
	return out
}

// AllocatedGPUs returns the UUIDs of the GPUs a sharing backend allocated to the pod, as
// its annotation records them (HAMiAllocatedAnnotation), in order and without repeats,
// and the annotation's name; nil and "" when no annotation says.
func AllocatedGPUs(pod *corev1.Pod) ([]string, string) {
	var out []string
	for _, d := range HAMiDevices(pod) {
		if !slices.Contains(out, d.UUID) {
			out = append(out, d.UUID)
		}
	}
	if len(out) == 0 {
		return nil, ""
	}
	return out, HAMiAllocatedAnnotation
}

package workload

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// HAMiAllocatedAnnotation is the pod annotation in which HAMi's scheduler records the
// devices it allocated to the pod (Project-HAMi/HAMi, pkg/device/nvidia):
// "uuid,type,usedmem(MiB),usedcores:" per device, ";" after each container.
const HAMiAllocatedAnnotation = "hami.io/vgpu-devices-allocated"

// AllocatedGPUs returns the UUIDs of the GPUs a sharing backend allocated to the pod, as
// its annotation records them (HAMiAllocatedAnnotation), in order and without repeats,
// and the annotation's name; nil and "" when no annotation says.
func AllocatedGPUs(pod *corev1.Pod) ([]string, string) {
	s := pod.Annotations[HAMiAllocatedAnnotation]
	var out []string
	seen := map[string]bool{}
	for ctr := range strings.SplitSeq(s, ";") {
		for dev := range strings.SplitSeq(ctr, ":") {
			uuid, _, ok := strings.Cut(strings.TrimSpace(dev), ",")
			if !ok || uuid == "" || seen[uuid] {
				continue
			}
			seen[uuid] = true
			out = append(out, uuid)
		}
	}
	if len(out) == 0 {
		return nil, ""
	}
	return out, HAMiAllocatedAnnotation
}

package workload

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// GPUResourcePrefix marks a container as a GPU container when one of its request or limit
// names starts with it: nvidia.com/gpu, HAMi's nvidia.com/gpumem and nvidia.com/gpucores,
// nvidia.com/mig-1g.10gb and the like (the admission webhook's default too).
const GPUResourcePrefix = "nvidia.com/"

// KAIContainerNameAnnotation is KAI's pod annotation naming the container that receives a
// GPU fraction when it is not the first (admission's default for
// --kai-container-name-annotation).
const KAIContainerNameAnnotation = "gpu-fraction-container-name"

// kaiFractionAnnotations are KAI's pod annotations that ask for a GPU fraction: the
// fraction goes to the first container unless KAIContainerNameAnnotation names another.
var kaiFractionAnnotations = []string{"gpu-fraction", "gpu-memory"}

// GPUContainers returns the containers of a pod that use its GPU, for attributing usage
// that an exporter reports per pod without a container label (KAI's gpu_fractioning_*
// metrics): the regular containers and native sidecars that request or limit a resource
// starting with GPUResourcePrefix; else, for a KAI fraction (pod annotation
// gpu-fraction or gpu-memory), the container KAIContainerNameAnnotation names (KAI
// looks in spec.containers, then spec.initContainers), or the first regular one; else
// the pod's only regular container or sidecar. Init containers that run to completion are never chosen:
// the pod's usage over its life is its running containers'. Several names mean the
// attribution is ambiguous; none means the pod shows no GPU container.
func GPUContainers(pod *corev1.Pod) []string {
	var out, running []string
	for _, c := range Containers(pod) {
		if c.Type == gpufracv1.ContainerTypeInit {
			continue
		}
		running = append(running, c.Container.Name)
		if requestsPrefix(c.Container, GPUResourcePrefix) {
			out = append(out, c.Container.Name)
		}
	}
	if len(out) > 0 || len(pod.Spec.Containers) == 0 {
		return out
	}
	for _, a := range kaiFractionAnnotations {
		if _, ok := pod.Annotations[a]; !ok {
			continue
		}
		if name := pod.Annotations[KAIContainerNameAnnotation]; name != "" {
			if _, ok := ContainerTypeOf(pod, name); ok {
				return []string{name}
			}
		}
		return []string{pod.Spec.Containers[0].Name}
	}
	if len(running) == 1 {
		return running
	}
	return nil
}

func requestsPrefix(c *corev1.Container, prefix string) bool {
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for n := range l {
			if strings.HasPrefix(string(n), prefix) {
				return true
			}
		}
	}
	return false
}

package workload

import (
	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// PodContainer is one container of a pod spec and where it sits.
type PodContainer struct {
	// Container is the container in the pod's spec (not a copy).
	Container *corev1.Container
	// Type is Regular for spec.containers, Sidecar for an init container with
	// restartPolicy Always, Init for any other init container.
	Type gpufracv1.ContainerType
	// Index is the position in spec.containers (Regular) or spec.initContainers
	// (Sidecar, Init).
	Index int
}

// InitList reports whether the container sits in spec.initContainers (Sidecar or Init).
func (c PodContainer) InitList() bool { return c.Type != gpufracv1.ContainerTypeRegular }

// IsSidecar reports whether an init container is a native sidecar: restartPolicy
// Always, so it keeps running next to the regular containers.
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// Containers lists a pod's containers in the order the kubelet starts them: the init
// containers (native sidecars among them) in spec order, then the regular containers.
// Ephemeral containers are not listed: they get no resources.
func Containers(pod *corev1.Pod) []PodContainer {
	out := make([]PodContainer, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		t := gpufracv1.ContainerTypeInit
		if IsSidecar(c) {
			t = gpufracv1.ContainerTypeSidecar
		}
		out = append(out, PodContainer{Container: c, Type: t, Index: i})
	}
	for i := range pod.Spec.Containers {
		out = append(out, PodContainer{Container: &pod.Spec.Containers[i], Type: gpufracv1.ContainerTypeRegular, Index: i})
	}
	return out
}

// ContainerTypeOf returns where the named container sits in the pod's spec, and false
// when the pod has no container of that name.
func ContainerTypeOf(pod *corev1.Pod, name string) (gpufracv1.ContainerType, bool) {
	for _, c := range Containers(pod) {
		if c.Container.Name == name {
			return c.Type, true
		}
	}
	return "", false
}

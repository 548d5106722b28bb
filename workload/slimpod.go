package workload

import (
	corev1 "k8s.io/api/core/v1"
)

// SlimPod is an informer transform (controller-runtime cache.ByObject.Transform,
// client-go SetTransform) for the recommender's pod cache: it returns a pod that keeps
// only what the recommender and this package read, and passes any other object through
// unchanged. It never returns an error.
//
// Kept: the object metadata except managedFields (names, UID, resourceVersion,
// labels, annotations — the sharing backends' and gpufrac's applied record —, owner
// references, creation and deletion times); of every init and regular container its
// name, resources and restartPolicy (Containers, GPUContainers, the start order of the
// pod's totals); the phase; and of every container status its name, state, last
// termination state, restart count, ready and started (SampleInLife, LifeEnd).
// Everything else (images, commands, env, probes, volumes, tolerations, affinity,
// conditions, IPs, …) is dropped: measured by make bench-scale, the cached pods were the
// largest part of the recommender's heap at 10,000 pods (docs/benchmarks.md).
//
// TestSlimPodKeepsWhatIsRead checks the readers' answers on a pod with every field
// set; a new reader of a pod field must be added there and here.
func SlimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields = nil
	out.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	out.Spec.Containers = slimContainers(p.Spec.Containers)
	out.Status.Phase = p.Status.Phase
	out.Status.InitContainerStatuses = slimStatuses(p.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = slimStatuses(p.Status.ContainerStatuses)
	return out, nil
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
	return out
}

func slimStatuses(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if ss == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, s := range ss {
		out[i] = corev1.ContainerStatus{Name: s.Name, State: s.State, LastTerminationState: s.LastTerminationState,
			RestartCount: s.RestartCount, Ready: s.Ready, Started: s.Started}
	}
	return out
}

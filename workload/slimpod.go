package workload

import (
	"sort"
	"strings"
	"sync"

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
// name, restartPolicy and the requests and limits of GPU resources (names starting with
// GPUResourcePrefix: Containers, GPUContainers, the start order of the pod's totals),
// shared between pods that have the same ones (the maps are read-only, as every cached
// object is); the phase; and of every container status its name, state, last
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
		out[i] = corev1.Container{Name: c.Name, Resources: gpuResources(c.Resources), RestartPolicy: c.RestartPolicy}
	}
	return out
}

// maxInterned bounds the distinct GPU resource requirements SlimPod shares: past it,
// each pod keeps its own copy (right, only larger). Pods of one workload have the same
// requirements, so a fleet has about as many as it has GPU sizes and fractions.
const maxInterned = 4096

var interned sync.Map // key (gpuKey) → corev1.ResourceRequirements, at most maxInterned

var internedCount struct {
	sync.Mutex
	n int
}

// gpuResources returns r's requests and limits of GPU resources only, the same maps for
// equal requirements (up to maxInterned distinct ones).
func gpuResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Limits: gpuOnly(r.Limits), Requests: gpuOnly(r.Requests)}
	if out.Limits == nil && out.Requests == nil {
		return out
	}
	key := gpuKey(out)
	if v, ok := interned.Load(key); ok {
		return v.(corev1.ResourceRequirements)
	}
	internedCount.Lock()
	defer internedCount.Unlock()
	if internedCount.n >= maxInterned {
		return out
	}
	v, loaded := interned.LoadOrStore(key, out)
	if !loaded {
		internedCount.n++
	}
	return v.(corev1.ResourceRequirements)
}

// gpuOnly returns the GPU entries of l (a new map), nil when it has none.
func gpuOnly(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for n, q := range l {
		if strings.HasPrefix(string(n), GPUResourcePrefix) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[n] = q
		}
	}
	return out
}

// gpuKey identifies GPU requirements: limits, then requests, each sorted by name.
func gpuKey(r corev1.ResourceRequirements) string {
	var b strings.Builder
	for i, l := range []corev1.ResourceList{r.Limits, r.Requests} {
		names := make([]string, 0, len(l))
		for n := range l {
			names = append(names, string(n))
		}
		sort.Strings(names)
		b.WriteString([]string{"L", "|R"}[i])
		for _, n := range names {
			q := l[corev1.ResourceName(n)]
			b.WriteString(";" + n + "=" + q.String())
		}
	}
	return b.String()
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

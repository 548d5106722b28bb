package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// MirrorPodAnnotation holds, on a static pod's mirror pod, the static pod's UID (the
// hash the kubelet uses in its cgroup path) that differs from the mirror's own UID.
const MirrorPodAnnotation = "kubernetes.io/config.mirror"

const (
	indexUID         = "uid"
	indexContainerID = "containerID"
)

// PodIndex is a pod informer indexed by pod UID (and static pod hash) and by the
// container IDs of pod.status.{,init,ephemeral}containerStatuses[].containerID. It
// implements PodLookup for ProcAttributor and lists live pods for the simulator.
// Pods are stored stripped to the fields the agent uses.
type PodIndex struct {
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
}

// NewPodIndex makes a PodIndex over client's pods. With nodeName set it watches only
// the pods of that node (field selector spec.nodeName=<nodeName>); empty watches
// every pod of the cluster. Call Start, then WaitForSync.
func NewPodIndex(client kubernetes.Interface, nodeName string) (*PodIndex, error) {
	opts := []informers.SharedInformerOption{informers.WithTransform(slimPod)}
	if nodeName != "" {
		sel := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		opts = append(opts, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel }))
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
	inf := f.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(cache.Indexers{indexUID: uidIndex, indexContainerID: containerIDIndex}); err != nil {
		return nil, fmt.Errorf("pod informer indexers: %w", err)
	}
	return &PodIndex{informer: inf, factory: f}, nil
}

// Start runs the informer until ctx ends.
func (p *PodIndex) Start(ctx context.Context) { p.factory.Start(ctx.Done()) }

// WaitForSync blocks until the informer has listed the pods once, ctx ends, or
// timeout passes; it reports whether the informer synced.
func (p *PodIndex) WaitForSync(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced)
}

// HasSynced reports whether the informer has listed the pods once.
func (p *PodIndex) HasSynced() bool { return p.informer.HasSynced() }

// LookupContainer implements PodLookup.
func (p *PodIndex) LookupContainer(id string) (Owner, bool) {
	objs, err := p.informer.GetIndexer().ByIndex(indexContainerID, id)
	if err != nil {
		return Owner{}, false
	}
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		for _, sts := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
			for i := range sts {
				if StripContainerIDScheme(sts[i].ContainerID) == id {
					return Owner{Namespace: pod.Namespace, Pod: pod.Name, Container: sts[i].Name}, true
				}
			}
		}
	}
	return Owner{}, false
}

// LookupPod implements PodLookup.
func (p *PodIndex) LookupPod(uid string) (namespace, name string, containers []string, ok bool) {
	objs, err := p.informer.GetIndexer().ByIndex(indexUID, uid)
	if err != nil || len(objs) == 0 {
		return "", "", nil, false
	}
	pod := objs[0].(*corev1.Pod)
	return pod.Namespace, pod.Name, mayRun(pod), true
}

// mayRun names the containers of pod that may run a process now: every spec container,
// every native sidecar (an init container with restartPolicy Always), every other init
// container that has not terminated (running, or yet to run: no status), and every
// ephemeral container that has not terminated (kubectl debug).
func mayRun(pod *corev1.Pod) []string {
	ended := func(sts []corev1.ContainerStatus, name string) bool {
		for i := range sts {
			if sts[i].Name == name {
				return sts[i].State.Terminated != nil
			}
		}
		return false
	}
	var out []string
	for i := range pod.Spec.Containers {
		out = append(out, pod.Spec.Containers[i].Name)
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if (c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways) || !ended(pod.Status.InitContainerStatuses, c.Name) {
			out = append(out, c.Name)
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if name := pod.Spec.EphemeralContainers[i].Name; !ended(pod.Status.EphemeralContainerStatuses, name) {
			out = append(out, name)
		}
	}
	return out
}

// List returns the pods in the informer's store (stripped; do not modify them).
func (p *PodIndex) List() []*corev1.Pod {
	objs := p.informer.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// StripContainerIDScheme turns "containerd://<id>" (or "cri-o://", "docker://") into
// "<id>", lowercased.
func StripContainerIDScheme(id string) string {
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+3:]
	}
	return strings.ToLower(id)
}

func uidIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	keys := []string{strings.ToLower(string(pod.UID))}
	if h := pod.Annotations[MirrorPodAnnotation]; h != "" {
		keys = append(keys, strings.ToLower(h))
	}
	return keys, nil
}

func containerIDIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, sts := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range sts {
			if id := StripContainerIDScheme(sts[i].ContainerID); id != "" {
				keys = append(keys, id)
			}
		}
	}
	return keys, nil
}

// slimPod keeps only what the agent reads, so a node's pods cost little memory.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // cache.DeletedFinalStateUnknown and the like
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels:            pod.Labels,
			OwnerReferences:   pod.OwnerReferences,
		},
		Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase:                      pod.Status.Phase,
			ContainerStatuses:          slimStatuses(pod.Status.ContainerStatuses),
			InitContainerStatuses:      slimStatuses(pod.Status.InitContainerStatuses),
			EphemeralContainerStatuses: slimStatuses(pod.Status.EphemeralContainerStatuses),
		},
	}
	if h := pod.Annotations[MirrorPodAnnotation]; h != "" {
		out.Annotations = map[string]string{MirrorPodAnnotation: h}
	}
	for i := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: pod.Spec.Containers[i].Name})
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy})
	}
	for i := range pod.Spec.EphemeralContainers {
		out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: pod.Spec.EphemeralContainers[i].Name}})
	}
	return out, nil
}

func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i := range in {
		out[i] = corev1.ContainerStatus{Name: in[i].Name, ContainerID: in[i].ContainerID}
		if in[i].State.Terminated != nil {
			out[i].State.Terminated = &corev1.ContainerStateTerminated{} // mayRun reads only that it ended
		}
	}
	return out
}

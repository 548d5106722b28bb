package updater

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// SkipUnreleasedRevision: the pod's controller (a StatefulSet or DaemonSet with
// updateStrategy OnDelete) has a newer template than the pod's, which it gives a pod
// only when the pod is deleted: the user releases it pod by pod. A replacement would
// release it for them, so the pod is not evicted, not even for protective growth; it
// takes its fraction when the user deletes it (the webhook writes the replacement).
const SkipUnreleasedRevision = "unreleased-revision"

// DaemonSet template generations, as the DaemonSet controller reads them: the
// annotation the API server keeps on the DaemonSet and the label it puts on each pod.
const (
	daemonSetTemplateGenerationAnnotation = "deprecated.daemonset.template.generation"
	daemonSetPodTemplateGenerationLabel   = "pod-template-generation"
)

// unreleasedRevisions returns, by pod UID, why each of pods is at a revision its
// controller has not released: a StatefulSet with updateStrategy OnDelete whose
// status.updateRevision is not the pod's controller-revision-hash label, or a DaemonSet
// with updateStrategy OnDelete whose template generation is not the pod's (nor its
// revision hash the newest). The controllers are read through Client (the informer
// cache), once each; a pod without the label, a controller of another kind, another
// strategy or one that cannot be read is not listed (RollingUpdate replaces such a pod
// anyway, with the newer template).
func (u *Updater) unreleasedRevisions(ctx context.Context, pods []*corev1.Pod) map[types.UID]string {
	out := map[types.UID]string{}
	// newest: controller UID → whether a pod is at its released template (nil: not an
	// OnDelete StatefulSet or DaemonSet, or not read).
	newest := map[types.UID]func(*corev1.Pod) (bool, string){}
	for _, pod := range pods {
		o := metav1.GetControllerOf(pod)
		if o == nil {
			continue
		}
		check, read := newest[o.UID]
		if !read {
			check = u.releasedCheck(ctx, pod.Namespace, o)
			newest[o.UID] = check
		}
		if check == nil {
			continue
		}
		if ok, msg := check(pod); !ok {
			out[pod.UID] = msg
		}
	}
	return out
}

// releasedCheck reads controller o in namespace ns and returns a check of whether a pod
// is at the template it released, with a message when it is not; nil when o is not a
// StatefulSet or DaemonSet with updateStrategy OnDelete, or cannot be read.
func (u *Updater) releasedCheck(ctx context.Context, ns string, o *metav1.OwnerReference) func(*corev1.Pod) (bool, string) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil || gv.Group != appsv1.GroupName {
		return nil
	}
	key := client.ObjectKey{Namespace: ns, Name: o.Name}
	const why = "replacing it would roll out the newer template, which updateStrategy OnDelete leaves to whoever deletes the pod; it takes its fraction when it is deleted"
	switch o.Kind {
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		if err := u.Client.Get(ctx, key, sts); err != nil || sts.UID != o.UID ||
			sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || sts.Status.UpdateRevision == "" {
			return nil
		}
		return func(pod *corev1.Pod) (bool, string) {
			rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
			if rev == "" || rev == sts.Status.UpdateRevision {
				return true, ""
			}
			return false, fmt.Sprintf("pod is at revision %s of StatefulSet %s, whose update revision is %s: %s", rev, sts.Name, sts.Status.UpdateRevision, why)
		}
	case "DaemonSet":
		ds := &appsv1.DaemonSet{}
		if err := u.Client.Get(ctx, key, ds); err != nil || ds.UID != o.UID ||
			ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			return nil
		}
		gen := ds.Annotations[daemonSetTemplateGenerationAnnotation]
		if gen == "" {
			return nil
		}
		return func(pod *corev1.Pod) (bool, string) {
			pg, ok := pod.Labels[daemonSetPodTemplateGenerationLabel]
			if !ok || pg == gen {
				return true, ""
			}
			return false, fmt.Sprintf("pod is at template generation %s of DaemonSet %s, whose template is at generation %s: %s", pg, ds.Name, gen, why)
		}
	}
	return nil
}

// revisionGate: a pod its controller would recreate at a template the user has not
// released (unreleasedRevisions). A change in place recreates nothing and passes.
func revisionGate(c *candidate) (string, string) {
	if c.action == gpufracv1.PodUpdateInPlace {
		return "", ""
	}
	if msg := c.p.unreleased[c.pod.UID]; msg != "" {
		return SkipUnreleasedRevision, msg
	}
	return "", ""
}

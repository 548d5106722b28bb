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

// SkipRollout: the pod's ReplicaSet is not its Deployment's newest: the Deployment is
// rolling out a newer template (or paused midway) and replaces the pod itself, and the
// replacement gets the recommendation from the webhook. Evicting it would restart it
// twice (its old ReplicaSet recreates it, the rollout then removes that), so it is
// replaced only for protective growth.
const SkipRollout = "rollout"

// revisionDeploymentAnnotation is the revision the Deployment controller writes on a
// Deployment and on each of its ReplicaSets; the Deployment's is its newest ReplicaSet's.
const revisionDeploymentAnnotation = "deployment.kubernetes.io/revision"

// DaemonSet template generations, as the DaemonSet controller reads them: the
// annotation the API server keeps on the DaemonSet and the label it puts on each pod.
const (
	daemonSetTemplateGenerationAnnotation = "deprecated.daemonset.template.generation"
	daemonSetPodTemplateGenerationLabel   = "pod-template-generation"
)

// heldRevision is why a pod is at an older template than its controller's newest
// (unreleasedRevisions): reason SkipUnreleasedRevision (never replaced) or SkipRollout
// (replaced only for protective growth), and a message.
type heldRevision struct{ reason, msg string }

// unreleasedRevisions returns, by pod UID, why each of pods is at an older template
// than its controller's newest: a ReplicaSet whose revision is not its Deployment's
// (a rollout in progress or paused: SkipRollout), or (SkipUnreleasedRevision) a
// StatefulSet with updateStrategy OnDelete whose
// status.updateRevision is not the pod's controller-revision-hash label, or a DaemonSet
// with updateStrategy OnDelete whose template generation is not the pod's (nor its
// revision hash the newest). The controllers are read through Client (the informer
// cache), once each; a pod without the label, a controller of another kind, another
// strategy or one that cannot be read is not listed (RollingUpdate replaces such a pod
// anyway, with the newer template).
func (u *Updater) unreleasedRevisions(ctx context.Context, pods []*corev1.Pod) map[types.UID]heldRevision {
	out := map[types.UID]heldRevision{}
	// newest: controller UID → whether a pod is at its newest template (nil: nothing to
	// check, or not read).
	newest := map[types.UID]func(*corev1.Pod) *heldRevision{}
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
		if h := check(pod); h != nil {
			out[pod.UID] = *h
		}
	}
	return out
}

// releasedCheck reads controller o in namespace ns and returns a check of a pod: nil
// when it is at o's newest template, else why not. It returns nil when there is nothing
// to check: o is not a Deployment's ReplicaSet, nor a StatefulSet or DaemonSet with
// updateStrategy OnDelete, or it cannot be read, or states no revision.
func (u *Updater) releasedCheck(ctx context.Context, ns string, o *metav1.OwnerReference) func(*corev1.Pod) *heldRevision {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil || gv.Group != appsv1.GroupName {
		return nil
	}
	key := client.ObjectKey{Namespace: ns, Name: o.Name}
	const why = "replacing it would roll out the newer template, which updateStrategy OnDelete leaves to whoever deletes the pod; it takes its fraction when it is deleted"
	switch o.Kind {
	case "ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		if err := u.Client.Get(ctx, key, rs); err != nil || rs.UID != o.UID {
			return nil
		}
		do := metav1.GetControllerOf(rs)
		if do == nil || do.Kind != "Deployment" {
			return nil
		}
		dep := &appsv1.Deployment{}
		if err := u.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: do.Name}, dep); err != nil || dep.UID != do.UID {
			return nil
		}
		have, want := rs.Annotations[revisionDeploymentAnnotation], dep.Annotations[revisionDeploymentAnnotation]
		if have == "" || want == "" || have == want {
			return nil
		}
		h := &heldRevision{reason: SkipRollout, msg: fmt.Sprintf("pod of ReplicaSet %s (revision %s) while Deployment %s rolls out revision %s: the rollout replaces it, and the webhook writes its replacement", rs.Name, have, dep.Name, want)}
		return func(*corev1.Pod) *heldRevision { return h }
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		if err := u.Client.Get(ctx, key, sts); err != nil || sts.UID != o.UID ||
			sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || sts.Status.UpdateRevision == "" {
			return nil
		}
		return func(pod *corev1.Pod) *heldRevision {
			rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
			if rev == "" || rev == sts.Status.UpdateRevision {
				return nil
			}
			return &heldRevision{SkipUnreleasedRevision, fmt.Sprintf("pod is at revision %s of StatefulSet %s, whose update revision is %s: %s", rev, sts.Name, sts.Status.UpdateRevision, why)}
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
		return func(pod *corev1.Pod) *heldRevision {
			pg, ok := pod.Labels[daemonSetPodTemplateGenerationLabel]
			if !ok || pg == gen {
				return nil
			}
			return &heldRevision{SkipUnreleasedRevision, fmt.Sprintf("pod is at template generation %s of DaemonSet %s, whose template is at generation %s: %s", pg, ds.Name, gen, why)}
		}
	}
	return nil
}

// revisionGate: a pod at an older template than its controller's newest
// (unreleasedRevisions): one its controller would recreate at a template the user has
// not released, or, for a change that is not protective, one a Deployment's rollout
// replaces. A change in place recreates nothing and passes.
func revisionGate(c *candidate) (string, string) {
	h, ok := c.p.unreleased[c.pod.UID]
	if !ok || c.action == gpufracv1.PodUpdateInPlace || (h.reason == SkipRollout && c.need.Protective) {
		return "", ""
	}
	return h.reason, h.msg
}

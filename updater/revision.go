package updater

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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

// SkipRollout: the pod's controller is rolling out a newer template and replaces the
// pod itself; the webhook writes the replacement. A pod of a Deployment's older
// ReplicaSet (a rollout in progress or paused midway) would be recreated from the older
// template and then removed by the rollout, restarted twice: it is replaced only for
// protective growth. A StatefulSet's or DaemonSet's would be recreated from the newer
// template out of the rolling update's order (one at a time, each once the one before
// is Ready: a broken revision would spread past the pod the rollout stopped at): it is
// not replaced, not even for protective growth.
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
// (unreleasedRevisions): reason SkipUnreleasedRevision or SkipRollout, a message, and
// whether protective growth is held too (always: the replacement would come from the
// newer template).
type heldRevision struct {
	reason, msg string
	always      bool
}

// unreleasedRevisions returns, by pod UID, why each of pods is at an older template
// than its controller's newest (releasedCheck): a Deployment's older ReplicaSet, a
// StatefulSet's or DaemonSet's pod that a deletion would move to the newer template. The
// controllers are read through Client (the informer cache), once each; a pod without
// the revision label, a controller of another kind or one that cannot be read is not
// listed.
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
			check = u.releasedCheck(ctx, pod.Namespace, o, pods)
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

// releasedCheck reads controller o in namespace ns and returns a check of a pod (one of
// pods, the workload's): nil
// when it is at o's newest template or its replacement would be created from the same
// template as it, else why it is held. A StatefulSet whose controller has not observed its
// generation yet holds every pod a deletion would give its update revision: that
// revision is not known yet. It returns nil when there is nothing to check: o
// is not a Deployment's ReplicaSet, a StatefulSet or a DaemonSet, cannot be read, or
// states no revision.
func (u *Updater) releasedCheck(ctx context.Context, ns string, o *metav1.OwnerReference, pods []*corev1.Pod) func(*corev1.Pod) *heldRevision {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil || gv.Group != appsv1.GroupName {
		return nil
	}
	key := client.ObjectKey{Namespace: ns, Name: o.Name}
	const (
		why     = "replacing it would roll out the controller's template (newer, or an earlier one a rollback restored), which updateStrategy OnDelete leaves to whoever deletes the pod; it takes its fraction when it is deleted"
		rolling = "its rolling update replaces it in order, each pod once the one before is Ready, and the webhook writes the replacement; an eviction would move it to the newer template out of that order"
	)
	switch o.Kind {
	case "ReplicaSet":
		// Metadata only (the revision is an annotation, the Deployment an owner
		// reference): the metadata informer that resolves pod owners serves it, not a
		// full ReplicaSet informer holding every pod template of the cluster.
		rs := &metav1.PartialObjectMetadata{}
		rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
		if err := u.Client.Get(ctx, key, rs); err != nil || rs.UID != o.UID {
			return nil
		}
		do := metav1.GetControllerOf(rs)
		if do == nil || do.Kind != "Deployment" {
			return nil
		}
		// Metadata only, as workload.Resolve reads the target: the informer it starts
		// serves this read too (no second, full Deployment informer).
		dep := &metav1.PartialObjectMetadata{}
		dep.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
		if err := u.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: do.Name}, dep); err != nil || dep.UID != do.UID {
			return nil
		}
		have, want := rs.Annotations[revisionDeploymentAnnotation], dep.Annotations[revisionDeploymentAnnotation]
		if have == "" || want == "" || have == want {
			return nil
		}
		h := u.rolloutHold(ctx, ns, rs.Name, have, dep.Name, do.UID, want)
		if h == nil {
			return nil
		}
		return func(*corev1.Pod) *heldRevision { return h }
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		if err := u.Client.Get(ctx, key, sts); err != nil || sts.UID != o.UID || sts.Status.UpdateRevision == "" {
			return nil
		}
		onDelete := sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType
		// A deleted pod below the partition is recreated at the current revision, any
		// other at the update revision (the StatefulSet controller's
		// newVersionedStatefulSetPod); one whose ordinal does not read is held.
		first := 0
		if sts.Spec.Ordinals != nil {
			first = int(sts.Spec.Ordinals.Start)
		}
		if ru := sts.Spec.UpdateStrategy.RollingUpdate; !onDelete && ru != nil && ru.Partition != nil {
			first += int(*ru.Partition)
		}
		// Until the controller has observed the StatefulSet's generation (a template just
		// changed), status.updateRevision may be the template before: a pod at it only
		// looks released, and its deletion would get the newest template.
		unobserved := sts.Status.ObservedGeneration < sts.Generation
		return func(pod *corev1.Pod) *heldRevision {
			rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]
			if rev == "" || rev == sts.Status.UpdateRevision && !unobserved {
				return nil
			}
			if ord, ok := statefulSetOrdinal(pod, sts.Name); !onDelete && ok && ord < first {
				return nil
			}
			at := fmt.Sprintf("pod is at revision %s of StatefulSet %s, whose update revision is %s", rev, sts.Name, sts.Status.UpdateRevision)
			if unobserved {
				at = fmt.Sprintf("StatefulSet %s is at generation %d, which its controller has not observed yet (status at %d): the revision a new pod gets is not known yet", sts.Name, sts.Generation, sts.Status.ObservedGeneration)
			}
			if onDelete {
				return &heldRevision{SkipUnreleasedRevision, at + ": " + why, true}
			}
			return &heldRevision{SkipRollout, at + ": " + rolling, true}
		}
	case "DaemonSet":
		ds := &appsv1.DaemonSet{}
		if err := u.Client.Get(ctx, key, ds); err != nil || ds.UID != o.UID {
			return nil
		}
		gen := ds.Annotations[daemonSetTemplateGenerationAnnotation]
		st := ds.Status
		if gen == "" || st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled {
			// Every pod is updated as the DaemonSet controller counts it, by template
			// generation or by revision hash: after a rollback the pods whose hash is
			// the restored template's keep their older generation label.
			return nil
		}
		onDelete := ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
		// The DaemonSet controller counts a pod updated by its template generation or by
		// its revision hash: after a rollback, a pod created from the restored template
		// keeps its older generation and is at the DaemonSet's template. Its hash is
		// known from a pod at the current generation; without one, which hash is the
		// template's is not known (no ControllerRevision is read) and every pod at
		// another generation is held, the message says why.
		hash, atGen := "", 0
		for _, p := range pods {
			if c := metav1.GetControllerOf(p); c != nil && c.UID == o.UID && p.Labels[daemonSetPodTemplateGenerationLabel] == gen {
				atGen++
				if h := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]; h != "" {
					hash = h
				}
			}
		}
		return func(pod *corev1.Pod) *heldRevision {
			pg, ok := pod.Labels[daemonSetPodTemplateGenerationLabel]
			if !ok || pg == gen || hash != "" && pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
				return nil
			}
			at := fmt.Sprintf("pod is at template generation %s of DaemonSet %s, whose template is at generation %s", pg, ds.Name, gen)
			if hash == "" && int(st.UpdatedNumberScheduled) > atGen {
				at += fmt.Sprintf(" (%d pod(s) run its template by revision hash, as after a rollback; which ones is known once a pod is created at generation %s)", int(st.UpdatedNumberScheduled)-atGen, gen)
			}
			if onDelete {
				return &heldRevision{SkipUnreleasedRevision, at + ": " + why, true}
			}
			return &heldRevision{SkipRollout, at + ": " + rolling, true}
		}
	}
	return nil
}

// rolloutHold says why a pod of ReplicaSet rs at revision have is held while its
// Deployment dep (UID uid) in namespace ns is at revision want, or nil when it is not held. Only here,
// with a rollout's revisions apart, is the Deployment read in full, from the API server
// (apiReader: no informer holding every Deployment's template), for what its metadata
// lacks:
//
//   - spec.paused: the user paused the rollout, which then replaces none of the older
//     ReplicaSet's pods for as long as the pause lasts (hours, days). An eviction gets the
//     pod recreated by its own ReplicaSet, from its own template: it releases nothing of
//     the newer one, so the pod is not held (before, it was held for a rollout that was not
//     running, "the rollout replaces it", with only protective growth applied);
//   - Progressing False ProgressDeadlineExceeded: the rollout has stalled; its
//     controller keeps trying, and once it progresses (or the user rolls back) it
//     replaces the pod: held, the message says the rollout stalled and since when.
//
// A Deployment that cannot be read is held, as one rolling out, and the message says so.
func (u *Updater) rolloutHold(ctx context.Context, ns, rs, have, dep string, uid types.UID, want string) *heldRevision {
	msg := fmt.Sprintf("pod of ReplicaSet %s (revision %s) while Deployment %s rolls out revision %s: the rollout replaces it, and the webhook writes its replacement", rs, have, dep, want)
	d := &appsv1.Deployment{}
	switch err := u.apiReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: dep}, d); {
	case err != nil:
		msg += fmt.Sprintf(" (Deployment %s not read: %v)", dep, err)
	case d.UID != uid:
	case d.Spec.Paused:
		return nil
	default:
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == deploymentProgressDeadlineExceeded {
				msg = fmt.Sprintf("pod of ReplicaSet %s (revision %s) while Deployment %s's rollout of revision %s has stalled (ProgressDeadlineExceeded since %s: %s): the rollout replaces it once it progresses, or it is kept if the rollout is rolled back",
					rs, have, dep, want, stamp(c.LastUpdateTime.Time), truncate(c.Message, 200))
			}
		}
	}
	return &heldRevision{reason: SkipRollout, msg: msg}
}

// deploymentProgressDeadlineExceeded is the reason of a Deployment's Progressing False
// condition once its rollout made no progress for spec.progressDeadlineSeconds
// (kubernetes pkg/controller/deployment/util.TimedOutReason).
const deploymentProgressDeadlineExceeded = "ProgressDeadlineExceeded"

// statefulSetOrdinal is the ordinal of pod, a pod of StatefulSet name: its
// apps.kubernetes.io/pod-index label, else the number after name and a dash.
func statefulSetOrdinal(pod *corev1.Pod, name string) (int, bool) {
	s, ok := pod.Labels[appsv1.PodIndexLabel]
	if !ok {
		rest, found := strings.CutPrefix(pod.Name, name+"-")
		if !found {
			return 0, false
		}
		s = rest
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// revisionGate: a pod at an older template than its controller's newest
// (unreleasedRevisions), held for every change or, for a Deployment's older ReplicaSet,
// for a change that is not protective. A change in place recreates nothing and passes.
func revisionGate(c *candidate) (string, string) {
	h, ok := c.p.unreleased[c.pod.UID]
	if !ok || c.action == gpufracv1.PodUpdateInPlace || (!h.always && c.need.Protective) {
		return "", ""
	}
	return h.reason, h.msg
}

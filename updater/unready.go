package updater

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationReplaceUnready on a GPUFractionAutoscaler, with value "true", lets the
// updater replace the workload's pods that are already not Ready (crash-looping, for
// example on GPU out-of-memory) by deleting them, past the disruption budget and
// PodDisruptionBudgets: they serve nothing, and the Eviction API and the updater's own
// budget count them as unavailable, so otherwise no pod is ever replaced with a larger
// recommendation. Replacements of not-Ready pods are spaced by a bounded backoff per
// workload.
const AnnotationReplaceUnready = "gpufrac.io/replace-unready-pods"

// Updater condition (status.updater.conditions) and event for the crash-loop deadlock.
const (
	// ConditionReplacementDeadlock is True while out-of-date pods are not Ready and the
	// disruption budget (min-replicas, in-flight) or a PodDisruptionBudget (pdb) keeps them
	// from being replaced; the message names the pods and the way out. It is False
	// (reason NoDeadlock or ReplacingUnreadyPods) once that ends, and absent before it
	// ever happened.
	ConditionReplacementDeadlock = "ReplacementDeadlock"
	// ReasonUnreadyBehindBudget: ReplacementDeadlock True.
	ReasonUnreadyBehindBudget = "UnreadyPodsBehindBudget"
	// ReasonReplacingUnready: ReplacementDeadlock False; AnnotationReplaceUnready lets
	// the updater delete the not-Ready pods.
	ReasonReplacingUnready = "ReplacingUnreadyPods"
	// ReasonNoDeadlock: ReplacementDeadlock False.
	ReasonNoDeadlock = "NoDeadlock"
	// EventReplacementDeadlock (Warning, autoscaler): the condition turned True (once
	// per message).
	EventReplacementDeadlock = "ReplacementDeadlock"
	// EventReplacedUnready (Normal, pod and autoscaler): a not-Ready pod was deleted to
	// be replaced (AnnotationReplaceUnready).
	EventReplacedUnready = "ReplacedNotReadyPod"
	// SkipUnreadyBackoff: a not-Ready pod waits for the workload's backoff after the last
	// replacement of a not-Ready pod.
	SkipUnreadyBackoff = "unready-backoff"
	// ResultDeletedUnready: a not-Ready pod was deleted (gpufrac_updater_evictions_total).
	ResultDeletedUnready = "deleted-unready"
)

// unreadyState is a workload's backoff for replacing not-Ready pods.
type unreadyState struct {
	n    int       // not-Ready pods replaced since the workload was last all Ready
	next time.Time // no replacement of a not-Ready pod before
}

// UnreadyBackoff is the wait after the n-th replacement of a not-Ready pod of one
// workload (n ≥ 1): base, 2×base, 4×base, … at most limit.
func UnreadyBackoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// resetUnreadyBackoff starts the workload's backoff of not-Ready replacements over once
// every pod of the plan is Ready.
func (u *Updater) resetUnreadyBackoff(p *plan) {
	for _, pod := range p.pods {
		if !IsReady(pod) {
			return
		}
	}
	delete(u.unready, p.ref)
}

// notReadyFor is how long pod has not been Ready: since its Ready condition turned
// False, else since it was created.
func notReadyFor(pod *corev1.Pod, now time.Time) time.Duration {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return 0
			}
			if !c.LastTransitionTime.IsZero() {
				return now.Sub(c.LastTransitionTime.Time)
			}
		}
	}
	return now.Sub(pod.CreationTimestamp.Time)
}

// unreadyCandidate reports whether c is a not-Ready pod the updater may replace by
// deletion: the autoscaler opted in, the pod runs (it is not Pending or going away) and
// has not been Ready for at least RetryBackoff (a starting pod is not crash-looping).
func (u *Updater) unreadyCandidate(c *candidate, now time.Time) bool {
	return c.p.replaceUnready && c.pod.DeletionTimestamp == nil && c.pod.Status.Phase == corev1.PodRunning &&
		!IsReady(c.pod) && notReadyFor(c.pod, now) >= u.Config.RetryBackoff
}

// replaceUnready deletes a not-Ready pod (UID precondition) so that its controller
// replaces it with the recommendation, subject to the workload's backoff, the rate limit
// and a fresh admission Lease; the disruption budget and PodDisruptionBudgets are not
// consulted (the pod serves nothing), and neither is the placement check (deleting it
// frees its GPU).
func (u *Updater) replaceUnready(ctx context.Context, c *candidate, now time.Time) {
	log := klog.FromContext(ctx).WithValues("autoscaler", klog.KObj(c.p.gfa), "pod", klog.KObj(c.pod))
	p := c.p
	s := u.unready[p.ref]
	if now.Before(s.next) {
		c.skip(SkipUnreadyBackoff, fmt.Sprintf("%d not-Ready pod(s) of the workload replaced; the next one not before %s (backoff %v, at most %v)",
			s.n, stamp(s.next), UnreadyBackoff(s.n, u.Config.RetryBackoff, u.Config.MaxUnreadyBackoff), u.Config.MaxUnreadyBackoff))
		return
	}
	if !u.mayReplaceNow(ctx, c) {
		return
	}
	uid := c.pod.UID
	err := u.Client.Delete(ctx, c.pod, client.Preconditions{UID: &uid})
	u.limiter.Allow() // the token mayReplaceNow found free
	switch {
	case err == nil:
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		c.skip(SkipEvictionError, "the pod changed or is going away: "+err.Error())
		return
	case u.evictionLost(ctx, c, err):
		// Deleted, the answer lost (evictionLost): counted as deleted, so the
		// workload's backoff holds its other not-Ready pods.
		log.Info("The deletion answered an error but the pod is going away: counted as deleted", "err", err.Error())
	default:
		evictionsTotal.WithLabelValues(ResultError).Inc()
		msg := "deleting the not-Ready pod failed: " + err.Error()
		u.retry[uid] = retryState{until: now.Add(u.Config.RetryBackoff), reason: SkipEvictionError, msg: msg}
		c.skip(SkipEvictionError, msg)
		log.Error(err, "Deleting a not-Ready pod failed")
		return
	}
	evictionsTotal.WithLabelValues(ResultDeletedUnready).Inc()
	s.n++
	s.next = now.Add(UnreadyBackoff(s.n, u.Config.RetryBackoff, u.Config.MaxUnreadyBackoff))
	u.unready[p.ref] = s
	u.replaced(ctx, c, now)
	note := fmt.Sprintf("deleted while not Ready for %v (%s=true: it serves nothing, and the disruption budget would never let it go) to be replaced: %s; next not-Ready replacement of the workload not before %s",
		notReadyFor(c.pod, now).Round(time.Second), AnnotationReplaceUnready, truncate(c.need.Reason(), 500), stamp(s.next))
	u.podEvent(c, corev1.EventTypeNormal, EventReplacedUnready, "Delete", note)
	log.Info("Deleted a not-Ready pod to replace it", "reason", c.need.Reason(), "next", s.next)
	c.done()
}

// deadlock sets the ReplacementDeadlock condition (and its event) from this cycle's
// pending updates: out-of-date pods that run but are not Ready and were held by the
// disruption budget or a PodDisruptionBudget.
func (u *Updater) deadlock(p *plan, pending []*candidate) {
	var names []string
	reasons := map[string]bool{}
	for _, c := range pending {
		switch c.upd.SkipReason {
		case SkipInFlight, SkipMinReplicas, SkipPDB:
		default:
			continue
		}
		if c.pod.Status.Phase != corev1.PodRunning || IsReady(c.pod) {
			continue
		}
		names = append(names, c.pod.Name)
		reasons[c.upd.SkipReason] = true
	}
	st, gfa := p.st, p.gfa
	if len(names) == 0 || p.replaceUnready {
		if meta.FindStatusCondition(st.Conditions, ConditionReplacementDeadlock) != nil {
			reason, msg := ReasonNoDeadlock, "no out-of-date pod is held as not Ready behind the disruption budget"
			if p.replaceUnready {
				reason, msg = ReasonReplacingUnready, fmt.Sprintf("%s=true: not-Ready pods are deleted to be replaced (bounded backoff)", AnnotationReplaceUnready)
			}
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReplacementDeadlock, Status: metav1.ConditionFalse,
				Reason: reason, Message: msg, ObservedGeneration: gfa.Generation})
		}
		u.forget(gfa, "deadlock")
		return
	}
	slices.Sort(names)
	rs := slices.Sorted(maps.Keys(reasons))
	msg := fmt.Sprintf("deadlock: %d out-of-date pod(s) are not Ready and cannot be replaced, because the disruption budget counts them as unavailable (%s): %s. They serve nothing, so nothing recovers: annotate the autoscaler %s=true to let the updater delete not-Ready pods so that they are replaced with the recommendation (one at a time, bounded backoff)",
		len(names), strings.Join(rs, ", "), strings.Join(names, ", "), AnnotationReplaceUnready)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReplacementDeadlock, Status: metav1.ConditionTrue,
		Reason: ReasonUnreadyBehindBudget, Message: truncate(msg, 1000), ObservedGeneration: gfa.Generation})
	// Once per set of pods and reasons.
	u.eventOnce(gfa, "deadlock", corev1.EventTypeWarning, EventReplacementDeadlock, "Update", truncate(msg, 1000))
}

package updater

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// evict is the eviction action: it evicts c's pod through the Eviction API (the pod's
// UID as precondition, so PodDisruptionBudgets hold) and records the result. placeAt and
// repl are the node and need the placement check found (reserved once evicted).
func (u *Updater) evict(ctx context.Context, cy *cycle, c *candidate, placeAt int, repl Replacement) {
	uid := c.pod.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: c.pod.Namespace, Name: c.pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	err := u.Client.SubResource("eviction").Create(ctx, c.pod, ev)
	if err != nil {
		gone, unknown := u.evictionOutcome(ctx, c, err)
		if !gone {
			if unknown {
				u.limiter.Allow() // it may have gone: counted against the rate too
			}
			u.evictionFailed(ctx, c, err, cy.now)
			return
		}
		klog.FromContext(ctx).Info("The eviction answered an error but the pod is going away: counted as evicted",
			"autoscaler", klog.KObj(c.p.gfa), "pod", klog.KObj(c.pod), "err", err.Error())
	}
	// Only an eviction that happened takes the token mayReplaceNow found free: one
	// refused by a PodDisruptionBudget, denied by an admission webhook or failed (the
	// pod read back unchanged) evicted nothing, and a workload whose evictions all fail
	// would otherwise take every other workload's tokens.
	u.limiter.Allow()
	evictionsTotal.WithLabelValues(ResultEvicted).Inc()
	if cy.capacity != nil && c.releases {
		cy.capacity = released(cy.capacity, c.pod, u.Config.Backend) // placementGate placed it so
	}
	reserve(cy.capacity, placeAt, repl)
	// The budgets let one through: the next refusal waits RetryBackoff again.
	delete(u.refusals, c.p.ref)
	u.evicted(ctx, c, cy.now)
}

// evictionLost reports whether an eviction (or deletion) of c's pod that answered err
// went through anyway. Only an error that leaves the outcome unknown can (a timeout, a 5xx, a cut
// connection: the API server may evict the pod and the answer be lost); a refusal or a
// changed pod is the API server's answer. The pod is then read from the API server
// (APIReader, else Client): gone, replaced by a new pod of its name, or terminating is
// evicted, to be awaited and counted like any eviction; otherwise the eviction failed.
// When that read fails too, the pod counts against the workload's disruption budget for
// the rest of the cycle, so that a lost answer never lets more of its pods go at once
// than the budget allows.
func (u *Updater) evictionLost(ctx context.Context, c *candidate, err error) bool {
	gone, _ := u.evictionOutcome(ctx, c, err)
	return gone
}

// evictionOutcome is evictionLost, and whether the outcome stays unknown (the pod could
// not be read back).
func (u *Updater) evictionOutcome(ctx context.Context, c *candidate, err error) (gone, unknown bool) {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || refusedByBudget(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return false, false
	}
	cur := &corev1.Pod{}
	switch gerr := u.apiReader().Get(ctx, client.ObjectKeyFromObject(c.pod), cur); {
	case apierrors.IsNotFound(gerr):
		return true, false
	case gerr != nil:
		c.p.wl.budget.Took()
		return false, true
	}
	return cur.UID != c.pod.UID || cur.DeletionTimestamp != nil, false
}

// evictionFailed records a failed eviction on c: a pod that changed or is going away is
// left to the next cycle; other errors wait RetryBackoff; a refusal (refusedByBudget)
// holds the workload's other pods for this cycle and its evictions for the workload's
// refusal backoff (refused, refusalGate).
func (u *Updater) evictionFailed(ctx context.Context, c *candidate, err error, now time.Time) {
	log := klog.FromContext(ctx).WithValues("autoscaler", klog.KObj(c.p.gfa), "pod", klog.KObj(c.pod))
	p := c.p
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// Gone, replaced meanwhile, or its namespace is being deleted.
		c.skip(SkipEvictionError, "the pod changed or is going away: "+err.Error())
	case refusedByBudget(err):
		evictionsTotal.WithLabelValues(ResultRefused).Inc()
		msg := "eviction refused: " + evictionRefusal(err)
		s := u.refused(p.ref, c.need, msg, now)
		p.wl.refused = s.message()
		c.skip(SkipPDB, s.message())
		u.event(p.gfa, c.pod, corev1.EventTypeWarning, EventEvictionRefused, "Evict", "pod "+c.pod.Name+": "+s.message())
		log.Info("Eviction refused", "reason", msg, "refusalsInARow", s.n, "nextTry", s.until)
	default:
		evictionsTotal.WithLabelValues(ResultError).Inc()
		msg := "eviction failed: " + err.Error()
		u.retry[c.pod.UID] = retryState{until: now.Add(u.Config.RetryBackoff), reason: SkipEvictionError, msg: msg}
		c.skip(SkipEvictionError, msg)
		u.eventOnce(p.gfa, "evict-failed", corev1.EventTypeWarning, EventEvictionFailed, "Evict", "pod "+c.pod.Name+": "+msg)
		log.Error(err, "Eviction failed")
	}
}

// refusalState is a workload whose evictions the PodDisruptionBudgets refused n times in
// a row, the last with msg: none is tried before until unless more urgent than class
// (urgency).
type refusalState struct {
	n     int
	until time.Time
	msg   string
	class int
}

// message is the refusal as status.updater and the events say it: the API server's
// answer, how many in a row, and when the next try is.
func (s refusalState) message() string {
	return fmt.Sprintf("%s (%d refusal(s) in a row; next try at %s)", s.msg, s.n, stamp(s.until))
}

// urgency ranks a need for the refusal backoff: 2 a rollback, 1 other urgent growth, 0
// the rest.
func urgency(n Need) int {
	switch {
	case n.Rollback:
		return 2
	case n.Urgent:
		return 1
	}
	return 0
}

// refused records a refusal by the PodDisruptionBudgets of an eviction of a pod of
// workload ref that needed need, at now, and returns the workload's refusal state: the
// n-th refusal in a row waits RetryBackoff × 2ⁿ⁻¹, at most MaxRefusalBackoff
// (UnreadyBackoff). A budget is the workload's, so every pod of it waits, not only the
// one refused: a workload of many pods is not tried once a cycle pod after pod. The
// count starts over after an eviction of the workload is accepted (evict), after a
// quiet MaxRefusalBackoff past the last wait (forgetGone), and for a need more urgent
// than the ones refused (a rollback or protective growth after a refused shrink), which
// refusalGate lets through at once.
func (u *Updater) refused(ref workload.Ref, need Need, msg string, now time.Time) refusalState {
	s, cls := u.refusals[ref], urgency(need)
	if cls > s.class || now.After(s.until.Add(MaxRefusalBackoff)) {
		s = refusalState{class: cls}
	}
	s.n++
	s.msg = msg
	s.until = now.Add(UnreadyBackoff(s.n, u.Config.RetryBackoff, max(MaxRefusalBackoff, u.Config.RetryBackoff)))
	u.refusals[ref] = s
	return s
}

// evicted records an accepted eviction of c's pod at now: the replacement to await, a
// shrink to verify, the in-place fallback counter, and the events, whose note says why
// (and whether urgent, a rollback, or with compute held).
func (u *Updater) evicted(ctx context.Context, c *candidate, now time.Time) {
	p := c.p
	// Counted as a fallback only when the pod is actually recreated (evicted), not for
	// each cycle a recreate waits at a gate.
	if p.mode == gpufracv1.UpdateModeInPlaceOrRecreate {
		inPlaceTotal.WithLabelValues(ResultFallback).Inc()
	}
	u.replaced(ctx, c, now)
	if c.need.Shrink {
		p.recordShrink(c.alloc, now, u.Config.VerificationPeriod)
	}
	kind := "to apply the recommendation"
	switch {
	case c.need.Rollback:
		kind = "to roll back to the floor"
	case c.need.Urgent:
		kind = "urgently (protective growth)"
	case c.need.Consolidate:
		kind = "to empty a shared GPU"
	}
	note := fmt.Sprintf("evicted %s: %s", kind, truncate(c.need.Reason(), 600))
	if len(p.held) > 0 {
		note += "; compute not shrunk (" + joinScalers(p.held) + " scales on GPU utilisation): the replacement gets at least " + describeAllocs(p.st.HeldCompute)
	}
	if c.need.Consolidate {
		u.noteConsolidated(c, now)
	}
	u.podEvent(c, corev1.EventTypeNormal, EventEvicted, "Evict", note)
	klog.FromContext(ctx).Info("Evicted pod", "autoscaler", klog.KObj(p.gfa), "pod", klog.KObj(c.pod),
		"urgent", c.need.Urgent, "rollback", c.need.Rollback, "reason", c.need.Reason())
	c.done()
}

// multiplePDBsMessage is what the Eviction API answers (HTTP 500, no reason) for a pod
// that more than one PodDisruptionBudget selects, which it does not support
// (kubernetes pkg/registry/core/pod/storage/eviction.go, 1.37): no eviction of the pod
// can succeed until the budgets are fixed.
const multiplePDBsMessage = "more than one PodDisruptionBudget"

// refusedByBudget reports whether an eviction's err is the PodDisruptionBudgets'
// answer: a refusal (HTTP 429 with the cause DisruptionBudget, or a message that names
// the disruption budget, as API servers before the cause wrote it), or the pod selected
// by more than one budget (multiplePDBsMessage). Either would answer the workload's
// other pods the same way. A 429 without them is API Priority and Fairness throttling
// the request: a failure like any other.
func refusedByBudget(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	s := se.Status()
	if strings.Contains(s.Message, multiplePDBsMessage) {
		return true
	}
	if !apierrors.IsTooManyRequests(err) {
		return false
	}
	return apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause) || strings.Contains(strings.ToLower(s.Message), "disruption budget")
}

// evictionRefusal extracts the PodDisruptionBudget's message from a 429 eviction error.
func evictionRefusal(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		s := se.Status()
		msg := s.Message
		if s.Details != nil {
			for _, c := range s.Details.Causes {
				if c.Message != "" {
					msg += " " + c.Message
				}
			}
		}
		return msg
	}
	return err.Error()
}

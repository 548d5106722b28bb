package updater

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/statuslease"
)

// A gate is one check an out-of-date pod passes before it is changed, as VPA's
// PodEvictionAdmission: it returns "" to let the pod through, else a skip reason (the
// Skip* constants, status.updater.updates[].skipReason) and a message.
type gate func(c *candidate) (reason, msg string)

// admit runs gates in order; the first that refuses records its skip on c, and admit
// returns false.
func admit(c *candidate, gates ...gate) bool {
	for _, g := range gates {
		if reason, msg := g(c); reason != "" {
			c.skip(reason, msg)
			return false
		}
	}
	return true
}

// planGates are the gates of the plan, in order: a pod that passes them is a candidate
// of this cycle.
func (u *Updater) planGates(now time.Time) []gate {
	return append(baseGates(), u.shapeGate, u.hysteresisGate(now))
}

// baseGates are the plan's gates before the hysteresis: all of them for a pod replaced
// for another reason than its own target (consolidation: nothing there to persist).
func baseGates() []gate {
	return []gate{pendingGate, heldGate, runToCompletionGate, revisionGate, modeGate, recommendationGate, recommenderGate, outdatedGate, windowGate, publishingGate}
}

// recreateGates are the plan's gates that pass a change in place but may hold a
// recreation (runToCompletionGate, revisionGate): a candidate whose change in place fell
// back to a recreation (changeInPlace) passes them again as one.
func recreateGates() []gate {
	return []gate{runToCompletionGate, revisionGate}
}

// replacementGates are the gates a candidate passes before it is replaced (evicted or
// deleted), in order; the disruption budget (budgetGate) and the placement check
// (placementGate) follow for pods that are Ready.
func (u *Updater) replacementGates(cy *cycle) []gate {
	return []gate{u.warmUpGate(cy.now), cy.admissionGate, u.stuckGate(cy.now), u.retryGate(cy.now)}
}

// pendingGate: a pod that is not running yet (SkipPending).
func pendingGate(c *candidate) (string, string) {
	if c.pod.Status.Phase == corev1.PodPending {
		return SkipPending, "pod is not running yet"
	}
	return "", ""
}

// heldGate: a change the decision holds (guardrail, floor, compute held).
func heldGate(c *candidate) (string, string) {
	return c.need.HeldReason, c.need.HeldMessage
}

// runToCompletionGate: a pod that runs to completion (restartPolicy Never or OnFailure,
// whoever controls it: a Job, a CronJob's Job, a workflow engine) is replaced only for
// growth that rests on its own memory running out (Need.MemoryRunningOut: its
// out-of-memory exit), the run failing already (SkipRunToCompletion). Replacing it ends
// its run: the work done is lost and, for a Job, the evicted or deleted pod counts as a
// failure against its backoffLimit (a Job at its limit fails for good, with no
// replacement at all). Its workload's next pods (retries, further completions, the next
// scheduled run) get the recommendation, and the rollback floor, from the webhook. The
// observed peak, a rollback floor or a latency breach is the workload's: a peak near a
// pod's memory may be another pod's (one large shard of a Job, an earlier run of a
// CronJob), and a floor raised by another pod's out-of-memory exit would otherwise evict
// every sibling still running below it, each a failure of the Job (one exit in an 8-way
// parallel Job: 1 + 7 failures, past the default backoffLimit 6). Held, the pod finishes
// or runs out of memory itself, at most the one failure its eviction would have cost
// for certain; then its own exit replaces it. In place (no eviction) is not held.
func runToCompletionGate(c *candidate) (string, string) {
	rp := c.pod.Spec.RestartPolicy
	if c.need.MemoryRunningOut || c.action == gpufracv1.PodUpdateInPlace || rp == "" || rp == corev1.RestartPolicyAlways {
		return "", ""
	}
	if c.need.Protective {
		return SkipRunToCompletion, fmt.Sprintf("pod runs to completion (restartPolicy %s) and has not run out of memory itself: replacing it for its workload's observed peak, rollback floor or latency breach would end its run and count as a failure of its Job; its workload's next pods get the floor and the recommendation from the webhook", rp)
	}
	return SkipRunToCompletion, fmt.Sprintf("pod runs to completion (restartPolicy %s): replacing it would end its run and count as a failure of its Job; its workload's next pods get the recommendation", rp)
}

// modeGate: updateMode Off (what would be done, and when), Initial, or unknown.
func modeGate(c *candidate) (string, string) {
	p := c.p
	switch p.mode {
	case gpufracv1.UpdateModeRecreate, gpufracv1.UpdateModeInPlaceOrRecreate:
		return "", ""
	case gpufracv1.UpdateModeOff:
		verb := "evict"
		if c.action == gpufracv1.PodUpdateInPlace {
			verb = "change in place"
		}
		when := "now"
		switch {
		case c.need.Urgent:
		case p.werr != nil:
			when = "once the resize windows are fixed"
		case !p.window.Open:
			when = p.window.opening()
		}
		return SkipModeOff, fmt.Sprintf("updateMode Off (recommendation only): would %s %s", verb, when)
	case gpufracv1.UpdateModeInitial:
		return SkipModeInitial, "updateMode Initial: fractions apply only when pods are created"
	}
	return SkipModeOff, fmt.Sprintf("unknown updateMode %q: nothing is applied", p.mode)
}

// recommendationGate: a recommendation the webhook would not apply. Below its
// --min-confidence the webhook admits pods unchanged, with the whole GPU
// (AdmittedUnchanged): a protective growth then goes ahead, since the replacement only
// holds more.
func recommendationGate(c *candidate) (string, string) {
	if c.p.recSkip == SkipLowConfidence && LowConfidenceAdmits(c.need) {
		return "", ""
	}
	return c.p.recSkip, c.p.recMsg
}

// recommenderGate: for a change that is not protective, a recommender instance that is
// not keeping the recommendation current: its status Lease is stale (recommenderStale),
// or it leaves the autoscaler's namespace out while its Lease is fresh (notSelected).
// Protective growth protects a pod from what it uses now, so an old target still serves
// it, and a rollback reaches the updater's own floor: neither needs a current
// recommendation, whether urgentGrowth makes them urgent or they wait for a window.
func recommenderGate(c *candidate) (string, string) {
	switch {
	case c.need.Protective:
		return "", ""
	case c.p.staleMsg != "":
		return SkipRecommenderStale, c.p.staleMsg
	case c.p.notSelectedMsg != "":
		return SkipNamespaceNotSelected, c.p.notSelectedMsg
	}
	return "", ""
}

// notSelected returns the message of gfr's ConfigUnsupported condition while it is True
// for ReasonNamespaceNotSelected: the recommender instance the autoscaler names leaves
// its namespace out, so no instance keeps the recommendation current, and that
// instance's status Lease, fresh, does not say so. "" otherwise (also for a nil gfr).
func notSelected(gfr *gpufracv1.GPUFractionRecommendation) string {
	if gfr == nil {
		return ""
	}
	c := meta.FindStatusCondition(gfr.Status.Conditions, gpufracv1.ConditionConfigUnsupported)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != gpufracv1.ReasonNamespaceNotSelected {
		return ""
	}
	return c.Message
}

// outdatedGate: for a change that is not protective, a recommendation computed for an
// older generation of the autoscaler's spec (recommendationOutdated). Replaced towards
// it, a pod would be replaced again once the recommender recomputes it for the spec the
// user set (a maxMemory lowered, a memoryHeadroomPercent raised: shrunk below what the
// new spec calls for, then grown back). Protective growth goes ahead, as under
// recommenderGate: an old target still protects a pod from what it uses now.
func outdatedGate(c *candidate) (string, string) {
	if c.p.outdatedMsg == "" || c.need.Protective {
		return "", ""
	}
	return SkipRecommendationOutdated, c.p.outdatedMsg
}

// recommendationOutdated says why gfr was computed for an older generation of gfa's
// spec than gfa's metadata.generation ("" when it was computed for the current one, when
// gfr is nil, or when it states no generation: a recommender that writes none).
func recommendationOutdated(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) string {
	if gfr == nil || gfr.Status.ObservedGeneration <= 0 || gfr.Status.ObservedGeneration >= gfa.Generation {
		return ""
	}
	return fmt.Sprintf("the recommendation was computed for spec generation %d and the autoscaler is at generation %d (its spec was edited since): the recommender has not recomputed it yet, so only protective growth goes ahead",
		gfr.Status.ObservedGeneration, gfa.Generation)
}

// recommenderStale reads the status Lease of recommender instance name once per cycle
// and returns why it is stale ("" when fresh or when Config.RecommenderLeaseMaxAge is 0):
// not renewed within Config.RecommenderLeaseMaxAge, or within the Lease's own
// leaseDurationSeconds (3 × the recommender's --interval) where that is longer
// (statuslease.FreshOrDeclared).
// A Lease that cannot be read counts as stale: holding is the safe side.
func (u *Updater) recommenderStale(ctx context.Context, cy *cycle, name string) string {
	maxAge := u.Config.RecommenderLeaseMaxAge
	if maxAge <= 0 {
		return ""
	}
	if msg, ok := cy.recommenders[name]; ok {
		return msg
	}
	ns, lease := u.Config.RecommenderLeaseNamespace, statuslease.RecommenderLeaseName(name)
	fresh, allowed, err := statuslease.FreshOrDeclared(ctx, u.apiReader(), ns, lease, maxAge)
	msg := ""
	switch {
	case err != nil:
		msg = fmt.Sprintf("cannot read recommender %q's status Lease %s/%s: %v; only protective growth goes ahead", name, ns, lease, err)
	case !fresh:
		msg = fmt.Sprintf("recommender %q's status Lease %s/%s was not renewed in the last %v (recommender down, without a leader, or its cycles failing): the recommendation is not kept current, so only protective growth goes ahead", name, ns, lease, allowed)
	}
	cy.recommenders[name] = msg
	if msg == "" {
		recommenderAvailable.WithLabelValues(name).Set(1)
	} else {
		recommenderAvailable.WithLabelValues(name).Set(0)
	}
	return msg
}

// windowGate: for a change that is not urgent (Admissible), a resize window that does
// not parse, or none open. Windows do not govern urgent (protective) growth, so a window
// that does not parse does not hold it either.
func windowGate(c *candidate) (string, string) {
	p := c.p
	switch {
	case Admissible(c.need, p.window.Open && p.werr == nil):
		return "", ""
	case p.werr != nil:
		return SkipWindowInvalid, p.werr.Error()
	}
	return SkipWindowClosed, "no resize window is open; next opens at " + stamp(p.window.NextStart)
}

// publishingGate: the held compute or a new floor is not yet published for the webhook.
func publishingGate(c *candidate) (string, string) {
	switch {
	case c.p.heldPending != "":
		return SkipHeldComputePending, c.p.heldPending
	case c.p.floorPending != "":
		return SkipAwaitingFloor, c.p.floorPending
	}
	return "", ""
}

// hysteresisGate: a change inside the bounds that has not persisted, or a round of
// replacements too soon after the last (Hysteresis.Allow).
func (u *Updater) hysteresisGate(now time.Time) gate {
	return func(c *candidate) (string, string) {
		if ok, reason, msg := u.hyst.Allow(c.p.ref.String(), now, c.need); !ok {
			return reason, msg
		}
		return "", ""
	}
}

// warmUpGate: nothing is replaced for Config.WarmUp after the updater started.
func (u *Updater) warmUpGate(now time.Time) gate {
	return func(*candidate) (string, string) {
		if since := now.Sub(u.started); since < u.Config.WarmUp {
			return SkipWarmUp, fmt.Sprintf("the updater started %v ago; no evictions for the first %v", since.Round(time.Second), u.Config.WarmUp)
		}
		return "", ""
	}
}

// admissionGate: the admission webhook's status Lease was stale at the start of the
// cycle (a replacement would not get its fraction).
func (cy *cycle) admissionGate(*candidate) (string, string) {
	if !cy.fresh {
		return SkipAdmissionUnavailable, cy.leaseMsg
	}
	return "", ""
}

// stuckGate: the workload's replacements are paused (a replacement came back without
// its fraction).
func (u *Updater) stuckGate(now time.Time) gate {
	return func(c *candidate) (string, string) {
		if s, ok := u.stuck[c.p.ref]; ok && now.Before(s.until) {
			return SkipReplacementUnchanged, s.msg
		}
		return "", ""
	}
}

// retryGate: the pod's last eviction was refused or failed less than RetryBackoff ago.
func (u *Updater) retryGate(now time.Time) gate {
	return func(c *candidate) (string, string) {
		if r, ok := u.retry[c.pod.UID]; ok && now.Before(r.until) {
			return r.reason, r.msg + fmt.Sprintf(" (retry at %s)", stamp(r.until))
		}
		return "", ""
	}
}

// budgetGate: the workload's disruption budget (Budget.Allow), or a refusal of the
// Eviction API for another of its pods this cycle (it would refuse this one too).
func budgetGate(c *candidate) (string, string) {
	wl := c.p.wl
	if reason, msg := wl.budget.Allow(); reason != "" {
		if reason == SkipInFlight && wl.missing != "" {
			msg += ": " + wl.missing
		}
		return reason, msg
	}
	if wl.refused != "" {
		return SkipPDB, wl.refused
	}
	return "", ""
}

// refusalGate: the PodDisruptionBudgets refused an eviction of the workload's pods
// lately and its refusal backoff (refused) has not run out; a need more urgent than the
// ones refused goes through.
func (u *Updater) refusalGate(now time.Time) gate {
	return func(c *candidate) (string, string) {
		s, ok := u.refusals[c.p.ref]
		if !ok || !now.Before(s.until) || urgency(c.need) > s.class {
			return "", ""
		}
		return SkipPDB, s.message()
	}
}

// admissionFresh reads the admission webhook's status Lease and sets the
// admission-available gauge. The message says why it is not fresh.
func (u *Updater) admissionFresh(ctx context.Context) (bool, string) {
	fresh, err := statuslease.Fresh(ctx, u.apiReader(), u.Config.LeaseNamespace, u.Config.LeaseName, u.Config.LeaseMaxAge)
	msg := ""
	switch {
	case err != nil:
		fresh = false
		msg = fmt.Sprintf("cannot read the admission webhook's status Lease %s/%s: %v", u.Config.LeaseNamespace, u.Config.LeaseName, err)
	case !fresh:
		msg = fmt.Sprintf("the admission webhook's status Lease %s/%s was not renewed in the last %v (webhook down or not ready): a replaced pod would not get its fraction", u.Config.LeaseNamespace, u.Config.LeaseName, u.Config.LeaseMaxAge)
	}
	if fresh {
		admissionAvailable.Set(1)
	} else {
		admissionAvailable.Set(0)
	}
	return fresh, msg
}

// mayReplaceNow checks that the cluster-wide eviction rate limit has a token free and
// the admission webhook's Lease again right before a pod is replaced (the cycle may have
// taken a while); when either says no it records the skip on c and returns false. The
// token is taken by the call that follows, unless the PodDisruptionBudgets refuse the
// eviction (refusedByBudget): a workload whose budget refuses every eviction (tried
// once a cycle) then does not spend every other workload's tokens.
func (u *Updater) mayReplaceNow(ctx context.Context, c *candidate) bool {
	if u.limiter.Limit() != rate.Inf && u.limiter.Tokens() < 1 {
		c.skip(SkipRateLimited, fmt.Sprintf("cluster-wide eviction rate limit (%v/s, burst %d) reached", u.Config.EvictionRate, u.Config.EvictionBurst))
		return false
	}
	if ok, msg := u.admissionFresh(ctx); !ok {
		c.skip(SkipAdmissionUnavailable, msg)
		return false
	}
	return true
}

package updater

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/statuswrite"
	"github.com/gpufrac/gpufrac/workload"
)

// finish is the plan's report: it completes status.updater (the pending updates and why
// the autoscaler is blocked), records the autoscaler's events and writes the status when
// it changed.
func (u *Updater) finish(ctx context.Context, p *plan) error {
	pending := p.pending()
	p.recordRound(u.hyst)
	p.report(pending, u.Config.MaxReported)
	u.recordEvents(ctx, p, pending)
	return u.writeStatus(ctx, p)
}

// recordRound writes the workload's last round of replacements (Hysteresis.Round) into
// status.updater.lastRound — on the autoscaler in charge and on the others of the same
// workload, so that a restarted updater, also one where another autoscaler has taken
// charge meanwhile, goes on with the round as it would have. A round this process does
// not know (none since it started) keeps the one carried over.
func (p *plan) recordRound(h *Hysteresis) {
	if p.ref == (workload.Ref{}) {
		return // target unresolved
	}
	r := h.Round(p.ref.String())
	if r.Start.IsZero() {
		return
	}
	p.st.LastRound = &gpufracv1.ReplacementRound{Started: *secs(r.Start), Grow: r.Grow, Shrink: r.Shrink}
}

// pending returns the plan's updates still pending (not applied this cycle), urgent
// first, then by pod name.
func (p *plan) pending() []*candidate {
	var pending []*candidate
	for _, c := range p.updates {
		if c.upd.Reason != "" {
			pending = append(pending, c)
		}
	}
	sort.SliceStable(pending, func(i, j int) bool {
		a, b := pending[i], pending[j]
		if a.need.Urgent != b.need.Urgent {
			return a.need.Urgent
		}
		return a.pod.Name < b.pod.Name
	})
	return pending
}

// report lists at most limit pending updates in status.updater.updates and sets the
// blocked reason: the autoscaler's own, or, when nothing was applied, the first pending
// pod's skip reason.
func (p *plan) report(pending []*candidate, limit int) {
	st := p.st
	for i, c := range pending {
		if i >= limit {
			break
		}
		st.Updates = append(st.Updates, c.upd)
	}
	switch {
	case p.blockR != "":
		st.BlockedReason, st.BlockedMessage = p.blockR, truncate(p.blockMsg, 1000)
	case !p.acted && len(pending) > 0:
		for _, c := range pending {
			if c.upd.SkipReason != "" {
				st.BlockedReason, st.BlockedMessage = c.upd.SkipReason, c.upd.SkipMessage
				break
			}
		}
	}
}

// recordEvents records the autoscaler's events of the cycle: a rollback, and, once
// while the note stays the same, Off's would-do report, updates blocked, pods that carry
// other values than admitted (checkAdmitted), applied records that do not parse
// (reportInvalidRecords), the crash-loop deadlock and compute held (replacements
// unplaceable are noted by placementGate).
func (u *Updater) recordEvents(ctx context.Context, p *plan, pending []*candidate) {
	gfa, st := p.gfa, p.st
	if p.rollback != "" {
		u.event(gfa, nil, corev1.EventTypeWarning, EventRolledBack, "Rollback", p.rollback)
	}
	if p.mode == gpufracv1.UpdateModeOff {
		u.wouldUpdate(p, pending)
	}
	switch st.BlockedReason {
	case SkipAdmissionUnavailable, SkipRecommenderStale, SkipNamespaceNotSelected, SkipWindowInvalid, SkipTargetUnresolved, SkipReplacementUnchanged, SkipDuplicateTarget:
		u.eventOnce(gfa, "blocked", corev1.EventTypeWarning, EventUpdatesBlocked, "Update", "updates blocked ("+st.BlockedReason+"): "+st.BlockedMessage)
	default:
		u.forget(gfa, "blocked")
	}
	if !p.unplaceable {
		u.forget(gfa, "unplaceable")
	}
	if p.mismatchMsg != "" {
		u.eventOnce(gfa, "mismatch", corev1.EventTypeWarning, EventFractionMismatch, "Update", truncate(p.mismatchMsg, 1000))
	} else {
		u.forget(gfa, "mismatch")
	}
	u.reportInvalidRecords(ctx, p)
	if p.blockR == "" {
		u.deadlock(p, pending)
		u.placementHeld(p, pending)
	}
	if len(p.held) > 0 {
		note := joinScalers(p.held) + " scales the workload on GPU utilisation: compute is not shrunk; replacements (for memory too) and new pods get at least the compute their siblings hold"
		if len(st.HeldCompute) > 0 {
			note += " (" + describeAllocs(st.HeldCompute) + ")"
		}
		u.eventOnce(gfa, "held", corev1.EventTypeNormal, EventComputeShrinkHeld, "Update", note)
	} else {
		u.forget(gfa, "held")
	}
}

// wouldUpdate records updateMode Off's WouldUpdate event: the pods it would change, how
// and when (at most five named).
func (u *Updater) wouldUpdate(p *plan, pending []*candidate) {
	if len(pending) == 0 {
		u.forget(p.gfa, "would")
		return
	}
	var parts []string
	for i, c := range pending {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(pending)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", c.pod.Name, c.upd.Reason))
	}
	when := "now"
	if !p.window.Open {
		when = p.window.opening()
	}
	note := fmt.Sprintf("updateMode Off: would %s %d pod(s) %s: %s", strings.ToLower(string(pending[0].action)), len(pending), when, strings.Join(parts, "; "))
	u.eventOnce(p.gfa, "would", corev1.EventTypeNormal, EventWouldUpdate, "DryRun", note)
}

// writeStatus writes status.updater with a JSON merge patch when it differs from the
// last one written (or read); an autoscaler gone meanwhile is not an error. The next
// cycle goes on from st whether the write succeeds or not (Updater.decided).
func (u *Updater) writeStatus(ctx context.Context, p *plan) error {
	gfa, st := p.gfa, p.st
	u.decided[gfa.UID] = st.DeepCopy()
	if equality.Semantic.DeepEqual(p.prev, st) {
		u.writeFails.Succeeded(gfa.UID) // the API server holds it
		return nil
	}
	base := gfa.DeepCopy()
	base.Status.Updater = p.prev.DeepCopy()
	mod := gfa.DeepCopy()
	mod.Status.Updater = st
	if err := u.Client.Status().Patch(ctx, mod, client.MergeFrom(base)); err != nil {
		if apierrors.IsNotFound(err) {
			u.writeFails.Succeeded(gfa.UID)
			return nil
		}
		u.statusWriteFailed(gfa, err)
		return fmt.Errorf("writing status.updater: %w", err)
	}
	u.writeFails.Succeeded(gfa.UID)
	u.written[gfa.UID] = st.DeepCopy()
	return nil
}

// statusWriteFailed counts a failed write of gfa's status.updater: from the
// statuswrite.Threshold-th failure in a row on, each one counts in
// gpufrac_updater_status_write_failures_total (by API status reason) and a
// StatusWriteFailed Warning event goes on the autoscaler, once per message, so a write
// that fails every cycle shows outside the logs.
func (u *Updater) statusWriteFailed(gfa *gpufracv1.GPUFractionAutoscaler, err error) {
	n, count, event := u.writeFails.Failed(gfa.UID, err)
	if count {
		statusWriteFailures.WithLabelValues(statuswrite.Reason(err)).Inc()
	}
	if event {
		u.event(gfa, nil, corev1.EventTypeWarning, statuswrite.EventReason, "WriteStatus",
			fmt.Sprintf("status.updater could not be written for %d cycles in a row (what the updater decided is kept in memory and written again each cycle): %v", n, err))
	}
}

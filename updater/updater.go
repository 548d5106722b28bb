package updater

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/statuswrite"
	"github.com/gpufrac/gpufrac/workload"
)

// Updater replaces (or changes in place) running pods whose GPU fraction is out of date
// with their autoscaler's recommendation, inside resize windows, within disruption
// budgets, and rolls back a shrink when a guardrail trips. Create it with New; it is a
// manager.Runnable that needs leader election.
//
// A cycle (RunOnce) runs named steps, each in its own file: target resolution
// (target.go), window state (window.go), the horizontal-scaler hold (horizontal.go),
// rollback verification and out-of-memory floors (rollback.go), settling earlier
// replacements (settle.go), the per-pod decision (Evaluate in decide.go, applied in
// candidates.go), the per-pod gates (gates.go, placement.go), then the actions — in place
// (inplace.go), eviction (evict.go), deletion of not-Ready pods (unready.go) — and the
// status report with the autoscaler's events (report.go). What one cycle shares lives in
// one struct (cycle.go); what outlives a cycle lives here.
type Updater struct {
	// Client reads autoscalers, recommendations, pods, ReplicaSets/StatefulSets/
	// DaemonSets/Jobs and HorizontalPodAutoscalers (an informer cache in cmd/updater)
	// and writes evictions,
	// pod patches and status.
	Client client.Client
	// APIReader reads the status Leases (the admission webhook's and the recommenders'),
	// KEDA ScaledObjects, node capacity and a pod after a lost eviction answer directly
	// from the API server (apiReader). Nil uses Client (ScaledObjects: not read).
	APIReader client.Reader
	// Scale checks targets of non-native kinds; nil rejects them as unsupported.
	Scale workload.ScaleChecker
	// Events records events; nil records none.
	Events events.EventRecorder
	// InPlace changes pods in place (the annotations backend); nil recreates them.
	InPlace InPlacer
	// Config holds the settings (defaults applied by New).
	Config Config
	// Now returns the current time; tests replace it.
	Now func() time.Time

	limiter *rate.Limiter
	started time.Time
	owners  workload.Owners
	expect  map[workload.Ref][]*expectation
	retry   map[types.UID]retryState
	// refusals are the workloads whose last eviction the PodDisruptionBudgets refused,
	// with the backoff before the next (refusalGate).
	refusals map[workload.Ref]refusalState
	stuck    map[workload.Ref]stuckState
	written  map[types.UID]*gpufracv1.UpdaterStatus // last written: what the API server holds, the next patch's base
	decided  map[types.UID]*gpufracv1.UpdaterStatus // last decided, written or not: what the next cycle goes on from
	noted    map[types.UID]map[string]string
	// writeFails counts the status writes of each autoscaler that failed in a row.
	writeFails     statuswrite.Failures
	kedaAbsentTill time.Time
	windowOpens    time.Time // the next resize window an out-of-date pod waits for (nextCycle)
	hyst           *Hysteresis
	unready        map[workload.Ref]unreadyState
	// drained are the shared GPUs consolidation emptied lately, by "node/ID", and
	// consolidationHeld when consolidation may start again after one was refilled
	// (checkDrained).
	drained           map[string]*drainState
	consolidationHeld time.Time
	// consolidationSkip are the shared GPUs consolidation passes over until the time
	// given (consolidationOutcome).
	consolidationSkip map[string]time.Time
}

// retryState is a pod whose eviction failed: not retried before until.
type retryState struct {
	until       time.Time
	reason, msg string
}

// New returns an updater with cfg's defaults applied.
func New(c client.Client, apiReader client.Reader, cfg Config) *Updater {
	cfg = cfg.WithDefaults()
	lim := rate.Limit(cfg.EvictionRate)
	if cfg.EvictionRate < 0 {
		lim = rate.Inf
	}
	return &Updater{
		Client:            c,
		APIReader:         apiReader,
		Config:            cfg,
		Now:               time.Now,
		limiter:           rate.NewLimiter(lim, cfg.EvictionBurst),
		owners:            workload.Owners{Reader: c},
		expect:            map[workload.Ref][]*expectation{},
		retry:             map[types.UID]retryState{},
		refusals:          map[workload.Ref]refusalState{},
		stuck:             map[workload.Ref]stuckState{},
		unready:           map[workload.Ref]unreadyState{},
		drained:           map[string]*drainState{},
		consolidationSkip: map[string]time.Time{},
		written:           map[types.UID]*gpufracv1.UpdaterStatus{},
		decided:           map[types.UID]*gpufracv1.UpdaterStatus{},
		noted:             map[types.UID]map[string]string{},
		hyst:              NewHysteresis(cfg.PersistCycles, cfg.PersistFor, cfg.MinReplacementInterval),
	}
}

// NeedLeaderElection is true: only the leader evicts.
func (u *Updater) NeedLeaderElection() bool { return true }

// Start runs a cycle every Config.Interval until ctx ends (manager.Runnable). The
// warm-up period starts now: nothing is evicted before Config.WarmUp has passed.
// Cycle errors are logged and the next cycle runs as usual.
func (u *Updater) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("updater")
	ctx = klog.NewContext(ctx, log)
	u.started = u.Now()
	log.Info("Starting", "interval", u.Config.Interval, "warmUp", u.Config.WarmUp, "evictionRate", u.Config.EvictionRate, "evictionBurst", u.Config.EvictionBurst)
	for {
		start := u.Now()
		if err := u.RunOnce(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Cycle failed")
		}
		t := time.NewTimer(max(0, u.nextCycle(start).Sub(u.Now())))
		select {
		case <-ctx.Done():
			t.Stop()
			log.Info("Stopped")
			return nil
		case <-t.C:
		}
	}
}

// nextCycle is when the cycle after the one started at start runs: Config.Interval
// later, or sooner when the last cycle left pods waiting for a resize window that opens
// before (windowOpens): a window shorter than the interval would otherwise open and
// close between two cycles.
func (u *Updater) nextCycle(start time.Time) time.Time {
	next := start.Add(u.Config.Interval)
	if w := u.windowOpens; w.After(start) && w.Before(next) {
		return w
	}
	return next
}

// windowOpensFor returns the earliest start, after now, of a resize window that an
// out-of-date pod of plans waits for (zero when none does).
func windowOpensFor(plans []*plan, now time.Time) time.Time {
	var first time.Time
	for _, p := range plans {
		if len(p.updates) == 0 || p.window.Open || !p.window.NextStart.After(now) {
			continue
		}
		if first.IsZero() || p.window.NextStart.Before(first) {
			first = p.window.NextStart
		}
	}
	return first
}

// RunOnce runs one cycle at u.Now(): for every autoscaler it evaluates the workload's
// pods, changes or evicts those it may (most urgent first, across autoscalers), and
// writes status.updater. It returns listing errors and the joined status write errors.
func (u *Updater) RunOnce(ctx context.Context) error {
	start := time.Now()
	defer func() { cycleDuration.Observe(time.Since(start).Seconds()) }()
	now := u.Now()
	if u.started.IsZero() {
		u.started = now
	}
	var list gpufracv1.GPUFractionAutoscalerList
	if err := u.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing GPUFractionAutoscalers: %w", err)
	}
	// Autoscaler order, the last tie-break of the replacements' order (ReplacesBefore):
	// the informer cache lists in no fixed order.
	slices.SortFunc(list.Items, func(a, b gpufracv1.GPUFractionAutoscaler) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	u.owners.Reset()
	cy := u.newCycle(ctx, now)
	cy.resolveTargets(ctx, u, list.Items)
	if err := u.planAll(ctx, cy, list.Items); err != nil {
		return err
	}
	u.consolidate(ctx, cy)
	sortByUrgency(cy.cands)
	for _, c := range cy.cands {
		u.act(ctx, cy, c)
	}
	u.consolidationOutcome(cy)
	u.windowOpens = windowOpensFor(cy.plans, now)
	cy.mirrorInCharge()
	var errs []error
	for _, p := range cy.plans {
		if err := u.finish(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", p.gfa.Namespace, p.gfa.Name, err))
		}
	}
	u.forgetGone(cy)
	if len(errs) > 0 {
		klog.FromContext(ctx).V(1).Info("Status writes failed", "errors", len(errs))
	}
	return errors.Join(errs...)
}

// sortByUrgency orders candidates across autoscalers as ReplacesBefore does: rollbacks,
// other urgent growth, then the rest; within each, the workload replaced longest ago
// first (plan.lastReplaced), then in autoscaler order (namespace, then name), each
// autoscaler's pods oldest first.
func sortByUrgency(cands []*candidate) {
	sort.SliceStable(cands, func(i, j int) bool {
		return ReplacesBefore(cands[i].need, cands[i].p.lastReplaced(), cands[j].need, cands[j].p.lastReplaced())
	})
}

// MoreUrgent reports whether a pod that needs a goes before one that needs b in a
// cycle's replacements whatever their workloads' last replacements: a rollback before
// anything else, other urgent growth before the rest.
func MoreUrgent(a, b Need) bool {
	if a.Rollback != b.Rollback {
		return a.Rollback
	}
	return a.Urgent && !b.Urgent
}

// ReplacesBefore reports whether a pod that needs a, of a workload whose pods the
// updater last replaced (evicted, deleted or changed in place) at lastA, goes before
// one that needs b, of a workload last replaced at lastB, in a cycle's replacements:
// the more urgent need first (MoreUrgent); between needs as urgent, the workload
// replaced longest ago first, one never replaced (zero time) before any other. Sorted
// stably by it, candidates listed in autoscaler order (namespace, then name), each
// autoscaler's pods oldest first, are in the order the updater replaces them, and the
// order gpufrac simulate replaces pods in. Under the eviction rate (a cycle's burst) or
// the per-device limit, a workload served this cycle goes behind every workload that
// waits since longer: one listed late is not kept waiting for ever by workloads listed
// before it that keep needing replacements.
func ReplacesBefore(a Need, lastA time.Time, b Need, lastB time.Time) bool {
	if MoreUrgent(a, b) || MoreUrgent(b, a) {
		return MoreUrgent(a, b)
	}
	return lastA.Before(lastB)
}

// act changes a candidate in place, or puts it through the replacement gates (gates.go)
// — one whose change in place falls back to a recreation through the plan's gates that
// only a recreation may fail first (recreateGates) — and replaces it: a not-Ready pod by deletion (unready.go), any other by eviction
// (evict.go). A gate that refuses records its skip reason on c.
func (u *Updater) act(ctx context.Context, cy *cycle, c *candidate) {
	if c.action == gpufracv1.PodUpdateInPlace {
		if u.changeInPlace(ctx, cy.now, c) {
			return
		}
		// Recreated instead (ErrNotInPlace): the plan's gates that let a change in
		// place through hold a recreation.
		if !admit(c, recreateGates()...) {
			return
		}
	}
	if !admit(c, u.replacementGates(cy)...) {
		return
	}
	if u.unreadyCandidate(c, cy.now) {
		// Not Ready: it serves nothing, and the budget would count it as unavailable
		// forever (a crash loop behind a PodDisruptionBudget).
		u.replaceUnready(ctx, c, cy.now)
		return
	}
	if !admit(c, budgetGate, u.refusalGate(cy.now), u.deviceGate) {
		return
	}
	placeAt, repl, ok := u.placementGate(ctx, cy, c)
	if !ok || !u.mayReplaceNow(ctx, c) {
		return
	}
	u.evict(ctx, cy, c, placeAt, repl)
}

// forgetGone drops the state of autoscalers and workloads that are gone, and retry and
// pause states that ran out.
func (u *Updater) forgetGone(cy *cycle) {
	now := cy.now
	u.writeFails.Retain(cy.seen)
	for uid := range u.decided { // every status written was decided first
		if !cy.seen[uid] {
			delete(u.written, uid)
			delete(u.decided, uid)
			delete(u.noted, uid)
		}
	}
	for r := range u.expect {
		if !cy.refs[r] {
			delete(u.expect, r)
		}
	}
	u.hyst.Forget(now.Add(-24 * time.Hour))
	for r := range u.unready {
		if !cy.refs[r] {
			delete(u.unready, r)
		}
	}
	for r, s := range u.stuck {
		// The count of unchanged replacements in a row outlives the pause (the next
		// replacement may come back unchanged again), but not a quiet day after it.
		if !cy.refs[r] || now.After(s.until.Add(MaxStuckBackoff)) {
			delete(u.stuck, r)
		}
	}
	for r, s := range u.refusals {
		// A workload quiet for MaxRefusalBackoff past its last wait starts over.
		if !cy.refs[r] || now.After(s.until.Add(MaxRefusalBackoff)) {
			delete(u.refusals, r)
		}
	}
	for uid, r := range u.retry {
		if now.After(r.until) {
			delete(u.retry, uid)
		}
	}
}

// apiReader is APIReader, else Client: what reads that must not come from an informer's
// cache (Leases, a pod after a lost eviction answer, node capacity) go through.
func (u *Updater) apiReader() client.Reader {
	if u.APIReader != nil {
		return u.APIReader
	}
	return u.Client
}

package updater

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// cycle is what one RunOnce shares between the plans of its autoscalers and the actions
// on their pods. It is created by newCycle and dropped at the end of the cycle.
type cycle struct {
	// now is the cycle's time (Updater.Now at its start).
	now time.Time
	// fresh and leaseMsg are the admission webhook's status Lease at the start of the
	// cycle (admissionFresh).
	fresh    bool
	leaseMsg string
	// podsByNS holds each namespace's pods, listed once per cycle (podsOf).
	podsByNS map[string][]corev1.Pod
	// targets is each autoscaler's resolved target; inCharge the autoscaler in charge of
	// each workload (resolveTargets).
	targets  map[types.UID]resolved
	inCharge map[workload.Ref]*gpufracv1.GPUFractionAutoscaler
	// workloads is each workload's state, shared by every autoscaler that targets it.
	workloads map[workload.Ref]*workloadCycle
	// plans are the autoscalers evaluated; cands the pods that passed the plan's gates.
	plans []*plan
	cands []*candidate
	// seen are the autoscalers listed and refs the workloads planned (to forget the
	// others).
	seen map[types.UID]bool
	refs map[workload.Ref]bool
	// capacity is the free GPU capacity per node, read at the first placement gate that
	// needs it (nil: unknown, nothing held); capacityRead says it was read.
	capacity     []NodeGPUs
	capacityRead bool
	// policies are the GPUSharingPolicies, listed at the first autoscaler on a
	// device-plugin backend (sharingPlanGate); policiesErr why they could not be.
	policies     []gpufracv1.GPUSharingPolicy
	policiesErr  error
	policiesRead bool
	// recommenders caches each recommender instance's status Lease check of the cycle
	// (recommenderStale), by instance name.
	recommenders map[string]string
	// consolidating is the shared GPU ("node/ID") this cycle's consolidation chose, and
	// consCands its pods that became candidates (consolidate, consolidationOutcome).
	consolidating string
	consCands     []*candidate
}

// newCycle starts a cycle at now and reads the admission webhook's status Lease.
func (u *Updater) newCycle(ctx context.Context, now time.Time) *cycle {
	cy := &cycle{
		now:          now,
		podsByNS:     map[string][]corev1.Pod{},
		targets:      map[types.UID]resolved{},
		inCharge:     map[workload.Ref]*gpufracv1.GPUFractionAutoscaler{},
		workloads:    map[workload.Ref]*workloadCycle{},
		seen:         map[types.UID]bool{},
		refs:         map[workload.Ref]bool{},
		recommenders: map[string]string{},
	}
	cy.fresh, cy.leaseMsg = u.admissionFresh(ctx)
	return cy
}

// planAll plans every autoscaler that is not being deleted and collects the candidates
// and the pods out of date. It returns the first listing error.
func (u *Updater) planAll(ctx context.Context, cy *cycle, gfas []gpufracv1.GPUFractionAutoscaler) error {
	outOfDate, mismatched, invalid := 0, 0, 0
	for i := range gfas {
		gfa := &gfas[i]
		cy.seen[gfa.UID] = true
		if gfa.DeletionTimestamp != nil {
			continue // being deleted (with its namespace, often): nothing to apply
		}
		t := cy.targets[gfa.UID]
		var winner *gpufracv1.GPUFractionAutoscaler
		if t.err == nil {
			winner = cy.inCharge[t.ref]
			if cy.workloads[t.ref] == nil {
				cy.workloads[t.ref] = &workloadCycle{}
			}
		}
		p, err := u.plan(ctx, cy, gfa, t, winner, cy.workloads[t.ref])
		if err != nil {
			return err
		}
		cy.plans = append(cy.plans, p)
		cy.refs[p.ref] = true
		cy.cands = append(cy.cands, p.cands...)
		outOfDate += int(p.st.PodsOutOfDate)
		mismatched += p.mismatched
		invalid += len(p.invalidRecords)
	}
	podsOutOfDate.Set(float64(outOfDate))
	podsMismatched.Set(float64(mismatched))
	podsRecordInvalid.Set(float64(invalid))
	return nil
}

// plan is one autoscaler in a cycle: what its steps found and decided.
type plan struct {
	gfa      *gpufracv1.GPUFractionAutoscaler
	prev     *gpufracv1.UpdaterStatus
	st       *gpufracv1.UpdaterStatus
	ref      workload.Ref
	mode     gpufracv1.UpdateMode
	backend  gpufracv1.BackendType
	wl       *workloadCycle // shared by every autoscaler of the workload
	cands    []*candidate
	updates  []*candidate
	acted    bool
	blockR   string
	blockMsg string
	window   WindowState
	// werr is the error of a resize window that does not parse.
	werr     error
	rollback string // event note when a rollback happened this cycle
	held     []HorizontalScaler
	targets  map[string]contract.Target
	// unchanged names the containers whose replacement the webhook admits unchanged
	// (Rules.Unchanged).
	unchanged map[string]bool
	overhead  int64 // memory overhead the webhook adds, bytes
	// pods are the workload's pods (not Succeeded or Failed), oldest first, and allocs
	// their applied fractions (and those of its Failed pods).
	pods   []*corev1.Pod
	allocs map[types.UID]PodAllocation
	// gfr is the recommendation; recSkip and recMsg say why the webhook would not apply
	// it ("" when it would).
	gfr             *gpufracv1.GPUFractionRecommendation
	recSkip, recMsg string
	// staleMsg says why the recommender that owns the autoscaler is not keeping its
	// recommendation current ("" when it is, or the check is off): recommenderGate.
	staleMsg string
	// notSelectedMsg says why no recommender instance keeps the recommendation current
	// although the named one's status Lease is fresh: that instance leaves the
	// autoscaler's namespace out (notSelected; "" when not): recommenderGate.
	notSelectedMsg string
	// outdatedMsg says why the recommendation was computed for an older generation of
	// the autoscaler's spec ("" when not): outdatedGate.
	outdatedMsg string
	// guard and guardMsg are the latency guardrail's state.
	guard    gpufracv1.Guardrail
	guardMsg string
	// heldPending and floorPending hold every replacement while the held compute or a
	// new floor is being published (why, or "").
	heldPending, floorPending string
	// evicted are the pods evicted by this updater whose replacement is awaited.
	evicted map[types.UID]bool
	// mismatched counts the pods that carry other values than the webhook wrote, and
	// mismatchMsg says which (checkAdmitted; "" when none).
	mismatched  int
	mismatchMsg string
	// invalidRecords are the plan's pods whose applied record does not parse, by name,
	// with the parse error (invalidRecordsOf).
	invalidRecords map[string]error
	// unplaceable is set when a pod was kept this cycle because its replacement could
	// not be placed.
	unplaceable bool
	// unreleased says, by pod UID, why a pod is at an older template than its
	// controller's newest (unreleasedRevisions): revisionGate.
	unreleased map[types.UID]heldRevision
	// replaceUnready: the autoscaler lets the updater delete not-Ready pods
	// (AnnotationReplaceUnready).
	replaceUnready bool
}

// lastReplaced is when the updater last replaced one of the plan's workload's pods:
// the later of status.updater.lastEvictionTime and lastInPlaceUpdateTime as the cycle
// found them (carried over from the last status, so a restarted updater or a new leader
// goes on from them); zero when never (ReplacesBefore).
func (p *plan) lastReplaced() time.Time {
	var t time.Time
	for _, at := range []*metav1.Time{p.st.LastEvictionTime, p.st.LastInPlaceUpdateTime} {
		if at != nil && at.After(t) {
			t = at.Time
		}
	}
	return t
}

// workloadCycle is one workload's state in a cycle, shared by every autoscaler that
// targets it, so the disruption budget is the workload's, not the autoscaler's.
type workloadCycle struct {
	budget  Budget
	counted bool   // budget computed
	refused string // the Eviction API's refusal of another pod this cycle
	// missing says which replacements their controller has not created past
	// --replacement-timeout (missingReplacements) and which pods stuck terminating
	// still count in flight (withoutStuck); "" when none. The in-flight message adds it.
	missing string
}

// resolved is an autoscaler's target, resolved once per cycle.
type resolved struct {
	ref workload.Ref
	err error
}

// candidate is one out-of-date pod.
type candidate struct {
	p      *plan
	pod    *corev1.Pod
	alloc  PodAllocation
	need   Need
	action gpufracv1.PodUpdateAction
	upd    gpufracv1.PodUpdate
	// releases: the pod's controller replaces it only once it is gone, so the placement
	// check gave its GPU to the replacement (placementGate, replacedOnceGone).
	releases bool
	// drain is the shared GPU a consolidation candidate (need.Consolidate) moves off.
	drain drainOf
}

// skip records why the candidate was not changed this cycle.
func (c *candidate) skip(reason, msg string) {
	c.upd.SkipReason, c.upd.SkipMessage = reason, truncate(msg, 400)
	skipsTotal.WithLabelValues(reason).Inc()
}

// done records that the candidate was changed or replaced: it is no longer pending.
func (c *candidate) done() { c.upd.SkipReason, c.upd.SkipMessage, c.upd.Reason = "", "", "" }

// plan runs one autoscaler's steps: status carried over, window state, target
// resolution, recommendation, the admission check, horizontal-scaler hold, rollback
// verification and out-of-memory floors, settling earlier replacements, then the per-pod
// decision and gates; pods that pass them become candidates.
//
// target is the autoscaler's resolved target; winner is the autoscaler in charge of the
// workload (nil when the target did not resolve): when it is another one, this autoscaler
// is ignored (SkipDuplicateTarget). wl is the workload's shared state in this cycle.
func (u *Updater) plan(ctx context.Context, cy *cycle, gfa *gpufracv1.GPUFractionAutoscaler,
	target resolved, winner *gpufracv1.GPUFractionAutoscaler, wl *workloadCycle) (*plan, error) {
	now := cy.now
	p := u.newPlan(ctx, gfa, now)
	p.windowState(now)
	if !p.takeTarget(target, winner, wl) {
		return p, nil
	}
	pods, err := u.podsOf(ctx, p.ref, cy.podsByNS)
	if err != nil {
		return nil, err
	}
	p.pods = pods
	p.gfr, p.recSkip, p.recMsg = u.recommendation(ctx, gfa)
	p.staleMsg = u.recommenderStale(ctx, cy, gfa.Spec.RecommenderOf())
	p.notSelectedMsg = notSelected(p.gfr)
	p.outdatedMsg = recommendationOutdated(gfa, p.gfr)
	if p.recSkip == "" {
		p.recSkip, p.recMsg = u.sharingPlanGate(ctx, cy, p)
	}
	u.resetUnreadyBackoff(p)
	computeHeld := u.holdCompute(ctx, p, now)
	p.guard, p.guardMsg = gpufracv1.GuardrailOf(p.gfr)
	p.readAllocations(u.Config.Backend)
	p.mismatchMsg = p.checkAdmitted(u.Config.Backend)
	p.invalidRecords = invalidRecordsOf(p.pods, p.allocs)
	u.verifyShrink(ctx, p, now)
	if p.mode != gpufracv1.UpdateModeOff && p.mode != "" {
		u.oomFloors(ctx, p, cy.podsByNS, now)
	}
	p.noFloorCondition()
	rules := p.rules(u.Config, computeHeld)
	// What the webhook writes: the recommendation, at least the policy's minMemory, and
	// a partition under a compute rollback floor it reads (the published one).
	p.targets = contract.WithFloor(gfa, contract.WithPolicy(gfa, contract.TargetsOf(gfa, p.gfr), u.Config.Backend.GPUMemoryBytes), now)
	if p.recSkip == SkipLowConfidence {
		p.targets = AdmittedUnchanged(p.targets, u.Config.Backend.GPUMemoryBytes)
		for name, t := range p.targets {
			p.unchanged[name] = t.ControlsMemory
		}
	}
	if p.recSkip == "" {
		p.recSkip, p.recMsg = p.unwritable(u.Config.Backend)
	}
	rules.Unchanged = p.unchanged
	p.heldPending = p.publishHeldCompute()
	p.floorPending = p.publishFloor(now, u.Config.Backend.GPUMemoryBytes)
	u.settleReplacements(ctx, p, now)
	p.unreleased = u.unreleasedRevisions(ctx, p.pods)
	u.selectCandidates(p, u.evaluate(p, rules, now), now)
	if p.werr != nil && p.mode != gpufracv1.UpdateModeOff && p.mode != gpufracv1.UpdateModeInitial {
		p.blockR, p.blockMsg = SkipWindowInvalid, p.werr.Error()
	}
	return p, nil
}

// newPlan starts an autoscaler's plan: status.updater carried over from the last one
// decided (written or not; else read), without an expired floor or verification.
func (u *Updater) newPlan(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler, now time.Time) *plan {
	p := &plan{gfa: gfa, mode: gfa.Spec.EffectiveUpdateMode(), replaceUnready: gfa.Annotations[AnnotationReplaceUnready] == "true", unchanged: map[string]bool{}}
	p.prev = u.written[gfa.UID]
	if p.prev == nil {
		p.prev = gfa.Status.Updater
	}
	// What the last cycle decided, also when its status write failed: a shrink's
	// verification or a floor must not be lost with the write.
	carried := p.prev
	if d := u.decided[gfa.UID]; d != nil {
		carried = d
	}
	target := gfa.Spec.TargetRef
	st := &gpufracv1.UpdaterStatus{ObservedGeneration: gfa.Generation, TargetRef: &target}
	p.st = st
	// What the last status says of another workload (spec.targetRef moved since:
	// contract.UpdaterStatusOf) is not carried: its floor, verification and rounds are
	// that workload's.
	if pr := carried; pr != nil && contract.UpdaterStatusFor(pr, gfa.Spec.TargetRef) {
		st.LastEvictionTime = pr.LastEvictionTime.DeepCopy()
		for _, a := range pr.AwaitedReplacements {
			st.AwaitedReplacements = append(st.AwaitedReplacements, *a.DeepCopy())
		}
		st.LastInPlaceUpdateTime = pr.LastInPlaceUpdateTime.DeepCopy()
		st.LastRound = pr.LastRound.DeepCopy()
		st.Verification = pr.Verification.DeepCopy()
		st.Floor = pr.Floor.DeepCopy()
		for _, c := range pr.Conditions {
			st.Conditions = append(st.Conditions, *c.DeepCopy())
		}
	}
	if FloorExpired(st.Floor, now) {
		klog.FromContext(ctx).Info("Rollback floor expired", "autoscaler", klog.KObj(gfa), "until", st.Floor.Until.Time)
		st.Floor = nil
	}
	if st.Verification != nil && !now.Before(st.Verification.Until.Time) {
		st.Verification = nil
	}
	var specOverhead int64
	p.backend, specOverhead = backendOf(gfa)
	p.overhead = u.Config.Backend.MemoryOverhead[p.backend] + specOverhead
	return p
}

// minReplicas returns spec.updatePolicy.minReplicas (default 2).
func minReplicas(gfa *gpufracv1.GPUFractionAutoscaler) int32 {
	if p := gfa.Spec.UpdatePolicy; p != nil && p.MinReplicas != nil && *p.MinReplicas >= 1 {
		return *p.MinReplicas
	}
	return 2
}

// urgentGrowth returns spec.updatePolicy.urgentGrowth (default true).
func urgentGrowth(gfa *gpufracv1.GPUFractionAutoscaler) bool {
	if p := gfa.Spec.UpdatePolicy; p != nil && p.UrgentGrowth != nil {
		return *p.UrgentGrowth
	}
	return true
}

// backendOf returns the autoscaler's backend and its spec.backend.memoryOverhead, bytes.
func backendOf(gfa *gpufracv1.GPUFractionAutoscaler) (gpufracv1.BackendType, int64) {
	var overhead int64
	if b := gfa.Spec.Backend; b != nil && b.MemoryOverhead != nil && b.MemoryOverhead.Sign() > 0 {
		overhead = b.MemoryOverhead.Value()
	}
	return gfa.Spec.EffectiveBackend(), overhead
}

// secs truncates t to whole seconds, as the API server stores metav1.Time.
func secs(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}

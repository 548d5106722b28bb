package updater

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// Event reasons the updater records (events.k8s.io) on autoscalers and pods.
const (
	// EventEvicted (Normal, pod and autoscaler): a pod was evicted to apply the
	// recommendation; the note says why.
	EventEvicted = "EvictedForFraction"
	// EventEvictionRefused (Warning, autoscaler): the Eviction API refused, e.g. a
	// PodDisruptionBudget allows no disruption.
	EventEvictionRefused = "EvictionRefused"
	// EventInPlace (Normal, pod and autoscaler): a pod's fraction was changed in place.
	EventInPlace = "FractionUpdatedInPlace"
	// EventWouldUpdate (Normal, autoscaler): updateMode Off; what the updater would do.
	EventWouldUpdate = "WouldUpdate"
	// EventRolledBack (Warning, autoscaler): a guardrail tripped after a shrink; a floor
	// is set and the previous allocation is restored.
	EventRolledBack = "RolledBack"
	// EventUpdatesBlocked (Warning, autoscaler): updates stopped for a reason the user
	// should see (admission webhook unavailable, invalid window, target unresolved,
	// replacement unchanged).
	EventUpdatesBlocked = "UpdatesBlocked"
	// EventOOMBump (Warning, autoscaler): a container ended out of memory; the memory
	// floor was raised to VPA's bump so the next pods get more.
	EventOOMBump = "OutOfMemoryBump"
	// EventComputeShrinkHeld (Normal, autoscaler): a horizontal autoscaler scales the
	// workload on GPU utilisation; compute is not shrunk.
	EventComputeShrinkHeld = "ComputeShrinkHeld"
	// EventReplacementUnplaceable (Warning, autoscaler): a pod is kept because its
	// replacement could not be placed (Placeable); the note says what is missing.
	EventReplacementUnplaceable = "ReplacementUnplaceable"
)

// Condition reasons of status.updater.conditions.
const (
	// ReasonGPUHorizontalAutoscaler: ComputeShrinkHeld True.
	ReasonGPUHorizontalAutoscaler = "GPUHorizontalAutoscaler"
	// ReasonOptedIn: ComputeShrinkHeld False although a GPU horizontal autoscaler
	// exists (AnnotationAllowComputeShrink).
	ReasonOptedIn = "OptedIn"
	// ReasonNoGPUHorizontalAutoscaler: ComputeShrinkHeld False.
	ReasonNoGPUHorizontalAutoscaler = "NoGPUHorizontalAutoscaler"
	// ReasonLatencyBreach: RolledBack True after a latency breach.
	ReasonLatencyBreach = "LatencyBreach"
	// ReasonRestartAfterShrink: RolledBack True after a container restart.
	ReasonRestartAfterShrink = "RestartAfterShrink"
	// ReasonOutOfMemory: RolledBack True after an out-of-memory exit raised the floor.
	ReasonOutOfMemory = "OutOfMemory"
	// ReasonNoFloor: RolledBack False.
	ReasonNoFloor = "NoFloor"
)

// kedaRecheck is how long the updater trusts that KEDA's CRD is absent.
const kedaRecheck = 5 * time.Minute

// Updater replaces (or changes in place) running pods whose GPU fraction is out of date
// with their autoscaler's recommendation, inside resize windows, within disruption
// budgets, and rolls back a shrink when a guardrail trips. Create it with New; it is a
// manager.Runnable that needs leader election.
type Updater struct {
	// Client reads autoscalers, recommendations, pods, ReplicaSets/Jobs and
	// HorizontalPodAutoscalers (an informer cache in cmd/updater) and writes evictions,
	// pod patches and status.
	Client client.Client
	// APIReader reads the admission webhook's status Lease and KEDA ScaledObjects
	// directly from the API server. Nil uses Client.
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

	limiter        *rate.Limiter
	started        time.Time
	owners         workload.Owners
	expect         map[workload.Ref][]*expectation
	retry          map[types.UID]retryState
	stuck          map[workload.Ref]stuckState
	written        map[types.UID]*gpufracv1.UpdaterStatus
	noted          map[types.UID]map[string]string
	kedaAbsentTill time.Time
	hyst           *Hysteresis
	// capacity is this cycle's free GPU capacity per node (read at the first eviction
	// gate that needs it; nil: unknown, nothing held).
	capacity     []NodeGPUs
	capacityRead bool
	unready      map[workload.Ref]unreadyState
}

// retryState is a pod whose eviction failed: not retried before until.
type retryState struct {
	until       time.Time
	reason, msg string
}

// stuckState pauses a workload's evictions after a replacement came back unchanged.
type stuckState struct {
	until time.Time
	msg   string
}

// New returns an updater with cfg's defaults applied.
func New(c client.Client, apiReader client.Reader, cfg Config) *Updater {
	cfg = cfg.WithDefaults()
	lim := rate.Limit(cfg.EvictionRate)
	if cfg.EvictionRate < 0 {
		lim = rate.Inf
	}
	return &Updater{
		Client:    c,
		APIReader: apiReader,
		Config:    cfg,
		Now:       time.Now,
		limiter:   rate.NewLimiter(lim, cfg.EvictionBurst),
		owners:    workload.Owners{Reader: c},
		expect:    map[workload.Ref][]*expectation{},
		retry:     map[types.UID]retryState{},
		stuck:     map[workload.Ref]stuckState{},
		unready:   map[workload.Ref]unreadyState{},
		written:   map[types.UID]*gpufracv1.UpdaterStatus{},
		noted:     map[types.UID]map[string]string{},
		hyst:      NewHysteresis(cfg.PersistCycles, cfg.PersistFor, cfg.MinReplacementInterval),
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
	t := time.NewTicker(u.Config.Interval)
	defer t.Stop()
	for {
		if err := u.RunOnce(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Cycle failed")
		}
		select {
		case <-ctx.Done():
			log.Info("Stopped")
			return nil
		case <-t.C:
		}
	}
}

// plan is one autoscaler in a cycle.
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
	rollback string // event note when a rollback happened this cycle
	held     []HorizontalScaler
	targets  map[string]Target
	overhead int64 // memory overhead the webhook adds, bytes
	// unplaceable is set when a pod was kept this cycle because its replacement could
	// not be placed.
	unplaceable bool
	// replaceUnready: the autoscaler lets the updater delete not-Ready pods
	// (AnnotationReplaceUnready).
	replaceUnready bool
}

// workloadCycle is one workload's state in a cycle, shared by every autoscaler that
// targets it, so the disruption budget is the workload's, not the autoscaler's.
type workloadCycle struct {
	budget  Budget
	counted bool   // budget computed
	refused string // the Eviction API's refusal of another pod this cycle
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
}

func (c *candidate) skip(reason, msg string) {
	c.upd.SkipReason, c.upd.SkipMessage = reason, truncate(msg, 400)
	skipsTotal.WithLabelValues(reason).Inc()
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
	log := klog.FromContext(ctx)
	var list gpufracv1.GPUFractionAutoscalerList
	if err := u.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing GPUFractionAutoscalers: %w", err)
	}
	u.owners.Reset()
	u.capacity, u.capacityRead = nil, false
	fresh, leaseMsg := u.admissionFresh(ctx)
	podsByNS := map[string][]corev1.Pod{}
	var plans []*plan
	var cands []*candidate
	seen := map[types.UID]bool{}
	refs := map[workload.Ref]bool{}
	outOfDate := 0
	// Resolve every target first: of several autoscalers on one workload the oldest is
	// in charge (admission.Precedes, as in the recommender and the webhook).
	targetsOf := map[types.UID]resolved{}
	inCharge := map[workload.Ref]*gpufracv1.GPUFractionAutoscaler{}
	for i := range list.Items {
		gfa := &list.Items[i]
		if gfa.DeletionTimestamp != nil {
			continue
		}
		ref, err := workload.Resolve(ctx, u.Client, u.Scale, gfa.Namespace, gfa.Spec.TargetRef)
		targetsOf[gfa.UID] = resolved{ref: ref, err: err}
		if err != nil {
			continue
		}
		if cur := inCharge[ref]; cur == nil || admission.Precedes(gfa, cur) {
			inCharge[ref] = gfa
		}
	}
	workloads := map[workload.Ref]*workloadCycle{}
	for i := range list.Items {
		gfa := &list.Items[i]
		seen[gfa.UID] = true
		if gfa.DeletionTimestamp != nil {
			continue // being deleted (with its namespace, often): nothing to apply
		}
		t := targetsOf[gfa.UID]
		var winner *gpufracv1.GPUFractionAutoscaler
		if t.err == nil {
			winner = inCharge[t.ref]
			if workloads[t.ref] == nil {
				workloads[t.ref] = &workloadCycle{}
			}
		}
		p, err := u.plan(ctx, gfa, now, podsByNS, t, winner, workloads[t.ref])
		if err != nil {
			return err
		}
		plans = append(plans, p)
		refs[p.ref] = true
		cands = append(cands, p.cands...)
		outOfDate += int(p.st.PodsOutOfDate)
	}
	podsOutOfDate.Set(float64(outOfDate))
	// Most urgent first across autoscalers: rollbacks, other urgent growth, then the
	// rest in autoscaler order, oldest pod first.
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.need.Rollback != b.need.Rollback {
			return a.need.Rollback
		}
		if a.need.Urgent != b.need.Urgent {
			return a.need.Urgent
		}
		return false
	})
	for _, c := range cands {
		u.act(ctx, c, now, fresh, leaseMsg)
	}
	var errs []error
	for _, p := range plans {
		if err := u.finish(ctx, p, now); err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", p.gfa.Namespace, p.gfa.Name, err))
		}
	}
	// Forget autoscalers and workloads that are gone.
	for uid := range u.written {
		if !seen[uid] {
			delete(u.written, uid)
			delete(u.noted, uid)
		}
	}
	for r := range u.expect {
		if !refs[r] {
			delete(u.expect, r)
		}
	}
	u.hyst.Forget(now.Add(-24 * time.Hour))
	for r := range u.unready {
		if !refs[r] {
			delete(u.unready, r)
		}
	}
	for r, s := range u.stuck {
		if !refs[r] || now.After(s.until) {
			delete(u.stuck, r)
		}
	}
	for uid, r := range u.retry {
		if now.After(r.until) {
			delete(u.retry, uid)
		}
	}
	if len(errs) > 0 {
		log.V(1).Info("Status writes failed", "errors", len(errs))
	}
	return errors.Join(errs...)
}

// admissionFresh reads the admission webhook's status Lease and sets the
// admission-available gauge. The message says why it is not fresh.
func (u *Updater) admissionFresh(ctx context.Context) (bool, string) {
	r := u.APIReader
	if r == nil {
		r = u.Client
	}
	fresh, err := admission.LeaseFresh(ctx, r, u.Config.LeaseNamespace, u.Config.LeaseName, u.Config.LeaseMaxAge)
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

// podsOf returns the workload's pods that are not Succeeded or Failed, from the cache,
// listing each namespace once per cycle.
func (u *Updater) podsOf(ctx context.Context, ref workload.Ref, byNS map[string][]corev1.Pod) ([]*corev1.Pod, error) {
	pods, ok := byNS[ref.Namespace]
	if !ok {
		var list corev1.PodList
		if err := u.Client.List(ctx, &list, client.InNamespace(ref.Namespace)); err != nil {
			return nil, fmt.Errorf("listing pods in %s: %w", ref.Namespace, err)
		}
		pods = list.Items
		byNS[ref.Namespace] = pods
	}
	var out []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if r, ok := u.owners.TopController(ctx, p); ok && r == ref {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].CreationTimestamp.Time, out[j].CreationTimestamp.Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// recommendation reads the autoscaler's GPUFractionRecommendation from the cache and
// says whether the webhook would apply it; when not, it returns a skip reason and message.
func (u *Updater) recommendation(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler) (*gpufracv1.GPUFractionRecommendation, string, string) {
	gfr := &gpufracv1.GPUFractionRecommendation{}
	if err := u.Client.Get(ctx, types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}, gfr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, SkipNoRecommendation, "no GPUFractionRecommendation yet"
		}
		return nil, SkipNoRecommendation, fmt.Sprintf("reading the recommendation: %v", err)
	}
	for _, or := range gfr.OwnerReferences {
		if or.Kind == "GPUFractionAutoscaler" && or.UID != gfa.UID {
			return nil, SkipNoRecommendation, "the recommendation belongs to an earlier autoscaler of the same name"
		}
	}
	if c := meta.FindStatusCondition(gfr.Status.Conditions, gpufracv1.ConditionRecommendationProvided); len(gfr.Status.ContainerRecommendations) == 0 || (c != nil && c.Status != metav1.ConditionTrue) {
		return gfr, SkipNoRecommendation, "RecommendationProvided is not True"
	}
	minConf := int32(50)
	if u.Config.Admission.MinConfidence != nil {
		minConf = *u.Config.Admission.MinConfidence
	}
	if conf := gfr.Status.ConfidencePercent; (conf == nil && minConf > 0) || (conf != nil && *conf < minConf) {
		c := int32(0)
		if conf != nil {
			c = *conf
		}
		return gfr, SkipLowConfidence, fmt.Sprintf("confidence %d%% is below the webhook's minimum %d%%: a replacement would not get the recommendation", c, minConf)
	}
	return gfr, "", ""
}

// plan evaluates one autoscaler: windows, target, pods, guardrails and rollback, and
// the per-pod decisions; pods that pass the workload-level gates become candidates.
//
// target is the autoscaler's resolved target; winner is the autoscaler in charge of the
// workload (nil when the target did not resolve): when it is another one, this autoscaler
// is ignored (SkipDuplicateTarget). wl is the workload's shared state in this cycle.
func (u *Updater) plan(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler, now time.Time, podsByNS map[string][]corev1.Pod,
	target resolved, winner *gpufracv1.GPUFractionAutoscaler, wl *workloadCycle) (*plan, error) {
	log := klog.FromContext(ctx).WithValues("autoscaler", klog.KObj(gfa))
	cfg := u.Config
	p := &plan{gfa: gfa, mode: gfa.Spec.EffectiveUpdateMode(), replaceUnready: gfa.Annotations[AnnotationReplaceUnready] == "true"}
	p.prev = u.written[gfa.UID]
	if p.prev == nil {
		p.prev = gfa.Status.Updater
	}
	st := &gpufracv1.UpdaterStatus{ObservedGeneration: gfa.Generation}
	p.st = st
	if pr := p.prev; pr != nil {
		st.LastEvictionTime = pr.LastEvictionTime.DeepCopy()
		st.LastInPlaceUpdateTime = pr.LastInPlaceUpdateTime.DeepCopy()
		st.Verification = pr.Verification.DeepCopy()
		st.Floor = pr.Floor.DeepCopy()
		for _, c := range pr.Conditions {
			st.Conditions = append(st.Conditions, *c.DeepCopy())
		}
	}
	if st.Floor != nil && !now.Before(st.Floor.Until.Time) {
		log.Info("Rollback floor expired", "until", st.Floor.Until.Time)
		st.Floor = nil
	}
	if st.Verification != nil && !now.Before(st.Verification.Until.Time) {
		st.Verification = nil
	}
	var bt gpufracv1.BackendType
	var specOverhead int64
	bt, specOverhead = backendOf(gfa)
	p.backend = bt

	windows, werr := ParseWindows(gfa.Spec.UpdatePolicy)
	if werr == nil {
		p.window = windows.State(now)
	}
	st.ResizeWindowOpen = werr == nil && p.window.Open
	if !p.window.End.IsZero() {
		st.WindowEnd = secs(p.window.End)
	}
	if !p.window.NextStart.IsZero() {
		st.NextWindowStart = secs(p.window.NextStart)
	}

	ref, err := target.ref, target.err
	p.ref = ref
	if err != nil {
		if p.mode != gpufracv1.UpdateModeOff {
			p.blockR, p.blockMsg = SkipTargetUnresolved, err.Error()
		}
		return p, nil
	}
	p.wl = wl
	if winner != nil && winner.UID != gfa.UID {
		// Another autoscaler is in charge: nothing of this one is applied or reported
		// as pending, whatever its recommendation says.
		p.blockR, p.blockMsg = SkipDuplicateTarget, admission.DuplicateMessage(gfa, winner, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name)
		return p, nil
	}
	pods, err := u.podsOf(ctx, ref, podsByNS)
	if err != nil {
		return nil, err
	}
	gfr, recSkip, recMsg := u.recommendation(ctx, gfa)
	// The backoff of not-Ready replacements starts over once every pod is Ready.
	allReady := true
	for _, pod := range pods {
		allReady = allReady && IsReady(pod)
	}
	if allReady {
		delete(u.unready, ref)
	}

	// Horizontal autoscalers on GPU utilisation hold compute.
	soReader := u.APIReader
	if soReader == nil || now.Before(u.kedaAbsentTill) {
		soReader = nil
	}
	hs, kedaAbsent, herr := FindGPUHorizontalScalers(ctx, u.Client, soReader, ref)
	if kedaAbsent {
		u.kedaAbsentTill = now.Add(kedaRecheck)
	}
	if herr != nil {
		log.Error(herr, "Looking for horizontal autoscalers; compute shrinking held this cycle")
	}
	computeHeld := herr != nil
	switch {
	case len(hs) > 0 && gfa.Annotations[AnnotationAllowComputeShrink] == "true":
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionFalse,
			Reason: ReasonOptedIn, Message: truncate(fmt.Sprintf("%s scales on GPU utilisation; compute is shrunk anyway (%s=true)", joinScalers(hs), AnnotationAllowComputeShrink), 1000), ObservedGeneration: gfa.Generation})
	case len(hs) > 0:
		computeHeld = true
		p.held = hs
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionTrue,
			Reason: ReasonGPUHorizontalAutoscaler, Message: truncate(fmt.Sprintf("%s scales the workload on GPU utilisation: shrinking compute would raise utilisation and add replicas, so pods are replaced for memory and compute growth only (annotate the autoscaler %s=true to allow compute shrinking)", joinScalers(hs), AnnotationAllowComputeShrink), 1000), ObservedGeneration: gfa.Generation})
	default:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionFalse,
			Reason: ReasonNoGPUHorizontalAutoscaler, Message: "no HorizontalPodAutoscaler or ScaledObject scales the workload on a GPU metric", ObservedGeneration: gfa.Generation})
	}

	guard, guardMsg := GuardrailState(gfr)
	overhead := cfg.Admission.MemoryOverhead[bt] + specOverhead
	allocs := make(map[types.UID]PodAllocation, len(pods))
	for _, pod := range pods {
		allocs[pod.UID] = ReadAllocation(pod, bt, cfg.Admission, overhead)
	}

	// Verification of the last shrink: roll back on a breach.
	if v := st.Verification; v != nil {
		if trigger, msg := breach(v, guard, guardMsg, pods, allocs); trigger != "" {
			reason := fmt.Sprintf("%s within %v after the shrink at %s", msg, cfg.VerificationPeriod, v.Started.UTC().Format(time.RFC3339))
			st.Floor = raiseFloor(st.Floor, v.Previous, now.Add(cfg.FloorDuration), reason)
			st.Verification = nil
			condReason := ReasonLatencyBreach
			if trigger == "restart" {
				condReason = ReasonRestartAfterShrink
			}
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionRolledBack, Status: metav1.ConditionTrue,
				Reason: condReason, Message: truncate(reason, 1000), ObservedGeneration: gfa.Generation})
			rollbacksTotal.WithLabelValues(trigger).Inc()
			p.rollback = fmt.Sprintf("Rolling back: %s. Floor %s until %s: the recommender must not go below it, and pods below it are replaced (urgently, outside resize windows when urgentGrowth allows) as soon as the recommendation reaches it.",
				reason, describeAllocs(st.Floor.Containers), st.Floor.Until.UTC().Format(time.RFC3339))
			log.Info("Guardrail tripped after a shrink; rolling back", "trigger", trigger, "reason", reason)
		}
	}
	// Out-of-memory exits (running pods that restarted, and pods that ended Failed, such
	// as a Job's pod with restartPolicy Never): each raises the floor of the container's
	// memory to VPA's bump, which the recommender honours and the webhook writes into the
	// next pod. The floor lasts FloorDuration from the exit, so an old exit expires.
	if p.mode != gpufracv1.UpdateModeOff && p.mode != "" {
		failed := u.failedPodsOf(ctx, ref, podsByNS)
		for _, pod := range failed {
			allocs[pod.UID] = ReadAllocation(pod, bt, cfg.Admission, overhead)
		}
		for _, pod := range append(append([]*corev1.Pod(nil), pods...), failed...) {
			for _, t := range Terminations(pod) {
				until := t.FinishedAt.Add(cfg.FloorDuration)
				if !t.OOM || !now.Before(until) {
					continue
				}
				applied := int64(-1)
				if a, ok := allocs[pod.UID].Containers[t.Container]; ok {
					applied = a.Memory
				}
				bump := OOMBump(t, applied)
				if bump <= 0 || floorMemory(st.Floor, t.Container) >= bump {
					continue
				}
				reason := fmt.Sprintf("pod %s: %s; memory floor %s (max(used + 100Mi, used × 1.2))", pod.Name, t, fmtBytes(bump))
				st.Floor = raiseFloor(st.Floor, []gpufracv1.ContainerAllocation{{ContainerName: t.Container, Memory: resource.NewQuantity(bump, resource.BinarySI)}}, until, reason)
				meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionRolledBack, Status: metav1.ConditionTrue,
					Reason: ReasonOutOfMemory, Message: truncate(reason, 1000), ObservedGeneration: gfa.Generation})
				u.event(gfa, pod, corev1.EventTypeWarning, EventOOMBump, "Update", "out of memory: "+reason+"; the next pods get at least this memory")
				log.Info("Out-of-memory exit; memory floor raised", "pod", pod.Name, "container", t.Container, "floor", fmtBytes(bump))
			}
		}
	}
	if st.Floor == nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionRolledBack, Status: metav1.ConditionFalse,
			Reason: ReasonNoFloor, Message: "no rollback floor in force", ObservedGeneration: gfa.Generation})
	}

	rules := Rules{
		Threshold: cfg.Threshold, MinPodAge: cfg.MinPodAge, NearLimit: cfg.NearLimit,
		UrgentGrowth: urgentGrowth(gfa), ComputeShrinkHeld: computeHeld, Guardrail: guard,
	}
	if st.Floor != nil {
		rules.Floor = map[string]Alloc{}
		for _, c := range st.Floor.Containers {
			rules.Floor[c.ContainerName] = Alloc{Memory: bytesOf(c.Memory), Compute: milliOf(c.Compute)}
		}
	}
	targets := TargetsOf(gfa, gfr)
	p.targets, p.overhead = targets, overhead
	// While compute is held, publish the most compute each container of the running
	// pods holds: the webhook gives every new or replacement pod at least that
	// (admission.HeldCompute). Until the published value covers it, nothing is replaced.
	var heldPending string
	if len(p.held) > 0 {
		st.HeldCompute = heldCompute(pods, allocs)
		if !admission.ComputeShrinkHeld(gfa) || !covers(gfa.Status.Updater.HeldCompute, st.HeldCompute) {
			heldPending = fmt.Sprintf("compute is held (%s scales on GPU utilisation) and status.updater.heldCompute (%s) is being published: the webhook must know what a replacement gets at least; next cycle",
				joinScalers(p.held), describeAllocs(st.HeldCompute))
		}
	}

	// A floor raised this cycle reaches a replacement only once the webhook can read it
	// (status.updater.floor, admission.Floor): until the published one covers it, nothing
	// is replaced.
	var floorPending string
	if st.Floor != nil && !floorPublished(gfa, st.Floor, now) {
		floorPending = fmt.Sprintf("the rollback floor (%s) is being published in status.updater.floor, which the webhook writes into the replacement; next cycle", describeAllocs(st.Floor.Containers))
	}

	// Replacements of earlier evictions.
	awaited, replacements, expired := settle(u.expect[ref], pods, now, cfg.ReplacementTimeout)
	u.expect[ref] = awaited
	for _, e := range expired {
		log.Info("Replacement not ready in time; no longer counted in flight", "evicted", e.pod, "timeout", cfg.ReplacementTimeout)
	}
	for _, rp := range replacements {
		a := allocs[rp.UID]
		if a.Record == nil && recSkip == "" && gfa.Annotations[gpufracv1.AnnotationExclude] != "true" && rp.Annotations[gpufracv1.AnnotationExclude] != "true" {
			msg := fmt.Sprintf("replacement pod %s came back without a fraction (the admission webhook left it unchanged; see its FractionNotApplied events): evictions of %s paused for %v", rp.Name, ref, cfg.StuckBackoff)
			u.stuck[ref] = stuckState{until: now.Add(cfg.StuckBackoff), msg: msg}
			log.Info("Replacement unchanged; pausing evictions", "pod", rp.Name, "for", cfg.StuckBackoff)
		}
	}
	evicted := map[types.UID]bool{}
	for _, e := range awaited {
		evicted[e.evicted] = true
	}
	if !wl.counted {
		wl.budget, wl.counted = NewBudget(pods, len(awaited), evicted, minReplicas(gfa), cfg.MaxInFlight), true
	}

	// Hysteresis: a change inside the bounds must persist, and rounds of replacements
	// are spaced (per workload). A restart forgets the rounds; the last action in the
	// status stands in for the last round's start.
	hkey := ref.String()
	if pr := p.prev; pr != nil {
		for _, t := range []*metav1.Time{pr.LastEvictionTime, pr.LastInPlaceUpdateTime} {
			if t != nil {
				u.hyst.Seed(hkey, t.Time)
			}
		}
	}
	type evaluated struct {
		pod   *corev1.Pod
		alloc PodAllocation
		need  Need
	}
	var evals []evaluated
	var needs []Need
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || evicted[pod.UID] {
			continue // already going (the cache may not show the eviction yet)
		}
		st.Pods++
		if pod.Annotations[gpufracv1.AnnotationExclude] == "true" {
			continue
		}
		alloc := allocs[pod.UID]
		facts := PodFacts{Age: now.Sub(pod.CreationTimestamp.Time)}
		for _, t := range Terminations(pod) {
			if t.OOM {
				t := t
				facts.OOM = &t
			}
		}
		need := Evaluate(alloc, targets, facts, rules)
		if !need.OutOfDate() {
			continue
		}
		evals = append(evals, evaluated{pod: pod, alloc: alloc, need: need})
		needs = append(needs, need)
	}
	if p.mode == gpufracv1.UpdateModeRecreate || p.mode == gpufracv1.UpdateModeInPlaceOrRecreate {
		u.hyst.Observe(hkey, now, needs, p.window.Start)
	}
	for _, ev := range evals {
		pod, alloc, need := ev.pod, ev.alloc, ev.need
		st.PodsOutOfDate++
		c := &candidate{p: p, pod: pod, alloc: alloc, need: need, action: gpufracv1.PodUpdateEvict}
		if p.mode == gpufracv1.UpdateModeInPlaceOrRecreate && bt == gpufracv1.BackendAnnotations && u.InPlace != nil {
			c.action = gpufracv1.PodUpdateInPlace
		}
		c.upd = gpufracv1.PodUpdate{Pod: pod.Name, Action: c.action, Urgent: need.Urgent, Reason: truncate(need.Reason(), 600)}
		p.updates = append(p.updates, c)
		verb := "evict"
		if c.action == gpufracv1.PodUpdateInPlace {
			verb = "change in place"
		}
		switch {
		case pod.Status.Phase == corev1.PodPending:
			c.skip(SkipPending, "pod is not running yet")
		case need.HeldReason != "":
			c.skip(need.HeldReason, need.HeldMessage)
		case p.mode == gpufracv1.UpdateModeOff:
			when := "now"
			if werr != nil {
				when = "once the resize windows are fixed"
			} else if !p.window.Open && !need.Urgent {
				when = "in the resize window opening at " + p.window.NextStart.UTC().Format(time.RFC3339)
			}
			c.skip(SkipModeOff, fmt.Sprintf("updateMode Off (recommendation only): would %s %s", verb, when))
		case p.mode == gpufracv1.UpdateModeInitial:
			c.skip(SkipModeInitial, "updateMode Initial: fractions apply only when pods are created")
		case p.mode != gpufracv1.UpdateModeRecreate && p.mode != gpufracv1.UpdateModeInPlaceOrRecreate:
			c.skip(SkipModeOff, fmt.Sprintf("unknown updateMode %q: nothing is applied", p.mode))
		case recSkip != "":
			c.skip(recSkip, recMsg)
		case werr != nil:
			c.skip(SkipWindowInvalid, werr.Error())
		case !Admissible(need, p.window.Open):
			c.skip(SkipWindowClosed, "no resize window is open; next opens at "+p.window.NextStart.UTC().Format(time.RFC3339))
		case heldPending != "":
			c.skip(SkipHeldComputePending, heldPending)
		case floorPending != "":
			c.skip(SkipAwaitingFloor, floorPending)
		default:
			if ok, reason, msg := u.hyst.Allow(hkey, now, need); !ok {
				c.skip(reason, msg)
				break
			}
			p.cands = append(p.cands, c)
		}
	}
	if werr != nil && p.mode != gpufracv1.UpdateModeOff && p.mode != gpufracv1.UpdateModeInitial {
		p.blockR, p.blockMsg = SkipWindowInvalid, werr.Error()
	}
	return p, nil
}

// heldCompute returns, per container, the most compute any of pods holds (known values
// only), sorted by container name.
func heldCompute(pods []*corev1.Pod, allocs map[types.UID]PodAllocation) []gpufracv1.ContainerAllocation {
	most := map[string]int64{}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		for name, a := range allocs[pod.UID].Containers {
			if cur, ok := most[name]; a.Compute >= 0 && (!ok || a.Compute > cur) {
				most[name] = a.Compute
			}
		}
	}
	out := make([]gpufracv1.ContainerAllocation, 0, len(most))
	for name, m := range most {
		out = append(out, gpufracv1.ContainerAllocation{ContainerName: name, Compute: resource.NewMilliQuantity(m, resource.DecimalSI)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ContainerName < out[j].ContainerName })
	return out
}

// covers reports whether the published held compute is at least want for every container.
func covers(published, want []gpufracv1.ContainerAllocation) bool {
	for _, w := range want {
		ok := false
		for _, p := range published {
			if p.ContainerName == w.ContainerName && p.Compute != nil && p.Compute.Cmp(*w.Compute) >= 0 {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// floorPublished reports whether gfa's published floor (what the webhook reads) is at
// least floor for every container and resource.
func floorPublished(gfa *gpufracv1.GPUFractionAutoscaler, floor *gpufracv1.UpdaterFloor, now time.Time) bool {
	for _, c := range floor.Containers {
		mem, milli := admission.Floor(gfa, c.ContainerName, now)
		if (c.Memory != nil && mem < c.Memory.Value()) || (c.Compute != nil && milli < c.Compute.MilliValue()) {
			return false
		}
	}
	return true
}

// floorMemory returns the floor's memory for a container, bytes (-1 none).
func floorMemory(f *gpufracv1.UpdaterFloor, container string) int64 {
	if f == nil {
		return -1
	}
	for _, c := range f.Containers {
		if c.ContainerName == container && c.Memory != nil {
			return c.Memory.Value()
		}
	}
	return -1
}

// failedPodsOf returns the workload's pods that ended Failed (from the namespace's pod
// list of this cycle, which podsOf read).
func (u *Updater) failedPodsOf(ctx context.Context, ref workload.Ref, byNS map[string][]corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	pods := byNS[ref.Namespace]
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodFailed {
			continue
		}
		if r, ok := u.owners.TopController(ctx, p); ok && r == ref {
			out = append(out, p)
		}
	}
	return out
}

// breach checks a shrink under verification: the latency guardrail breached, or a
// container of a pod running with a smaller fraction than before the shrink ended after
// it started. It returns the trigger (latency, restart) and a message, or "".
func breach(v *gpufracv1.ShrinkVerification, guard Guardrail, guardMsg string, pods []*corev1.Pod, allocs map[types.UID]PodAllocation) (string, string) {
	if guard == GuardrailBreached {
		msg := "latency objective breached"
		if guardMsg != "" {
			msg += " (" + guardMsg + ")"
		}
		return "latency", msg
	}
	prev := map[string]Alloc{}
	for _, c := range v.Previous {
		prev[c.ContainerName] = Alloc{Memory: bytesOf(c.Memory), Compute: milliOf(c.Compute)}
	}
	for _, pod := range pods {
		a := allocs[pod.UID]
		smaller := false
		for name, ca := range a.Containers {
			pa, ok := prev[name]
			if !ok {
				continue
			}
			if (pa.Memory >= 0 && ca.Memory >= 0 && ca.Memory < pa.Memory) || (pa.Compute >= 0 && ca.Compute >= 0 && ca.Compute < pa.Compute) {
				smaller = true
			}
		}
		if !smaller {
			continue
		}
		for _, t := range Terminations(pod) {
			if t.FinishedAt.After(v.Started.Time) {
				return "restart", fmt.Sprintf("pod %s restarted with the smaller fraction: %s", pod.Name, t)
			}
		}
	}
	return "", ""
}

// raiseFloor returns a floor of at least prev per container (and at least an existing
// floor that has not expired), until the later of the two ends.
func raiseFloor(existing *gpufracv1.UpdaterFloor, prev []gpufracv1.ContainerAllocation, until time.Time, reason string) *gpufracv1.UpdaterFloor {
	f := &gpufracv1.UpdaterFloor{Until: *secs(until), Reason: truncate(reason, 1000)}
	byName := map[string]*gpufracv1.ContainerAllocation{}
	add := func(c gpufracv1.ContainerAllocation) {
		cur, ok := byName[c.ContainerName]
		if !ok {
			f.Containers = append(f.Containers, gpufracv1.ContainerAllocation{ContainerName: c.ContainerName})
			cur = &f.Containers[len(f.Containers)-1]
			byName[c.ContainerName] = cur
			// Re-point after a possible reallocation of the slice.
			for i := range f.Containers {
				byName[f.Containers[i].ContainerName] = &f.Containers[i]
			}
			cur = byName[c.ContainerName]
		}
		cur.Memory = maxQuantity(cur.Memory, c.Memory)
		cur.Compute = maxQuantity(cur.Compute, c.Compute)
	}
	if existing != nil {
		for _, c := range existing.Containers {
			add(c)
		}
		if existing.Until.After(until) {
			f.Until = existing.Until
		}
	}
	for _, c := range prev {
		add(c)
	}
	sort.Slice(f.Containers, func(i, j int) bool { return f.Containers[i].ContainerName < f.Containers[j].ContainerName })
	var mem, cpu *resource.Quantity
	for _, c := range f.Containers {
		if c.Memory != nil {
			if mem == nil {
				mem = resource.NewQuantity(0, resource.BinarySI)
			}
			mem.Add(*c.Memory)
		}
		if c.Compute != nil {
			if cpu == nil {
				cpu = resource.NewMilliQuantity(0, resource.DecimalSI)
			}
			cpu.Add(*c.Compute)
		}
	}
	f.Memory, f.Compute = mem, cpu
	return f
}

func maxQuantity(a, b *resource.Quantity) *resource.Quantity {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		c := b.DeepCopy()
		return &c
	case b == nil || a.Cmp(*b) >= 0:
		return a
	default:
		c := b.DeepCopy()
		return &c
	}
}

// allocationOf converts a pod's allocation into ContainerAllocations (known values only).
func allocationOf(a PodAllocation) []gpufracv1.ContainerAllocation {
	var out []gpufracv1.ContainerAllocation
	for name, c := range a.Containers {
		ca := gpufracv1.ContainerAllocation{ContainerName: name}
		if c.Memory >= 0 {
			ca.Memory = resource.NewQuantity(c.Memory, resource.BinarySI)
		}
		if c.Compute >= 0 {
			ca.Compute = resource.NewMilliQuantity(c.Compute, resource.DecimalSI)
		}
		out = append(out, ca)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ContainerName < out[j].ContainerName })
	return out
}

// recordShrink starts (or extends) the verification of a shrink of a pod with
// allocation a at now.
func (p *plan) recordShrink(a PodAllocation, now time.Time, period time.Duration) {
	prev := allocationOf(a)
	v := p.st.Verification
	if v != nil {
		merged := raiseFloor(&gpufracv1.UpdaterFloor{Containers: v.Previous}, prev, now, "")
		prev = merged.Containers
	}
	p.st.Verification = &gpufracv1.ShrinkVerification{Started: *secs(now), Until: *secs(now.Add(period)), Previous: prev}
}

func describeAllocs(cs []gpufracv1.ContainerAllocation) string {
	var parts []string
	for _, c := range cs {
		s := c.ContainerName + ":"
		if c.Memory != nil {
			s += " memory " + fmtBytes(c.Memory.Value())
		}
		if c.Compute != nil {
			s += " compute " + fmtMilli(c.Compute.MilliValue())
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func joinScalers(hs []HorizontalScaler) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", ")
}

// act applies the eviction gates to a candidate and evicts it or changes it in place.
func (u *Updater) act(ctx context.Context, c *candidate, now time.Time, fresh bool, leaseMsg string) {
	log := klog.FromContext(ctx).WithValues("autoscaler", klog.KObj(c.p.gfa), "pod", klog.KObj(c.pod))
	p := c.p
	// Counted as a fallback only when the pod is actually recreated (evicted), not for
	// each cycle a recreate waits at a gate.
	fallback := p.mode == gpufracv1.UpdateModeInPlaceOrRecreate
	if c.action == gpufracv1.PodUpdateInPlace {
		changed, err := u.InPlace.Apply(ctx, c.pod)
		switch {
		case errors.Is(err, ErrNotInPlace):
			log.Info("Cannot change the pod in place; recreating it", "reason", err.Error())
			c.action = gpufracv1.PodUpdateEvict
			c.upd.Action = c.action
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// The pod changed (or went) since the cache saw it; next cycle decides again.
			c.skip(SkipInPlaceError, "the pod changed meanwhile: "+err.Error())
			return
		case err != nil:
			inPlaceTotal.WithLabelValues(ResultError).Inc()
			c.skip(SkipInPlaceError, err.Error())
			log.Error(err, "In-place update failed")
			return
		case !changed:
			c.skip(SkipInPlaceError, "the webhook logic would write nothing into this pod")
			return
		default:
			inPlaceTotal.WithLabelValues(ResultApplied).Inc()
			u.hyst.Replaced(p.ref.String(), now, c.need)
			p.acted = true
			p.st.LastInPlaceUpdateTime = secs(now)
			if c.need.Shrink {
				p.recordShrink(c.alloc, now, u.Config.VerificationPeriod)
			}
			c.upd.SkipReason, c.upd.SkipMessage = "", ""
			note := "changed in place: " + truncate(c.need.Reason(), 600)
			u.event(c.pod, p.gfa, corev1.EventTypeNormal, EventInPlace, "UpdateInPlace", note)
			u.event(p.gfa, c.pod, corev1.EventTypeNormal, EventInPlace, "UpdateInPlace", "pod "+c.pod.Name+" "+note)
			log.Info("Changed pod in place", "reason", c.need.Reason())
			// Applied: not listed as pending any more.
			c.upd.Reason = ""
			return
		}
	}

	switch {
	case now.Sub(u.started) < u.Config.WarmUp:
		c.skip(SkipWarmUp, fmt.Sprintf("the updater started %v ago; no evictions for the first %v", now.Sub(u.started).Round(time.Second), u.Config.WarmUp))
		return
	case !fresh:
		c.skip(SkipAdmissionUnavailable, leaseMsg)
		return
	}
	if s, ok := u.stuck[p.ref]; ok && now.Before(s.until) {
		c.skip(SkipReplacementUnchanged, s.msg)
		return
	}
	if r, ok := u.retry[c.pod.UID]; ok && now.Before(r.until) {
		c.skip(r.reason, r.msg+fmt.Sprintf(" (retry at %s)", r.until.UTC().Format(time.RFC3339)))
		return
	}
	if u.unreadyCandidate(c, now) {
		// Not Ready: it serves nothing, and the budget would count it as unavailable
		// forever (a crash loop behind a PodDisruptionBudget).
		u.replaceUnready(ctx, c, now)
		return
	}
	if reason, msg := p.wl.budget.Allow(); reason != "" {
		c.skip(reason, msg)
		return
	}
	if p.wl.refused != "" {
		// The workload's budget refused another pod this cycle; it would refuse this one.
		c.skip(SkipPDB, p.wl.refused)
		return
	}
	// The replacement must have somewhere to go: the ReplicaSet creates it while this
	// pod still holds its GPU, and a replacement left Pending serves nothing.
	placeAt, repl := -1, Replacement{}
	if !u.Config.NoPlacementCheck {
		if !u.capacityRead {
			var r client.Reader = u.Client
			if u.APIReader != nil {
				r = u.APIReader
			}
			u.capacity, u.capacityRead = nodeCapacity(ctx, r, u.Config.Admission), true
		}
		if u.capacity != nil {
			repl = replacementNeed(c.pod, c.alloc, p.targets, p.backend, u.Config.Admission, p.overhead)
			var why string
			if placeAt, why = Placeable(repl, u.capacity); placeAt < 0 && why != "" {
				msg := fmt.Sprintf("the replacement of pod %s could not be placed: %s; the pod is kept", c.pod.Name, why)
				c.skip(SkipNoCapacity, msg)
				p.unplaceable = true
				// One note per autoscaler while the cause stays the same, whichever pod.
				u.eventOnce(p.gfa, "unplaceable", corev1.EventTypeWarning, EventReplacementUnplaceable, "Evict",
					"replacements could not be placed: "+why+"; out-of-date pods are kept until there is room")
				log.Info("Replacement cannot be placed; pod kept", "reason", why)
				return
			}
		}
	}
	if !u.mayReplaceNow(ctx, c) {
		return
	}
	uid := c.pod.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: c.pod.Namespace, Name: c.pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	err := u.Client.SubResource("eviction").Create(ctx, c.pod, ev)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// Gone, replaced meanwhile, or its namespace is being deleted.
		c.skip(SkipEvictionError, "the pod changed or is going away: "+err.Error())
		return
	case apierrors.IsTooManyRequests(err):
		evictionsTotal.WithLabelValues(ResultRefused).Inc()
		msg := "eviction refused: " + evictionRefusal(err)
		u.retry[uid] = retryState{until: now.Add(u.Config.RetryBackoff), reason: SkipPDB, msg: msg}
		p.wl.refused = msg
		c.skip(SkipPDB, msg)
		u.event(p.gfa, c.pod, corev1.EventTypeWarning, EventEvictionRefused, "Evict", "pod "+c.pod.Name+": "+msg)
		log.Info("Eviction refused", "reason", msg)
		return
	default:
		evictionsTotal.WithLabelValues(ResultError).Inc()
		msg := "eviction failed: " + err.Error()
		u.retry[uid] = retryState{until: now.Add(u.Config.RetryBackoff), reason: SkipEvictionError, msg: msg}
		c.skip(SkipEvictionError, msg)
		log.Error(err, "Eviction failed")
		return
	}
	evictionsTotal.WithLabelValues(ResultEvicted).Inc()
	reserve(u.capacity, placeAt, repl)
	if fallback {
		inPlaceTotal.WithLabelValues(ResultFallback).Inc()
	}
	u.hyst.Replaced(p.ref.String(), now, c.need)
	p.wl.budget.Took()
	p.acted = true
	p.st.LastEvictionTime = secs(now)
	u.expect[p.ref] = append(u.expect[p.ref], &expectation{at: now, evicted: uid, before: u.knownPods(ctx, p), pod: c.pod.Name})
	if c.need.Shrink {
		p.recordShrink(c.alloc, now, u.Config.VerificationPeriod)
	}
	kind := "to apply the recommendation"
	switch {
	case c.need.Rollback:
		kind = "to roll back to the floor"
	case c.need.Urgent:
		kind = "urgently (protective growth)"
	}
	note := fmt.Sprintf("evicted %s: %s", kind, truncate(c.need.Reason(), 600))
	if len(p.held) > 0 {
		note += "; compute not shrunk (" + joinScalers(p.held) + " scales on GPU utilisation): the replacement gets at least " + describeAllocs(p.st.HeldCompute)
	}
	u.event(c.pod, p.gfa, corev1.EventTypeNormal, EventEvicted, "Evict", note)
	u.event(p.gfa, c.pod, corev1.EventTypeNormal, EventEvicted, "Evict", "pod "+c.pod.Name+" "+note)
	log.Info("Evicted pod", "urgent", c.need.Urgent, "rollback", c.need.Rollback, "reason", c.need.Reason())
	c.upd.SkipReason, c.upd.SkipMessage, c.upd.Reason = "", "", ""
}

// knownPods returns the UIDs of the workload's pods in the cache now (a replacement is
// a pod not among them).
func (u *Updater) knownPods(ctx context.Context, p *plan) map[types.UID]bool {
	out := map[types.UID]bool{}
	var list corev1.PodList
	if err := u.Client.List(ctx, &list, client.InNamespace(p.ref.Namespace)); err != nil {
		for _, c := range p.updates {
			out[c.pod.UID] = true
		}
		return out
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if r, ok := u.owners.TopController(ctx, pod); ok && r == p.ref {
			out[pod.UID] = true
		}
	}
	return out
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

// finish completes status.updater, records the autoscaler's events and writes the
// status when it changed.
func (u *Updater) finish(ctx context.Context, p *plan, now time.Time) error {
	st := p.st
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
	for i, c := range pending {
		if i >= u.Config.MaxReported {
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

	// Events.
	gfa := p.gfa
	if p.rollback != "" {
		u.event(gfa, nil, corev1.EventTypeWarning, EventRolledBack, "Rollback", p.rollback)
	}
	if p.mode == gpufracv1.UpdateModeOff {
		if len(pending) > 0 {
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
				when = "in the resize window opening at " + p.window.NextStart.UTC().Format(time.RFC3339)
			}
			note := fmt.Sprintf("updateMode Off: would %s %d pod(s) %s: %s", strings.ToLower(string(pending[0].action)), len(pending), when, strings.Join(parts, "; "))
			u.eventOnce(gfa, "would", corev1.EventTypeNormal, EventWouldUpdate, "DryRun", note)
		} else {
			u.forget(gfa, "would")
		}
	}
	switch st.BlockedReason {
	case SkipAdmissionUnavailable, SkipWindowInvalid, SkipTargetUnresolved, SkipReplacementUnchanged, SkipDuplicateTarget:
		u.eventOnce(gfa, "blocked", corev1.EventTypeWarning, EventUpdatesBlocked, "Update", "updates blocked ("+st.BlockedReason+"): "+st.BlockedMessage)
	default:
		u.forget(gfa, "blocked")
	}
	if !p.unplaceable {
		u.forget(gfa, "unplaceable")
	}
	if p.blockR == "" {
		u.deadlock(p, pending)
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

	if equality.Semantic.DeepEqual(p.prev, st) {
		return nil
	}
	base := gfa.DeepCopy()
	base.Status.Updater = p.prev.DeepCopy()
	mod := gfa.DeepCopy()
	mod.Status.Updater = st
	if err := u.Client.Status().Patch(ctx, mod, client.MergeFrom(base)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing status.updater: %w", err)
	}
	u.written[gfa.UID] = st.DeepCopy()
	return nil
}

// event records an event when a recorder is set.
func (u *Updater) event(regarding, related client.Object, typ, reason, action, note string) {
	if u.Events == nil {
		return
	}
	if related == nil {
		u.Events.Eventf(regarding, nil, typ, reason, action, "%s", truncate(note, 1000))
		return
	}
	u.Events.Eventf(regarding, related, typ, reason, action, "%s", truncate(note, 1000))
}

// eventOnce records an event on an autoscaler unless the last one under key said the same.
func (u *Updater) eventOnce(gfa *gpufracv1.GPUFractionAutoscaler, key, typ, reason, action, note string) {
	m := u.noted[gfa.UID]
	if m == nil {
		m = map[string]string{}
		u.noted[gfa.UID] = m
	}
	if m[key] == note {
		return
	}
	m[key] = note
	u.event(gfa, nil, typ, reason, action, note)
}

func (u *Updater) forget(gfa *gpufracv1.GPUFractionAutoscaler, key string) {
	if m := u.noted[gfa.UID]; m != nil {
		delete(m, key)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// mayReplaceNow takes a token from the cluster-wide eviction rate limit and checks the
// admission webhook's Lease again right before a pod is replaced (the cycle may have
// taken a while); when either says no it records the skip on c and returns false.
func (u *Updater) mayReplaceNow(ctx context.Context, c *candidate) bool {
	if !u.limiter.Allow() {
		c.skip(SkipRateLimited, fmt.Sprintf("cluster-wide eviction rate limit (%v/s, burst %d) reached", u.Config.EvictionRate, u.Config.EvictionBurst))
		return false
	}
	if ok, msg := u.admissionFresh(ctx); !ok {
		c.skip(SkipAdmissionUnavailable, msg)
		return false
	}
	return true
}

package updater

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/internal/promreg"
)

// Skip reasons: the reason label of gpufrac_updater_skips_total, and
// status.updater.updates[].skipReason / blockedReason. A skip is counted once per
// out-of-date pod per cycle in which it was not updated.
const (
	// SkipModeOff: updateMode Off; the pod would be updated (dry run).
	SkipModeOff = "mode-off"
	// SkipModeInitial: updateMode Initial; fractions apply only at pod creation.
	SkipModeInitial = "mode-initial"
	// SkipPending: the pod is not running yet.
	SkipPending = "pending"
	// SkipRunToCompletion: the pod runs to completion (restartPolicy Never or
	// OnFailure: a Job's, a CronJob's, a workflow's) and the change does not rest on its
	// memory running out (a rollback floor and a latency breach do not): an eviction
	// would end its run, lose its work and count against its Job's backoffLimit; the
	// workload's next pods get the recommendation (and the floor) at creation.
	SkipRunToCompletion = "run-to-completion"
	// SkipWindowClosed: no resize window is open and the change is not urgent growth.
	SkipWindowClosed = "window-closed"
	// SkipWindowInvalid: a resize window does not parse; nothing is applied until it is fixed.
	SkipWindowInvalid = "window-invalid"
	// SkipMinReplicas: fewer running pods than spec.updatePolicy.minReplicas (default 2).
	SkipMinReplicas = "min-replicas"
	// SkipInFlight: the workload already has its share of pods being replaced.
	SkipInFlight = "in-flight"
	// SkipRateLimited: the cluster-wide eviction rate limit is spent for now.
	SkipRateLimited = "rate-limited"
	// SkipWarmUp: the updater started (or became leader) less than --warm-up ago.
	SkipWarmUp = "warm-up"
	// SkipAdmissionUnavailable: the admission webhook's status Lease is stale, so a
	// replacement would not get its fraction.
	SkipAdmissionUnavailable = "admission-unavailable"
	// SkipRecommenderStale: the status Lease of the recommender instance that owns the
	// autoscaler was not renewed within Config.RecommenderLeaseMaxAge (the recommender
	// is down, has lost its leader, or its cycles fail), so the recommendation is not
	// kept current: only urgent (protective) growth goes ahead.
	SkipRecommenderStale = "recommender-stale"
	// SkipNamespaceNotSelected: the recommender instance the autoscaler names leaves
	// its namespace out (--shard-namespace-selector; the recommendation's
	// ConfigUnsupported condition says NamespaceNotSelected), so nobody keeps the
	// recommendation current although that instance's status Lease is fresh: only
	// protective growth goes ahead.
	SkipNamespaceNotSelected = "namespace-not-selected"
	// SkipRecommendationOutdated: the recommendation was computed for an older
	// generation of the autoscaler's spec (its status.observedGeneration below the
	// autoscaler's metadata.generation: a bound, headroom or sharing mode edited since)
	// and the recommender has not recomputed it yet: only protective growth goes ahead.
	SkipRecommendationOutdated = "recommendation-outdated"
	// SkipPDB: the Eviction API refused: a PodDisruptionBudget allows no disruption. The
	// workload's pods keep this reason until the next try: --retry-backoff after the
	// first refusal, doubled after each further one in a row, at most MaxRefusalBackoff.
	SkipPDB = "pdb"
	// SkipEvictionError: the Eviction API failed otherwise (retried after --retry-backoff).
	SkipEvictionError = "eviction-error"
	// SkipGuardrail: the pod is too large but the latency guardrail is active.
	SkipGuardrail = "guardrail-active"
	// SkipMetricsUnavailable: the pod is too large but the recommendation's
	// MetricsUnavailable condition says the recommender's data are incomplete now (a
	// failed or partial read, an exporter down, no samples while running, every sample
	// filtered: contract.IncompleteData), so what the pod uses now is unknown.
	SkipMetricsUnavailable = "metrics-unavailable"
	// SkipRecordInvalid: the pod is too large by what it was read to hold, but its
	// applied record (gpufrac.io/applied) does not parse, so what the webhook wrote into
	// it is unknown (ReadAllocation read the backend fields, or a whole GPU): never
	// shrunk for it (gpufrac_updater_pods_record_invalid, AppliedRecordInvalid event).
	SkipRecordInvalid = "record-invalid"
	// SkipBelowFloor: shrinking to the target would go below the rollback floor.
	SkipBelowFloor = "below-floor"
	// SkipAwaitingFloor: a rollback floor was raised this cycle and is not yet in the
	// published status.updater.floor, which the webhook reads to give the replacement at
	// least the floor; the pod is replaced in a later cycle.
	SkipAwaitingFloor = "awaiting-floor"
	// SkipComputeHeld: only compute would shrink, and a horizontal autoscaler scales the
	// workload on GPU utilisation.
	SkipComputeHeld = "compute-held"
	// SkipHeldComputePending: compute is held (ComputeShrinkHeld) and the compute the
	// workload's pods hold (status.updater.heldCompute) is not published yet: the
	// webhook would not know what a replacement must at least get. Next cycle.
	SkipHeldComputePending = "held-compute-pending"
	// SkipNoRecommendation: no usable recommendation (none, not provided, stale owner).
	SkipNoRecommendation = "no-recommendation"
	// SkipLowConfidence: the recommendation is below the webhook's --min-confidence, so a
	// replacement would not get it.
	SkipLowConfidence = "low-confidence"
	// SkipTargetUnresolved: the autoscaler's target does not exist or is unsupported.
	SkipTargetUnresolved = "target-unresolved"
	// SkipReplacementUnchanged: an earlier replacement of this workload came back
	// without its fraction (the webhook left it unchanged); evictions pause for
	// --stuck-backoff so pods are not replaced in a loop.
	SkipReplacementUnchanged = "replacement-unchanged"
	// SkipInPlaceError: an in-place change failed (retried next cycle).
	SkipInPlaceError = "in-place-error"
	// SkipNotPersistent: a change inside the bounds has not persisted long enough yet
	// (Hysteresis: --persist-cycles, --persist-for).
	SkipNotPersistent = "not-persistent"
	// SkipMinInterval: the workload's last round of replacements started less than
	// --min-replacement-interval ago, or in the same resize window opening.
	SkipMinInterval = "min-interval"
	// SkipDuplicateTarget: an older autoscaler (contract.Precedes) targets the same
	// workload and is in charge; this one is ignored.
	SkipDuplicateTarget = "duplicate-target"
	// SkipNoCapacity: the replacement could not be placed (no node with the GPU resource
	// free, or no shared GPU with the memory free): the pod is kept (Placeable).
	SkipNoCapacity = "no-capacity"
	// SkipDeviceInFlight: a replacement of another pod from the same device (HAMi GPU,
	// KAI GPU group) is in flight, and --max-in-flight-per-device of them at once is the
	// most.
	SkipDeviceInFlight = "device-in-flight"
)

// Results: the result label of gpufrac_updater_evictions_total and
// gpufrac_updater_in_place_updates_total.
const (
	// ResultEvicted: the Eviction API accepted.
	ResultEvicted = "evicted"
	// ResultRefused: the Eviction API refused (PodDisruptionBudget, 429).
	ResultRefused = "refused"
	// ResultError: the API call failed.
	ResultError = "error"
	// ResultApplied: an in-place change was written.
	ResultApplied = "applied"
	// ResultFallback: InPlaceOrRecreate could not change the pod in place (a GPU
	// backend) and recreates it.
	ResultFallback = "fallback"
)

var (
	evictionsTotal      = promreg.CounterVec("gpufrac_updater_evictions_total", "Eviction API calls by result (evicted, refused, error), and deletions of not-Ready pods (deleted-unready).", "result")
	inPlaceTotal        = promreg.CounterVec("gpufrac_updater_in_place_updates_total", "In-place pod updates by result (applied, error, fallback: recreated instead).", "result")
	skipsTotal          = promreg.CounterVec("gpufrac_updater_skips_total", "Out-of-date pods not updated in a cycle, by reason.", "reason")
	consolidationsTotal = promreg.Counter("gpufrac_updater_consolidations_total", "Shared GPUs consolidation evicted a pod from to empty them (--consolidate), counted at the first eviction from each.")
	rollbacksTotal      = promreg.CounterVec("gpufrac_updater_rollbacks_total", "Rollbacks after a shrink, by trigger (latency, restart).", "trigger")
	cycleDuration       = promreg.Histogram("gpufrac_updater_cycle_duration_seconds", "Duration of one updater cycle, seconds.", prometheus.ExponentialBuckets(0.001, 2, 16))
	podsOutOfDate       = promreg.Gauge("gpufrac_updater_pods_out_of_date", "Pods whose applied fraction is outside the recommendation's bounds or too far from its target, at the last cycle.")
	podsMismatched      = promreg.Gauge("gpufrac_updater_pods_fraction_mismatch", "Pods that carry other GPU fraction values than the admission webhook wrote (gpufrac.io/applied), at the last cycle.")
	podsRecordInvalid   = promreg.Gauge("gpufrac_updater_pods_record_invalid", "Pods of autoscalers whose admission record (gpufrac.io/applied) does not parse, at the last cycle; they are never shrunk.")
	statusWriteFailures = promreg.CounterVec("gpufrac_updater_status_write_failures_total", "Failed writes of an autoscaler's status.updater from the third failure in a row of the same autoscaler on (one per autoscaler per cycle), by reason: the API status reason (Conflict, Invalid, Forbidden, ...; Other, Unknown).", "reason")
	admissionAvailable  = promreg.Gauge("gpufrac_updater_admission_available", "1 when the admission webhook's status Lease was fresh at the last cycle, else 0 (no evictions).")
	// recommenderAvailable is read only with Config.RecommenderLeaseMaxAge set.
	recommenderAvailable = promreg.GaugeVec("gpufrac_updater_recommender_available", "1 when the status Lease of the recommender instance (label recommender, its --recommender-name) was fresh at its last read, else 0 (only protective growth for its autoscalers).", "recommender")
)

// Register adds the updater's metrics to a registry (controller-runtime's
// metrics.Registry in cmd/updater). It returns the first registration error.
func Register(reg prometheus.Registerer) error {
	return promreg.Register(reg, evictionsTotal, inPlaceTotal, skipsTotal, rollbacksTotal, cycleDuration, podsOutOfDate, podsMismatched,
		podsRecordInvalid, admissionAvailable, recommenderAvailable, consolidationsTotal, statusWriteFailures)
}

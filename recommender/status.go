package recommender

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/policy"
	"github.com/gpufrac/gpufrac/workload"
)

// Condition reasons.
const (
	ReasonRecommended     = "Recommended"
	ReasonNoHistory       = "NoHistory"
	ReasonPrometheusError = gpufracv1.ReasonPrometheusError
	ReasonNoSamples       = "NoSamples"
	ReasonSamplesPresent  = "SamplesPresent"
	ReasonShortHistory    = "ShortHistory"
	ReasonSharedDevice    = "SharedDeviceValues"
	// ReasonLowFidelityCompute: LowConfidence True; compute came from
	// DCGM_FI_DEV_GPU_UTIL alone and reads busy (policy.Config.LowFidelityBusy).
	ReasonLowFidelityCompute = "LowFidelityCompute"
	// ReasonMultipleGPUs: RecommendationProvided False; a container used several GPUs
	// (or MIG instances) at once, so no one-GPU fraction is recommended.
	ReasonMultipleGPUs = "MultipleGPUs"
	// ReasonNoMemorySamples: RecommendationProvided False; a container whose policy
	// controls memory has compute samples but no memory sample.
	ReasonNoMemorySamples = "NoMemorySamples"
	ReasonEnoughHistory   = "EnoughHistory"
	// ReasonYoungEvidence: LowConfidence False; history is shorter than the low
	// confidence needs, and the confidence comes from the hours memory stayed at its
	// level (estimate.Config.YoungConfidence), with a margin on the memory target
	// (ContainerRecommendation.YoungMarginPercent).
	ReasonYoungEvidence    = "YoungEvidence"
	ReasonPodsMatched      = "PodsMatched"
	ReasonNoPods           = "NoPods"
	ReasonTargetUnusable   = "TargetUnsupported"
	ReasonTargetNotFound   = "TargetNotFound"
	ReasonConfigOK         = "ConfigSupported"
	ReasonAllContainersOff = "AllContainersOff"
	// ReasonAmbiguousContainer: MetricsUnavailable True; an exporter reported usage per
	// pod without a container label (KAI's gpu_fractioning_*) for pods with several GPU
	// containers (or none), so it was not attributed to any container.
	ReasonAmbiguousContainer = "AmbiguousGPUContainer"
	// ReasonStaleSeries: a memory series stayed flat while the container's GPU activity
	// read 0 (a value left by an exited process); its samples were not used.
	ReasonStaleSeries = "StaleSeries"
	// ReasonTargetChanged: RecommendationProvided False; spec.targetRef names another
	// workload than the written recommendation was made for, so that one was dropped
	// (never applied to the new target's pods) until the new target's history gives one.
	ReasonTargetChanged = "TargetChanged"
	// ReasonPolicyChanged: a Normal event; a recommendation kept while no new one is made
	// (MetricsUnavailable) was moved into the container policy's current minimum and
	// maximum.
	ReasonPolicyChanged = "PolicyChanged"
)

// reconcile computes the recommendation of one autoscaler and returns its write (write,
// with what it computed; it changes no state of r, so the writes of a cycle can run at
// once), or the error of reading the recommendation written. primary is false when
// another autoscaler already targets the same workload.
func (r *Recommender) reconcile(ctx context.Context, e *entry, primary bool, loadErr error, now time.Time) (func(context.Context) error, error) {
	gfa := e.gfa
	var old gpufracv1.GPUFractionRecommendation
	exists := true
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}, &old); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		exists = false
	}
	st := *old.Status.DeepCopy()
	st.ObservedGeneration = gfa.Generation
	st.MatchedPods = int32(e.pods)
	set := conditionSetter(&st, gfa.Generation)
	// prev is the written recommendation as the recommendation step reads it (the noise
	// rule, a gap keeping it): none when it was made for another workload.
	prev := &old
	if exists && contract.Retargeted(gfa, &old) {
		prev = old.DeepCopy()
		prev.Status.ContainerRecommendations = nil
		msg := fmt.Sprintf("spec.targetRef changed from %s %s to %s %s: the recommendation of the former does not apply to the latter's pods",
			old.Spec.TargetRef.Kind, old.Spec.TargetRef.Name, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name)
		clearRecommendation(&st)
		set(gpufracv1.ConditionRecommendationProvided, false, ReasonTargetChanged, msg)
	}

	switch {
	case e.targetErr != nil:
		reason := ReasonTargetUnusable
		if errors.Is(e.targetErr, workload.ErrNotFound) {
			reason = ReasonTargetNotFound
		}
		r.eventOnChange(old.Status.Conditions, gfa, reason, e.targetErr.Error())
		set(gpufracv1.ConditionConfigUnsupported, true, reason, e.targetErr.Error())
	case !primary:
		r.duplicate(e, old.Status.Conditions, &st, set)
	default:
		set(gpufracv1.ConditionConfigUnsupported, false, ReasonConfigOK, "target resolved")
		r.reconcilePrimary(ctx, e, prev, &st, set, loadErr, now)
	}

	if meta.FindStatusCondition(st.Conditions, gpufracv1.ConditionRecommendationProvided) == nil {
		set(gpufracv1.ConditionRecommendationProvided, false, ReasonNoHistory, "no recommendation yet")
	}
	r.cur.exported.add(gfa, &st, e.pods, r.cur.latency[types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}], r.Config.Policy.GPUMemoryBytes)
	return func(ctx context.Context) error { return r.write(ctx, gfa, &old, exists, &st, now) }, nil
}

// setCondition sets the status condition of type t: True when ok, else False, with
// reason and msg.
type setCondition func(t string, ok bool, reason, msg string)

// conditionSetter returns the setCondition of st's conditions, observed at generation
// gen.
func conditionSetter(st *gpufracv1.GPUFractionRecommendationStatus, gen int64) setCondition {
	return func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
}

// duplicate marks the autoscaler of e as a duplicate of the one that already targets
// its workload (an event when the condition changes) and empties its recommendation.
func (r *Recommender) duplicate(e *entry, prev []metav1.Condition, st *gpufracv1.GPUFractionRecommendationStatus, set setCondition) {
	gfa := e.gfa
	msg := fmt.Sprintf("another GPUFractionAutoscaler already targets %s %s", gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name)
	if e.winner != nil {
		msg = contract.DuplicateMessage(gfa, e.winner, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name)
	}
	r.eventOnChange(prev, gfa, gpufracv1.ReasonDuplicateTarget, msg)
	set(gpufracv1.ConditionConfigUnsupported, true, gpufracv1.ReasonDuplicateTarget, msg)
	// Nothing of the duplicate may be applied: no container recommendations (the
	// webhook and the updater also ignore it, in case an old status is read).
	clearRecommendation(st)
	set(gpufracv1.ConditionRecommendationProvided, false, gpufracv1.ReasonDuplicateTarget, msg)
}

// clearRecommendation empties st's container recommendations and their summary.
func clearRecommendation(st *gpufracv1.GPUFractionRecommendationStatus) {
	st.ContainerRecommendations = nil
	st.Memory, st.Compute, st.SharingMode, st.ConfidencePercent = nil, nil, "", nil
}

// reconcilePrimary sets NoPodsMatched and, unless the cycle's read failed (loadErr:
// the last recommendation is kept exactly as it was), recommends.
func (r *Recommender) reconcilePrimary(ctx context.Context, e *entry, old *gpufracv1.GPUFractionRecommendation,
	st *gpufracv1.GPUFractionRecommendationStatus, set setCondition, loadErr error, now time.Time) {
	gfa := e.gfa
	if e.pods == 0 {
		set(gpufracv1.ConditionNoPodsMatched, true, ReasonNoPods, fmt.Sprintf("no pods of %s %s exist", gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name))
	} else {
		set(gpufracv1.ConditionNoPodsMatched, false, ReasonPodsMatched, nOf(e.pods, "pod", "pods"))
	}
	if loadErr == nil {
		r.recommend(ctx, e, old, st, set, now)
		return
	}
	reason := ReasonPrometheusError
	if errors.Is(loadErr, metrics.ErrPartialResponse) {
		reason = gpufracv1.ReasonPartialResponse // an incomplete answer is a failed read
	}
	// A workload this process has loaded the history of, read fine until now, keeps
	// MetricsUnavailable False for the first FailedReadsBeforeUnavailable − 1 failed
	// reads in a row (one Prometheus timeout or restart): the recommendation is kept as
	// it was either way, and flipping the condition on every blip rewrote every status
	// twice (8,400 writes in one cycle at 10,000 pods, docs/benchmarks.md).
	t := r.tracked[history.WorkloadKey(e.ref)]
	if c := meta.FindStatusCondition(old.Status.Conditions, gpufracv1.ConditionMetricsUnavailable); t == nil || !t.bootstrapped ||
		c == nil || c.Status != metav1.ConditionFalse || r.failedReads >= FailedReadsBeforeUnavailable {
		set(gpufracv1.ConditionMetricsUnavailable, true, reason, truncate(loadErr.Error(), 512))
	}
	r.keep(gfa, old.Status.Conditions, st, set, startOrder(r.cur.templates[history.WorkloadKey(e.ref)]), now)
}

// FailedReadsBeforeUnavailable is how many cycles in a row must fail to read Prometheus
// before a recommendation that was read fine says MetricsUnavailable (PrometheusError,
// PartialResponse), which holds the updater's shrinks; a new one says it at once. Its
// recommendation is kept as it was from the first failure. The same count as
// EmptyCyclesWhileRunning: three minutes at the default --interval.
const FailedReadsBeforeUnavailable = EmptyCyclesWhileRunning

// recommend fills st with new container recommendations when they differ from the
// written ones beyond noise.
func (r *Recommender) recommend(ctx context.Context, e *entry, old *gpufracv1.GPUFractionRecommendation,
	st *gpufracv1.GPUFractionRecommendationStatus, set setCondition, now time.Time) {
	gfa := e.gfa
	w := history.WorkloadKey(e.ref)
	guard := r.setGuardrail(ctx, gfa, st, set, now)
	recs, off, known := r.Config.Recommend(r.model, w, &gfa.Spec, r.cur.templates[w], old.Status.ContainerRecommendations, guard, now)
	recs = inPods(recs, r.cur.containers[w])
	applyFloor(gfa, recs, now)
	// A gap in this cycle's data (every sample filtered, none while pods run, an
	// exporter down): the written recommendation is kept as it was, as for a failed read.
	gapReason, gapMsg := r.dataGap(w, e.podNames)
	if gapReason != "" && (len(recs) == 0 || len(old.Status.ContainerRecommendations) > 0) {
		set(gpufracv1.ConditionMetricsUnavailable, true, gapReason, gapMsg)
		r.keep(gfa, old.Status.Conditions, st, set, startOrder(r.cur.templates[w]), now)
		return
	}
	// A history loaded without part of what the written recommendation was made from
	// (Prometheus' retention, a new Prometheus): kept as written, as for a gap.
	if msg := r.historyIncomplete(ctx, w, old, now); msg != "" {
		metrics.Incomplete.WithLabelValues(metrics.IncompleteHistory).Inc()
		set(gpufracv1.ConditionMetricsUnavailable, true, gpufracv1.ReasonHistoryIncomplete, msg)
		r.keep(gfa, old.Status.Conditions, st, set, startOrder(r.cur.templates[w]), now)
		return
	}
	unattributed := r.unattributed(w)
	if len(recs) == 0 {
		r.noRecommendation(w, off, known, unattributed, set)
		return
	}
	if msg := r.multiGPU(w, recs); msg != "" {
		// Left alone: a one-GPU fraction of a multi-GPU pod is wrong on every device.
		set(gpufracv1.ConditionMetricsUnavailable, false, ReasonSamplesPresent, "samples read")
		set(gpufracv1.ConditionRecommendationProvided, false, ReasonMultipleGPUs, msg)
		return
	}
	switch {
	case gapReason != "":
		set(gpufracv1.ConditionMetricsUnavailable, true, gapReason, gapMsg) // first recommendation, from what was valid
	case unattributed != "":
		set(gpufracv1.ConditionMetricsUnavailable, true, ReasonAmbiguousContainer, unattributed) // from the pods that could be attributed
	case r.wrongDevice(w) != "":
		set(gpufracv1.ConditionMetricsUnavailable, true, ReasonWrongDevice, r.wrongDevice(w)) // from the samples on the pods' own GPUs
	case r.staleSeries(w) != "":
		set(gpufracv1.ConditionMetricsUnavailable, true, ReasonStaleSeries, r.staleSeries(w)) // from the samples that were live
	case r.zeroWhileBusy(w) != "":
		set(gpufracv1.ConditionMetricsUnavailable, true, gpufracv1.ReasonZeroMemoryWhileBusy, r.zeroWhileBusy(w)) // from the samples that were not 0; shrinks held
	default:
		set(gpufracv1.ConditionMetricsUnavailable, false, ReasonSamplesPresent, "samples read")
	}
	st.ContainerRecommendations = recs
	st.Attribution = attributionMethod(r.methods[w])
	st.MetricSources = r.metricSources(w)
	summarise(st, startOrder(r.cur.templates[w]))
	r.setConfidence(w, st, recs, set)
	if msg := missingMemory(recs, &gfa.Spec); msg != "" {
		set(gpufracv1.ConditionRecommendationProvided, false, ReasonNoMemorySamples, msg)
	} else {
		set(gpufracv1.ConditionRecommendationProvided, true, ReasonRecommended, nOf(len(recs), "container", "containers"))
	}
	r.cappedBelowNeed(gfa, old.Status.Conditions, recs, set)
}

// inPods returns recs without the containers that no existing pod of the workload has
// (names: the containers of its pods, cycle.containers), such as the former name of a
// container renamed by a rollout, whose history stays in the model for the history
// length: its recommendation is for no pod, and counted in status.memory, the pod total
// the sharing planner and gpufrac report read, it added the old container's memory to
// the new one's. recs are returned as they are while the workload has no pod (scaled to
// zero: every container's recommendation is kept for its next pods), during a rollout
// (the old pods still have the old name), and when no recommended container is in the
// pods (names the exporter reports differently from the pod spec: nothing to tell the
// current containers from the former ones by).
func inPods(recs []gpufracv1.ContainerRecommendation, names map[string]bool) []gpufracv1.ContainerRecommendation {
	if len(names) == 0 || !slices.ContainsFunc(recs, func(c gpufracv1.ContainerRecommendation) bool { return names[c.ContainerName] }) {
		return recs
	}
	return slices.DeleteFunc(recs, func(c gpufracv1.ContainerRecommendation) bool { return !names[c.ContainerName] })
}

// setGuardrail sets LatencyGuardrailActive from the autoscaler's latency guardrail and
// returns the guardrail the recommendation follows.
func (r *Recommender) setGuardrail(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler, st *gpufracv1.GPUFractionRecommendationStatus,
	set setCondition, now time.Time) gpufracv1.Guardrail {
	guard, guardReason, guardMsg := r.guardrail(ctx, gfa, now)
	switch {
	case gfa.Spec.LatencyGuardrail == nil:
		set(gpufracv1.ConditionLatencyGuardrailActive, false, gpufracv1.ReasonNoGuardrail, "no latency guardrail set")
	case guardReason == gpufracv1.ReasonLatencyUnknown || guardReason == gpufracv1.ReasonLatencyNoData:
		// Latency unknown: a failed query is treated as near the objective (no shrink),
		// an empty result as no pressure.
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: gpufracv1.ConditionLatencyGuardrailActive,
			Status: metav1.ConditionUnknown, Reason: guardReason, Message: guardMsg, ObservedGeneration: gfa.Generation})
	default:
		set(gpufracv1.ConditionLatencyGuardrailActive, guard != gpufracv1.GuardrailNone, guardReason, guardMsg)
	}
	return guard
}

// noRecommendation sets MetricsUnavailable when workload w got no container
// recommendation, with the most specific reason: every container Off (then False),
// samples on the wrong device, unattributed samples, no samples at all (naming the GPU
// series of the namespace whose workload labels are not read, labelHint).
func (r *Recommender) noRecommendation(w history.WorkloadKey, off, known int, unattributed string, set setCondition) {
	reason, msg := ReasonNoSamples, "no GPU samples in Prometheus for the workload's pods"
	if len(r.order()) == 0 {
		msg = noSourceMessage(r.Config.HistoryLength)
	} else if hint := r.labelHint(w.Namespace); hint != "" {
		msg += ": " + hint
	}
	if unattributed != "" {
		reason, msg = ReasonAmbiguousContainer, unattributed
	}
	if wrong := r.wrongDevice(w); wrong != "" {
		reason, msg = ReasonWrongDevice, wrong
	}
	if zero := r.zeroWhileBusy(w); zero != "" {
		reason, msg = gpufracv1.ReasonZeroMemoryWhileBusy, zero
	}
	if off > 0 && off == known {
		reason, msg = ReasonAllContainersOff, "every container's policy mode is Off"
	}
	set(gpufracv1.ConditionMetricsUnavailable, reason != ReasonAllContainersOff, reason, msg)
}

// setConfidence sets LowConfidence from st's confidence and what explains it: a shared
// GPU's copied samples, compute read from GPU_UTIL alone, short history, or the
// evidence of a young workload. Init containers are left out: their few minutes per pod
// start are short history whatever the workload's age.
func (r *Recommender) setConfidence(w history.WorkloadKey, st *gpufracv1.GPUFractionRecommendationStatus,
	recs []gpufracv1.ContainerRecommendation, set setCondition) {
	conf := float64(*st.ConfidencePercent) / 100
	counted := confidenceSet(recs)
	shared := false
	for _, c := range counted {
		if s := r.model.Container(history.ContainerKey{WorkloadKey: w, Container: c.ContainerName}); s != nil && s.SharedSamples > 0 {
			shared = true
		}
	}
	switch {
	case conf < r.Config.LowConfidence && shared:
		set(gpufracv1.ConditionLowConfidence, true, ReasonSharedDevice,
			fmt.Sprintf("confidence %d%%: samples were a shared GPU's device-wide value copied to each pod (an upper bound, not per-pod usage); enable per-pod attribution (dcgm-exporter virtual-GPU mode, HAMi, KAI or the gpufrac agent)", *st.ConfidencePercent))
	case conf < r.Config.LowConfidence && busyFromGPUUtil(counted, r.Config.Policy.ExclusiveThreshold) != "":
		set(gpufracv1.ConditionLowConfidence, true, ReasonLowFidelityCompute,
			fmt.Sprintf("confidence %d%%: container %s reads busy from %s alone, which says a kernel ran, not how much of the GPU it used; not a whole GPU or Exclusive from it. Enable DCGM_FI_PROF_SM_ACTIVE (dcgm-exporter's profiling counters) or use the gpufrac agent",
				*st.ConfidencePercent, busyFromGPUUtil(counted, r.Config.Policy.ExclusiveThreshold), metrics.DCGMGPUUtil))
	case conf < r.Config.LowConfidence:
		set(gpufracv1.ConditionLowConfidence, true, ReasonShortHistory,
			fmt.Sprintf("confidence %d%% under %.0f%%: history %dh of %.0fh needed", *st.ConfidencePercent, r.Config.LowConfidence*100, minHistory(counted), r.Config.Estimator.FullConfidenceHistory.Hours()))
	case youngMargin(counted) > 0:
		m := youngMargin(counted)
		n := levelIntervals(m)
		set(gpufracv1.ConditionLowConfidence, false, ReasonYoungEvidence,
			fmt.Sprintf("confidence %d%% from evidence: history %dh of %.0fh, memory stayed at its level for %s (n = %d); memory target +%d%% (100/n) until the history is long enough",
				*st.ConfidencePercent, minHistory(counted), r.Config.LowConfidence*r.Config.Estimator.FullConfidenceHistory.Hours(),
				atLevel(n, r.model.Options().MemoryAggregationInterval), n, m))
	default:
		set(gpufracv1.ConditionLowConfidence, false, ReasonEnoughHistory, fmt.Sprintf("confidence %d%%", *st.ConfidencePercent))
	}
}

// applyFloor raises recs to the updater's rollback floor while it holds
// (status.updater.floor): never below the allocation that worked, whatever the metrics.
func applyFloor(gfa *gpufracv1.GPUFractionAutoscaler, recs []gpufracv1.ContainerRecommendation, now time.Time) {
	u := contract.UpdaterStatusOf(gfa) // nil when written for a former target
	if u == nil || u.Floor == nil || !now.Before(u.Floor.Until.Time) {
		return
	}
	policy.ApplyFloors(recs, u.Floor)
}

// keep keeps the written recommendation of a cycle that read nothing new (a failed
// read, a gap in the data), clamped into the container policies as they are now
// (policy.WithinPolicy: the user may have raised minMemory, the remedy for a workload
// out of memory, or lowered maxMemory since it was written) and raised to the updater's
// rollback floor where that is higher: the policy and the floor are not measurements,
// so a cycle without data does not hold them back. Nothing lowers it but the user's own
// maximum, which CappedBelowNeed then reports as on the normal path (prev: the
// conditions as written). start is the containers' start order (startOrder) for the pod
// totals.
func (r *Recommender) keep(gfa *gpufracv1.GPUFractionAutoscaler, prev []metav1.Condition, st *gpufracv1.GPUFractionRecommendationStatus,
	set setCondition, start map[string]int, now time.Time) {
	if len(st.ContainerRecommendations) == 0 {
		return
	}
	before := st.DeepCopy().ContainerRecommendations
	var moved []string
	for i := range st.ContainerRecommendations {
		c := &st.ContainerRecommendations[i]
		if policy.WithinPolicy(c, gfa.Spec.ContainerPolicy(c.ContainerName)) {
			moved = append(moved, c.ContainerName)
		}
	}
	applyFloor(gfa, st.ContainerRecommendations, now)
	if equality.Semantic.DeepEqual(before, st.ContainerRecommendations) {
		return
	}
	summarise(st, start)
	if len(moved) > 0 {
		if r.Events != nil {
			r.Events.Eventf(gfa, nil, corev1.EventTypeNormal, ReasonPolicyChanged, "Recommend",
				"container %s: the kept recommendation (no new one while the metrics are unavailable) was moved into the current resource policy's minimum and maximum", strings.Join(moved, ", "))
		}
		r.cappedBelowNeed(gfa, prev, st.ContainerRecommendations, set)
	}
}

// multiGPU says which containers of the workload used several GPUs (or MIG instances)
// at once, or "": their values are per-device maxima, and gpufrac sizes fractions of one
// GPU.
func (r *Recommender) multiGPU(w history.WorkloadKey, recs []gpufracv1.ContainerRecommendation) string {
	var parts []string
	for _, c := range recs {
		if s := r.model.Container(history.ContainerKey{WorkloadKey: w, Container: c.ContainerName}); s != nil && s.Devices > 1 {
			parts = append(parts, fmt.Sprintf("%s on %d GPUs", c.ContainerName, s.Devices))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("container %s at once: gpufrac sizes a fraction of one GPU, and a pod using several is left alone", strings.Join(parts, ", "))
}

// historyIncomplete says which containers of workload w the model holds a shorter
// history of than the written recommendation old was made from because Prometheus no
// longer holds it, or "". A recommendation written at LastUpdateTime from HistoryHours
// of history was made from samples since LastUpdateTime − HistoryHours (the history span
// never exceeds the wall-clock one; gaps only shorten it). Where, within the history
// window, the model's first sample of the container is later than that (by more than
// two memory aggregation intervals: peaks are stamped at their interval's end) and
// Prometheus holds no memory sample of any source read, of any pod, around that time
// (promHolds: the gap is Prometheus', not the workload's own idleness), the history
// loaded lacks what an earlier recommender read: a retention shorter than
// --history-length, or a new or wiped Prometheus, read by this process without a usable
// checkpoint. Recommending from what is left would shrink on a partial history (a peak
// of a day ago forgotten by a restart), so the written recommendation is kept until the
// missing span leaves the history window, as a recommender that had run through would
// forget it. A model that ran continuously never lacks it: its first sample only moves
// earlier.
func (r *Recommender) historyIncomplete(ctx context.Context, w history.WorkloadKey, old *gpufracv1.GPUFractionRecommendation, now time.Time) string {
	if old.Status.LastUpdateTime == nil {
		return ""
	}
	written := old.Status.LastUpdateTime.Time
	horizon := now.Add(-r.Config.HistoryLength)
	slack := 2 * r.model.Options().MemoryAggregationInterval
	var parts []string
	for _, c := range old.Status.ContainerRecommendations {
		if c.HistoryHours <= 0 || !written.After(horizon) {
			continue
		}
		from := written.Add(-time.Duration(c.HistoryHours) * time.Hour)
		if from.Before(horizon) {
			from = horizon
		}
		s := r.model.Container(history.ContainerKey{WorkloadKey: w, Container: c.ContainerName})
		if s == nil || s.Empty() || !s.FirstSample.After(from.Add(slack)) || r.promHolds(ctx, from, slack) {
			continue // no sample at all is another condition (NoSamples)
		}
		parts = append(parts, fmt.Sprintf("container %s: the written recommendation was made from %d h of history, since %s; Prometheus holds no GPU sample then, and the workload's only from %s",
			c.ContainerName, c.HistoryHours, from.UTC().Format(time.RFC3339), s.FirstSample.UTC().Format(time.RFC3339)))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + " (a retention shorter than --history-length, or a new Prometheus, read without a checkpoint): the written recommendation is kept until the missing span leaves the history window"
}

// promHolds reports whether Prometheus holds a memory sample of any source read in the
// window ending at from+window, rounded down to the memory aggregation interval: one
// instant query (a count per field: count_over_time drops the names, which alone tell
// the fields' series apart), remembered while the time is within the history window
// (what Prometheus holds of the past only shrinks with its retention). A failed query
// says no, for this cycle only (the history is then taken as incomplete: nothing
// shrinks on it).
func (r *Recommender) promHolds(ctx context.Context, from time.Time, window time.Duration) bool {
	at := from.Add(window).Truncate(r.model.Options().MemoryAggregationInterval)
	if held, ok := r.promHeld[at]; ok {
		return held
	}
	var parts []string
	for _, src := range r.order() {
		for _, f := range src.Fields(metrics.SignalMemory) {
			parts = append(parts, fmt.Sprintf("count(count_over_time(%s[%s]))", f.Metric, model.Duration(window)))
		}
	}
	if len(parts) == 0 {
		return false
	}
	vec, err := r.Reader.Vector(ctx, strings.Join(parts, " or "), at)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Reading whether Prometheus holds the history's start failed; taken as not held", "at", at, "err", err)
		return false
	}
	horizon := r.cur.now.Add(-r.Config.HistoryLength)
	if r.promHeld == nil {
		r.promHeld = map[time.Time]bool{}
	}
	for t := range r.promHeld {
		if t.Before(horizon) {
			delete(r.promHeld, t)
		}
	}
	r.promHeld[at] = len(vec) > 0
	return len(vec) > 0
}

// missingMemory says which containers got a recommendation without memory although
// their policy controls memory (e.g. a MIG instance for which dcgm-exporter emits no
// DCGM_FI_DEV_FB_USED), or "". Init containers are not named: nothing is written into
// them, so they hold up no pod.
func missingMemory(recs []gpufracv1.ContainerRecommendation, spec *gpufracv1.GPUFractionAutoscalerSpec) string {
	var names []string
	for _, c := range recs {
		if c.Target.Memory == nil && c.ContainerType != gpufracv1.ContainerTypeInit && spec.ContainerPolicy(c.ContainerName).Controls(gpufracv1.ResourceMemory) {
			names = append(names, c.ContainerName)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("no GPU memory samples for container %s (compute only): a fraction without memory is not applied; check that the exporter emits the memory metric (dcgm-exporter omits DCGM_FI_DEV_FB_USED for MIG instances on some versions)", strings.Join(names, ", "))
}

// cappedBelowNeed sets CappedBelowNeed from each container's uncapped need and its
// policy's maximums (policy.CappedBelowNeed) and records a Warning event on the
// autoscaler when it turns True or the capped containers and resources change.
func (r *Recommender) cappedBelowNeed(gfa *gpufracv1.GPUFractionAutoscaler, prev []metav1.Condition,
	recs []gpufracv1.ContainerRecommendation, set setCondition) {
	var parts, keys []string
	for _, rec := range recs {
		s := policy.CappedBelowNeed(rec, gfa.Spec.ContainerPolicy(rec.ContainerName))
		if !s.Capped() {
			continue
		}
		parts = append(parts, s.String())
		keys = append(keys, fmt.Sprintf("%s/%t/%t", s.Container, s.MemoryBytes > 0, s.ComputeMilli > 0))
	}
	if len(parts) == 0 {
		delete(r.cappedNoted, gfa.UID)
		set(gpufracv1.ConditionCappedBelowNeed, false, gpufracv1.ReasonWithinPolicy, "no target is held below its need by the resource policy")
		return
	}
	msg := truncate(strings.Join(parts, "; ")+": the targets stay at the policy maximum; raise maxMemory/maxCompute or expect out-of-memory errors and slowdowns", 1000)
	key := strings.Join(keys, ",")
	c := meta.FindStatusCondition(prev, gpufracv1.ConditionCappedBelowNeed)
	noted, ok := r.cappedNoted[gfa.UID] // unknown after a restart: the condition already said it
	if (c == nil || c.Status != metav1.ConditionTrue || (ok && noted != key)) && r.Events != nil {
		r.Events.Eventf(gfa, nil, corev1.EventTypeWarning, gpufracv1.ReasonPolicyMaximum, "Recommend", "%s", msg)
	}
	if r.cappedNoted == nil {
		r.cappedNoted = map[types.UID]string{}
	}
	r.cappedNoted[gfa.UID] = key
	set(gpufracv1.ConditionCappedBelowNeed, true, gpufracv1.ReasonPolicyMaximum, msg)
}

// busyFromGPUUtil names the first container whose compute came from DCGM_FI_DEV_GPU_UTIL
// alone and reads as needing the whole GPU (uncapped target at threshold or more), or "".
func busyFromGPUUtil(recs []gpufracv1.ContainerRecommendation, threshold float64) string {
	for _, c := range recs {
		if c.ComputeSource == metrics.DCGMGPUUtil && c.UncappedTarget.Compute != nil && c.UncappedTarget.Compute.AsApproximateFloat64() >= threshold {
			return c.ContainerName
		}
	}
	return ""
}

// staleSeries names the pods whose memory series were stale this cycle (dropStale), or
// "" when none was.
func (r *Recommender) staleSeries(w history.WorkloadKey) string {
	if t := r.tracked[w]; t != nil {
		return firstOfPods(t.gaps.stale)
	}
	return ""
}

// zeroWhileBusy names the pods whose memory read 0 while they were busy this cycle
// (dropStale, metrics.ZeroWhileBusy), or "" when none did.
func (r *Recommender) zeroWhileBusy(w history.WorkloadKey) string {
	if t := r.tracked[w]; t != nil {
		return firstOfPods(t.gaps.zeroBusy)
	}
	return ""
}

// unattributed returns why pod-level usage of some of the workload's pods was not
// attributed to a container in this cycle's loads, or "".
func (r *Recommender) unattributed(w history.WorkloadKey) string {
	t := r.tracked[w]
	if t == nil || len(t.gaps.unattributed) == 0 {
		return ""
	}
	return firstOfPods(t.gaps.unattributed) + "; set a container label in the exporter, or give one container the GPU"
}

// firstOfPods returns the message of the first pod by name, with how many more pods
// there are, or "" for none.
func firstOfPods(byPod map[string]string) string {
	if len(byPod) == 0 {
		return ""
	}
	pods := make([]string, 0, len(byPod))
	for p := range byPod {
		pods = append(pods, p)
	}
	sort.Strings(pods)
	msg := byPod[pods[0]]
	if len(pods) > 1 {
		msg += fmt.Sprintf(" (and %d more pods)", len(pods)-1)
	}
	return msg
}

// guardrail evaluates the autoscaler's latency query. A failed or empty query is read
// as near the objective: shrinking stops, nothing grows.
func (r *Recommender) guardrail(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler, now time.Time) (gpufracv1.Guardrail, string, string) {
	g := gfa.Spec.LatencyGuardrail
	if g == nil {
		return gpufracv1.GuardrailNone, gpufracv1.ReasonNoGuardrail, ""
	}
	vec, err := r.Reader.Vector(ctx, g.Query, now)
	if err != nil {
		// A broken metric never shrinks an allocation.
		return gpufracv1.GuardrailHold, gpufracv1.ReasonLatencyUnknown, "latency query failed, not shrinking: " + truncate(err.Error(), 400)
	}
	if len(vec) == 0 {
		// No latency series now (no requests, or a sparse metric): nothing to guard.
		return gpufracv1.GuardrailNone, gpufracv1.ReasonLatencyNoData, "latency query returned no data: guardrail not evaluated this cycle"
	}
	// NaN and negative values (no latency is below 0: a broken query, e.g. a counter
	// reset inside a rate or a subtraction) are not a latency, nor is a native
	// histogram (its sample's float value reads 0: a query without histogram_quantile);
	// +Inf is (a quantile in the histogram's last bucket: above every bound, a breach).
	latency := math.Inf(-1)
	for _, s := range vec {
		if v := float64(s.Value); s.Histogram == nil && v >= 0 && v > latency {
			latency = v
		}
	}
	if !math.IsInf(latency, -1) {
		r.cur.latency[types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}] = latency
	}
	obj := g.Objective.Seconds()
	near := 0.1
	if g.NearPercent != nil {
		near = float64(*g.NearPercent) / 100
	}
	switch {
	case math.IsInf(latency, -1):
		return gpufracv1.GuardrailHold, gpufracv1.ReasonLatencyUnknown, "latency query returned only NaN, negative or native-histogram values (wrap a histogram in histogram_quantile): not shrinking"
	case latency > obj:
		return gpufracv1.GuardrailBreached, gpufracv1.ReasonLatencyBreached, fmt.Sprintf("latency %.3gs above objective %s: growing compute, never shrinking", latency, g.Objective.Duration)
	case latency > obj*(1-near):
		return gpufracv1.GuardrailHold, gpufracv1.ReasonLatencyNear, fmt.Sprintf("latency %.3gs within %.0f%% of objective %s: not shrinking", latency, near*100, g.Objective.Duration)
	}
	return gpufracv1.GuardrailNone, gpufracv1.ReasonLatencyOK, fmt.Sprintf("latency %.3gs under objective %s", latency, g.Objective.Duration)
}

// ownedBy returns the metadata of an object the recommender writes for autoscaler gfa
// (its recommendation, its checkpoint): the autoscaler's name and namespace, and gfa as
// its controller owner, so garbage collection deletes it with the autoscaler.
func ownedBy(gfa *gpufracv1.GPUFractionAutoscaler) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      gfa.Name,
		Namespace: gfa.Namespace,
		Labels:    map[string]string{"app.kubernetes.io/managed-by": "gpufrac-recommender"},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         gpufracv1.GroupVersion.String(),
			Kind:               "GPUFractionAutoscaler",
			Name:               gfa.Name,
			UID:                gfa.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}},
	}
}

// adopt sets gfa as the controller owner of gfr when gfr has no controller reference
// (orphaned by `kubectl delete gfa --cascade=orphan`, or the reference removed; an
// autoscaler of the same name then finds it): garbage collection deletes it with gfa
// again, and the webhook and the updater, which take a recommendation without an
// ownerReference to its autoscaler as stale (contract.Adopted), apply it from this
// write on. Other references to autoscalers, which only an earlier one of the same name
// can hold, are dropped; others are kept. A recommendation controlled by another
// object (an earlier autoscaler's, until garbage collection deletes it or strips the
// reference) is left as it is. It reports whether gfr changed.
func adopt(gfr *gpufracv1.GPUFractionRecommendation, gfa *gpufracv1.GPUFractionAutoscaler) bool {
	if metav1.GetControllerOfNoCopy(gfr) != nil {
		return false
	}
	refs := slices.DeleteFunc(slices.Clone(gfr.OwnerReferences), func(o metav1.OwnerReference) bool { return o.Kind == "GPUFractionAutoscaler" })
	gfr.OwnerReferences = append(refs, ownedBy(gfa).OwnerReferences...)
	return true
}

// write creates or updates the recommendation and mirrors its summary onto the autoscaler.
// An existing recommendation's status is written before its spec.targetRef and
// controller reference: those say whose values the status holds (contract.Retargeted,
// contract.Adopted), so a status write that fails (or a recommender stopped between the
// two) leaves the former target's values under the former target, never under the new
// one, where the webhook and the updater would apply them.
func (r *Recommender) write(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler, old *gpufracv1.GPUFractionRecommendation,
	exists bool, st *gpufracv1.GPUFractionRecommendationStatus, now time.Time) error {
	gfr := old.DeepCopy()
	if !exists {
		gfr = &gpufracv1.GPUFractionRecommendation{
			ObjectMeta: ownedBy(gfa),
			Spec:       gpufracv1.GPUFractionRecommendationSpec{TargetRef: gfa.Spec.TargetRef},
		}
		if err := r.Client.Create(ctx, gfr); err != nil {
			return fmt.Errorf("creating GPUFractionRecommendation: %w", err)
		}
	}
	if !equality.Semantic.DeepEqual(old.Status.ContainerRecommendations, st.ContainerRecommendations) || old.Status.LastUpdateTime == nil {
		if len(st.ContainerRecommendations) > 0 {
			st.LastUpdateTime = &metav1.Time{Time: now}
		}
	}
	if !exists || !equality.Semantic.DeepEqual(old.Status, *st) {
		base := gfr.DeepCopy()
		gfr.Status = *st
		// A merge patch, not an update: the cache may not have seen our last write yet.
		if err := r.Client.Status().Patch(ctx, gfr, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("updating GPUFractionRecommendation status: %w", err)
		}
		recommendationsWritten.Inc()
	}
	if exists {
		if adopted, retarget := adopt(gfr, gfa), !equality.Semantic.DeepEqual(gfr.Spec.TargetRef, gfa.Spec.TargetRef); adopted || retarget {
			gfr.Spec.TargetRef = gfa.Spec.TargetRef
			if err := r.Client.Update(ctx, gfr); err != nil {
				return fmt.Errorf("updating GPUFractionRecommendation spec and owner: %w", err)
			}
		}
	}

	as := gfa.Status.DeepCopy()
	as.ObservedGeneration = gfa.Generation
	as.Memory, as.Compute, as.SharingMode, as.ConfidencePercent = st.Memory, st.Compute, st.SharingMode, st.ConfidencePercent
	as.Conditions = st.Conditions
	if !equality.Semantic.DeepEqual(gfa.Status, *as) {
		upd := gfa.DeepCopy()
		upd.Status = *as
		if err := r.Client.Status().Patch(ctx, upd, client.MergeFrom(gfa)); err != nil {
			return fmt.Errorf("updating GPUFractionAutoscaler status: %w", err)
		}
	}
	return nil
}

// eventOnChange records a warning on the autoscaler unless ConfigUnsupported already
// says the same, so a standing problem is not repeated every cycle.
func (r *Recommender) eventOnChange(conds []metav1.Condition, gfa *gpufracv1.GPUFractionAutoscaler, reason, msg string) {
	if c := meta.FindStatusCondition(conds, gpufracv1.ConditionConfigUnsupported); c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason {
		return
	}
	if r.Events != nil {
		r.Events.Eventf(gfa, nil, corev1.EventTypeWarning, reason, "Recommend", "%s", msg)
	}
}

func minHistory(recs []gpufracv1.ContainerRecommendation) int32 {
	h := int32(math.MaxInt32)
	for _, r := range recs {
		h = min(h, r.HistoryHours)
	}
	return h
}

// youngMargin returns the largest YoungMarginPercent of recs (0: none is young).
func youngMargin(recs []gpufracv1.ContainerRecommendation) int32 {
	m := int32(0)
	for _, r := range recs {
		m = max(m, r.YoungMarginPercent)
	}
	return m
}

// levelIntervals returns n, the memory aggregation intervals a young workload's memory
// held its level for, from its margin in percent (YoungMarginPercent, 100/n rounded:
// exact up to n = 10, within one interval above).
func levelIntervals(marginPercent int32) int {
	return max(1, int(math.Round(100/float64(max(marginPercent, 1)))))
}

// atLevel says how long memory held its level, n memory aggregation intervals of
// interval (levelIntervals): "3 hours", "1 hour", or "about 12 hours" where the margin
// does not give n exactly.
func atLevel(n int, interval time.Duration) string {
	about := ""
	if n > 10 {
		about = "about "
	}
	d := time.Duration(n) * interval
	if d%time.Hour == 0 {
		return about + nOf(int(d/time.Hour), "hour", "hours")
	}
	return about + d.String()
}

// nOf says n things: "1 pod", "2 pods".
func nOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

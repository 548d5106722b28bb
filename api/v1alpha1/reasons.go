package v1alpha1

// Reasons of the MetricsUnavailable condition for data the recommender read but did not
// decide from, or could not read. The recommendation stays exactly as it was written last
// (nothing shrinks) while one of them holds, and the updater shrinks no pod on it
// (contract.IncompleteData).
const (
	// ReasonPrometheusError: a query of the cycle failed (an HTTP error, a timeout, too
	// many samples); nothing of the cycle was read.
	ReasonPrometheusError = "PrometheusError"
	// ReasonPartialResponse: a Prometheus answer of the cycle carried warnings (Thanos,
	// Mimir or Cortex with a store down), so series may be missing; the cycle is treated
	// like a failed read. Counted in
	// gpufrac_recommender_incomplete_data_total{reason="partial_response"}.
	ReasonPartialResponse = "PartialResponse"
	// ReasonNoSamplesWhileRunning: pods of the workload are running but every GPU query
	// returned no sample for them for several cycles (an exporter or scrape gap); the
	// last recommendation is kept.
	ReasonNoSamplesWhileRunning = "NoSamplesWhileRunning"
	// ReasonAllSamplesFiltered: every sample of a signal (memory or compute) of the
	// workload's pods was dropped as impossible (out of range, NaN, negative), which
	// usually means a unit was misread; the message names the signal and the metric.
	ReasonAllSamplesFiltered = "AllSamplesFiltered"
	// ReasonExporterDown: a scrape target (job, instance) that served the series of a
	// running pod of the workload, from the source read for that pod, is down now
	// (up == 0); the message names the target and the pod. Counted in
	// gpufrac_recommender_incomplete_data_total{reason="exporter_down"}.
	ReasonExporterDown = "ExporterDown"
	// ReasonHistoryIncomplete: the history the recommender holds for a container starts
	// later than the history the written recommendation was made from, within the
	// history window: Prometheus no longer holds what an earlier recommender read (a
	// retention shorter than --history-length, a new or wiped Prometheus) and this
	// process loaded it without a usable checkpoint. The written recommendation is kept
	// until the missing span leaves the history window. Counted in
	// gpufrac_recommender_incomplete_data_total{reason="history_incomplete"}.
	ReasonHistoryIncomplete = "HistoryIncomplete"
	// ReasonZeroMemoryWhileBusy: a memory series of a pod of the workload read 0 while
	// the container's GPU activity was above 0 (a process running kernels holds at least
	// its CUDA context, so the exporter failed to see its memory: per-process
	// attribution lost); those samples were dropped, counted in
	// gpufrac_recommender_samples_dropped_total{reason="zero_while_busy"}, and what the
	// pod uses now is unknown, so nothing shrinks on the recommendation.
	ReasonZeroMemoryWhileBusy = "ZeroMemoryWhileBusy"
)

// CappedBelowNeed: a condition of a GPUFractionRecommendation (mirrored on its
// autoscaler) that is True while the resource policy's maxMemory or maxCompute holds a
// container's target below its uncapped need (status.containerRecommendations[].uncappedTarget).
// The target stays at the cap, as the policy asks; the condition's message and a Warning
// event of the same reason on the autoscaler say by how much (MiB, milli-GPU).
const (
	// ConditionCappedBelowNeed is the condition type.
	ConditionCappedBelowNeed = "CappedBelowNeed"
	// ReasonPolicyMaximum: CappedBelowNeed True; the message names each container,
	// resource, need, cap and shortfall.
	ReasonPolicyMaximum = "PolicyMaximum"
	// ReasonWithinPolicy: CappedBelowNeed False; every target meets its need (or no
	// maximum applies).
	ReasonWithinPolicy = "WithinPolicy"
)

// ReasonDuplicateTarget: several autoscalers target one workload; the oldest is in
// charge (contract.InCharge) and the others are ignored. The reason of the recommender's
// ConfigUnsupported and RecommendationProvided conditions and of the recommender's and
// the webhook's warning events.
const ReasonDuplicateTarget = "DuplicateTarget"

// ReasonNamespaceNotSelected: the recommender instance the autoscaler names
// (spec.recommenders) leaves the autoscaler's namespace out (its
// --shard-namespace-selector does not match the namespace's labels), so no instance
// keeps its recommendation current while that instance's status Lease stays fresh. The
// reason of the ConfigUnsupported condition that instance writes on the autoscaler and
// on an existing recommendation (whose values it leaves as they were), and of its
// warning event; the updater then changes the autoscaler's pods only for protective
// growth. The instance that owns the autoscaler again sets ConfigUnsupported False.
const ReasonNamespaceNotSelected = "NamespaceNotSelected"

package admission

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/internal/promreg"
	"github.com/gpufrac/gpufrac/statuslease"
)

// Webhook names used as the "webhook" label of the metrics.
const (
	// WebhookMutatePods is the pod webhook.
	WebhookMutatePods = "mutate-pods"
	// WebhookValidateAutoscaler is the GPUFractionAutoscaler webhook.
	WebhookValidateAutoscaler = "validate-autoscalers"
)

// Skip reasons: the "reason" label of gpufrac_admission_skipped_total for pods admitted
// unchanged. Reasons of pods that could not be patched safely are the UnsafeError
// reasons.
const (
	// SkipNotPodCreate: the request is not a pod CREATE (not counted).
	SkipNotPodCreate = "not-pod-create"
	// SkipAlreadyApplied: the pod already holds what the webhook would write and its
	// applied record: a reinvocation (reinvocationPolicy IfNeeded) of a pod this webhook
	// patched. Not counted: the pod was counted as patched on the first call.
	SkipAlreadyApplied = "already-applied"
	// SkipNotReady: the informer caches have not synced yet.
	SkipNotReady = "not-ready"
	// SkipExcluded: the pod carries gpufrac.io/exclude=true.
	SkipExcluded = "excluded"
	// SkipNoGPU: no container asks for a GPU resource and no KAI annotation is set.
	SkipNoGPU = "no-gpu"
	// SkipNoController: a bare pod without a controller.
	SkipNoController = "no-controller"
	// SkipOwnerNotCached: the pod's ReplicaSet or Job did not reach the cache in time.
	SkipOwnerNotCached = "owner-not-cached"
	// SkipNoAutoscaler: no autoscaler targets the pod's workload.
	SkipNoAutoscaler = "no-autoscaler"
	// SkipModeOff: the autoscaler's updateMode is Off (or unset).
	SkipModeOff = "mode-off"
	// SkipNoRecommendation: no recommendation, or RecommendationProvided is not True
	// (contract.ReasonNotProvided).
	SkipNoRecommendation = string(contract.ReasonNotProvided)
	// SkipStale: the recommendation is owned by an earlier autoscaler of the same name,
	// or was made for another target than the autoscaler's (contract.ReasonStale).
	SkipStale = string(contract.ReasonStale)
	// SkipAutoscalerDeleting: the autoscaler in charge is being deleted
	// (contract.ReasonDeleting): the updater ignores it too.
	SkipAutoscalerDeleting = string(contract.ReasonDeleting)
	// SkipLowConfidence: confidencePercent is below Config.MinConfidence
	// (contract.ReasonLowConfidence).
	SkipLowConfidence = string(contract.ReasonLowConfidence)
	// SkipNoContainer: no container of the pod has a controlled recommendation.
	SkipNoContainer = "no-matching-container"
	// SkipUnknownBackend: spec.backend.type is not a known backend (warning and event).
	SkipUnknownBackend = "unknown-backend"
	// SkipNothingWritten: the backend found no container to write into (warning).
	SkipNothingWritten = "nothing-written"
	// SkipInternalError: a cache, encoding or unexpected error (logged; pod unchanged).
	SkipInternalError = "internal-error"
	// SkipInvalidRequestObj: the request's pod could not be decoded.
	SkipInvalidRequestObj = "undecodable-pod"
)

var (
	requestDuration = promreg.HistogramVec("gpufrac_admission_request_duration_seconds",
		"Server-side latency of admission requests, from the request's arrival to the written response, seconds.",
		// Sub-millisecond resolution: the target is p99 ≤ 5ms.
		[]float64{0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		"webhook")
	requestsTotal = promreg.CounterVec("gpufrac_admission_requests_total", "Admission requests by webhook and outcome (patched, unchanged, allowed, denied, error).", "webhook", "outcome")
	patchesTotal  = promreg.CounterVec("gpufrac_admission_patches_total", "Pods patched with a recommended fraction, by backend.", "backend")
	skippedTotal  = promreg.CounterVec("gpufrac_admission_skipped_total", "GPU pods admitted unchanged, by reason.", "reason")
	// recordsRemovedTotal counts pods admitted without a fraction whose gpufrac.io/applied
	// record, not written by this webhook (copied into the pod's template), was removed.
	recordsRemovedTotal = promreg.CounterVec("gpufrac_admission_records_removed_total", "GPU pods admitted unchanged whose gpufrac.io/applied record, not written for them (copied into their template), was removed, by skip reason.", "reason")
	errorsTotal         = promreg.CounterVec("gpufrac_admission_errors_total", "Internal errors by component (decode, cache, certificate, registration, lease).", "component")
	certExpiry          = promreg.GaugeVec("gpufrac_admission_certificate_expiry_timestamp_seconds", "Expiry of the self-managed certificates (cert=ca|serving), Unix seconds.", "cert")
	leaseRenewals       = promreg.CounterVec("gpufrac_admission_status_lease_renewals_total", "Renewals of the status Lease by result (renewed, not-ready, error).", "result")
)

var registerOnce sync.Once

// Register adds the gpufrac_admission_* metrics to reg (normally controller-runtime's
// metrics.Registry, which the manager serves on /metrics). Only the first call
// registers; later calls are no-ops. It returns the registration error.
func Register(reg prometheus.Registerer) error {
	var err error
	registerOnce.Do(func() {
		err = promreg.Register(reg, requestDuration, requestsTotal, patchesTotal, skippedTotal, recordsRemovedTotal, errorsTotal, certExpiry, leaseRenewals)
	})
	return err
}

// instrument measures the whole HTTP exchange of a webhook (decode, handle, encode)
// into gpufrac_admission_request_duration_seconds.
func instrument(webhook string, h http.Handler) http.Handler {
	obs := requestDuration.WithLabelValues(webhook)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		obs.Observe(time.Since(start).Seconds())
	})
}

// observeLease counts a status Lease renewal attempt (statuslease.Renewer.Observe).
func observeLease(result string) {
	leaseRenewals.WithLabelValues(result).Inc()
	if result == statuslease.ResultError {
		errorsTotal.WithLabelValues("lease").Inc()
	}
}

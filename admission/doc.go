// Package admission is gpufrac's admission webhook.
//
// The mutating webhook (Mutator) sees pod CREATE requests of pods that ask for a GPU
// resource. It finds the GPUFractionAutoscaler whose target is the pod's top-most
// controller (workload.Owners), from informer caches only, and when the autoscaler's
// update mode is not Off and its GPUFractionRecommendation is confident enough, writes
// the recommended memory and compute through the autoscaler's backend: hami, kai,
// kai-nvfractions, mps or annotations (package backend, one file per backend behind
// backend.Codec). What was
// written is recorded in the pod annotation gpufracv1.AnnotationApplied. A pod that
// cannot be patched safely is admitted unchanged with an admission warning and an event
// on the autoscaler; the webhook never denies a pod.
//
// The validating webhook (Validator) checks GPUFractionAutoscaler CREATE and UPDATE:
// target kind, update mode, backend, cron schedules, time zones, durations, bounds, the
// latency guardrail's PromQL, and one autoscaler per workload.
//
// Safety: the webhook configurations (Registration) use failurePolicy Ignore, a timeout
// of at most 3s, a namespace selector that excludes kube-system and gpufrac's namespace,
// and CEL match conditions so only GPU pods are sent. The server keeps a status Lease
// (statuslease.Renewer) fresh while it is ready; the updater evicts only while
// statuslease.Fresh says so. Certificates are self-managed (CertManager: a CA and
// serving certificate in a Secret, renewed before expiry, caBundle patched) or provided
// externally (cert-manager).
//
// Metrics: gpufrac_admission_request_duration_seconds, _requests_total,
// _patches_total{backend}, _skipped_total{reason}, _errors_total{component},
// _certificate_expiry_timestamp_seconds, _status_lease_renewals_total.
package admission

// Package updater is gpufrac's updater: every cycle it compares each running pod's
// applied GPU fraction (the admission webhook's gpufrac.io/applied record, else the
// backend's fields, else a whole GPU) with its GPUFractionAutoscaler's recommendation,
// and replaces the pods that are outside the recommendation's bounds, or too far from
// its target once old enough (Evaluate, the decision table).
//
// What it does depends on spec.updatePolicy.updateMode: Off reports what it would do
// (status.updater and a WouldUpdate event) and touches nothing; Initial never evicts;
// Recreate evicts through the policy/v1 Eviction API; InPlaceOrRecreate changes the
// annotations backend's gpufrac.io/* annotations of the running pod (MutatorInPlacer,
// the webhook's own logic) and recreates pods of the GPU backends, whose fractions
// cannot change in a running container.
//
// Shrinking happens only inside resize windows (Windows: cron schedules in IANA time
// zones); protective growth (an out-of-memory exit, memory near its limit, a breached
// latency guardrail, a rollback) may apply outside them when urgentGrowth allows.
//
// Disruption safety: the Eviction API (PodDisruptionBudgets hold; a refusal is reported
// as reason pdb), minReplicas running pods (default 2; 1 is an explicit opt-in), at
// most a share of a workload's pods in flight (Budget), a cluster-wide token-bucket rate
// limit, a warm-up period after start, no evictions while the admission webhook's
// status Lease is stale (statuslease.Fresh), pending pods skipped, and a pause when a
// replacement comes back without its fraction.
//
// Guardrails: for a verification period after a shrink the recommendation's
// LatencyGuardrailActive condition (reason ObjectiveBreached) and the restarts of pods
// with the smaller fraction are watched. A breach sets status.updater.floor (the
// previous allocation, until a time) that the recommender honours, and pods below the
// floor are replaced as soon as the recommendation reaches it.
//
// A HorizontalPodAutoscaler or KEDA ScaledObject that scales the same workload on GPU
// utilisation holds compute shrinking (condition ComputeShrinkHeld).
//
// Where the placement is known (HAMi devices, KAI GPU groups) a fraction is never raised
// past what a device holds, and replacements from one device are limited in flight
// (condition PlacementHeld). What the webhook wrote is read back from every pod; a value
// rewritten after admission is reported (condition FractionMismatch), never a reason to
// replace the pod.
//
// The updater writes only status.updater of each autoscaler, with JSON merge patches.
// Metrics: gpufrac_updater_evictions_total{result}, _in_place_updates_total{result},
// _skips_total{reason}, _rollbacks_total{trigger}, _cycle_duration_seconds,
// _pods_out_of_date, _admission_available. See docs/updater.md.
package updater

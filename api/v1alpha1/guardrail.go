package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of the LatencyGuardrailActive condition of a GPUFractionRecommendation (and its
// autoscaler). The recommender writes them; the updater reads the state back with
// GuardrailOf.
const (
	// ReasonLatencyBreached: True; latency is above the objective (GuardrailBreached).
	ReasonLatencyBreached = "ObjectiveBreached"
	// ReasonLatencyNear: True; latency is within the near band under the objective
	// (GuardrailHold).
	ReasonLatencyNear = "ObjectiveNear"
	// ReasonLatencyOK: False; latency is under the objective (GuardrailNone).
	ReasonLatencyOK = "ObjectiveMet"
	// ReasonLatencyUnknown: Unknown; the latency query failed or returned only NaN or
	// negative values, so shrinking stops (GuardrailHold): a broken metric never
	// shrinks an allocation.
	ReasonLatencyUnknown = "QueryFailed"
	// ReasonLatencyNoData: Unknown; the latency query returned no data (no requests, or
	// a sparse metric): no pressure (GuardrailNone).
	ReasonLatencyNoData = "NoData"
	// ReasonNoGuardrail: False; the autoscaler sets no latency guardrail.
	ReasonNoGuardrail = "NoGuardrail"
)

// Guardrail is the state of a workload's latency guardrail: the recommender decides it
// from the latency query and reports it in the LatencyGuardrailActive condition, the
// updater reads it back from there (GuardrailOf).
type Guardrail int

const (
	// GuardrailNone: no guardrail, latency under the objective, or no latency data.
	GuardrailNone Guardrail = iota
	// GuardrailHold: latency near the objective, or the latency query failed: nothing
	// shrinks.
	GuardrailHold
	// GuardrailBreached: latency above the objective: nothing shrinks, compute grows,
	// growth is urgent, and a shrink under verification is rolled back.
	GuardrailBreached
)

// GuardrailOf reads the LatencyGuardrailActive condition of a recommendation (nil:
// GuardrailNone) and returns the state with the condition's message: None when the
// condition is absent or False, or Unknown with ReasonLatencyNoData; Breached when True
// with ReasonLatencyBreached; Hold otherwise (True near the objective, or Unknown because
// the query failed).
func GuardrailOf(gfr *GPUFractionRecommendation) (Guardrail, string) {
	if gfr == nil {
		return GuardrailNone, ""
	}
	c := meta.FindStatusCondition(gfr.Status.Conditions, ConditionLatencyGuardrailActive)
	switch {
	case c == nil || c.Status == metav1.ConditionFalse:
		return GuardrailNone, ""
	case c.Status == metav1.ConditionUnknown && c.Reason == ReasonLatencyNoData:
		return GuardrailNone, ""
	case c.Status == metav1.ConditionTrue && c.Reason == ReasonLatencyBreached:
		return GuardrailBreached, c.Message
	default:
		return GuardrailHold, c.Message
	}
}

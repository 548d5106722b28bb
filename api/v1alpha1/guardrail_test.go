package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGuardrailOf(t *testing.T) {
	gfr := func(status metav1.ConditionStatus, reason string) *GPUFractionRecommendation {
		r := &GPUFractionRecommendation{}
		r.Status.Conditions = []metav1.Condition{{Type: ConditionLatencyGuardrailActive, Status: status, Reason: reason, Message: "p95 2.4s > 2s"}}
		return r
	}
	for _, tc := range []struct {
		r       *GPUFractionRecommendation
		want    Guardrail
		message string
	}{
		{nil, GuardrailNone, ""},
		{&GPUFractionRecommendation{}, GuardrailNone, ""},
		{gfr(metav1.ConditionFalse, ReasonLatencyOK), GuardrailNone, ""},
		{gfr(metav1.ConditionTrue, ReasonLatencyNear), GuardrailHold, "p95 2.4s > 2s"},
		{gfr(metav1.ConditionUnknown, ReasonLatencyUnknown), GuardrailHold, "p95 2.4s > 2s"},
		{gfr(metav1.ConditionUnknown, ReasonLatencyNoData), GuardrailNone, ""},
		{gfr(metav1.ConditionTrue, ReasonLatencyBreached), GuardrailBreached, "p95 2.4s > 2s"},
	} {
		if got, msg := GuardrailOf(tc.r); got != tc.want || msg != tc.message {
			t.Errorf("%v: got %v %q, want %v %q", tc.r, got, msg, tc.want, tc.message)
		}
	}
}

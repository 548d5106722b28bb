// Package contract is the contract between a GPUFractionAutoscaler, its
// GPUFractionRecommendation and the autoscaler's pods, in one place so that every
// component reads a recommendation the same way:
//
//   - which autoscaler of a workload is in charge (Precedes, InCharge; the others are
//     ignored: DuplicateMessage, WinnerMessage);
//   - whether its recommendation applies to pods, and why not (Applies: owner
//     staleness, RecommendationProvided, the minimum confidence);
//   - what each container should get (TargetsOf: one Target per container, memory in
//     bytes and compute in thousandths of one GPU, after the autoscaler's container
//     policies and HeldCompute; Floor, the rollback floor in force).
//
// The admission webhook writes it into new pods (through package backend), the updater
// compares running pods with it, and gpufrac report, the sharing planner and the
// simulator count with it (PodMemory: the pod's memory as written).
package contract

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// DefaultMinConfidence is the default lowest recommendation confidence applied to pods,
// percent (the webhook's --min-confidence).
const DefaultMinConfidence int32 = 50

// MinConfidence returns *p, or DefaultMinConfidence when p is nil.
func MinConfidence(p *int32) int32 {
	if p == nil {
		return DefaultMinConfidence
	}
	return *p
}

// ValidateMinConfidence returns an error when p is set outside 0–100.
func ValidateMinConfidence(p *int32) error {
	if p != nil && (*p < 0 || *p > 100) {
		return fmt.Errorf("--min-confidence %d: want 0–100", *p)
	}
	return nil
}

// Reason says why a recommendation does not apply to pods. Its values are also the
// "reason" label of gpufrac_admission_skipped_total.
type Reason string

const (
	// ReasonStale: the recommendation belongs to an earlier autoscaler of the same name
	// (a GPUFractionAutoscaler owner of another UID), has no ownerReference to the
	// autoscaler (orphaned: Adopted), or was made for another workload
	// than the autoscaler targets now (Retargeted: spec.targetRef was changed and the
	// recommender has not written since); the recommender replaces it.
	ReasonStale Reason = "stale-recommendation"
	// ReasonNotProvided: the recommendation has no container recommendations, or its
	// RecommendationProvided condition is False or Unknown.
	ReasonNotProvided Reason = "no-recommendation"
	// ReasonLowConfidence: status.confidencePercent is below the minimum confidence (or
	// absent while the minimum is above 0).
	ReasonLowConfidence Reason = "low-confidence"
	// ReasonDeleting: the autoscaler is being deleted (deletionTimestamp set, held by a
	// finalizer such as foreground deletion's): nothing of it applies any more.
	ReasonDeleting Reason = "autoscaler-deleting"
)

// Applies reports whether gfr, the recommendation of the same name as gfa, applies to
// gfa's pods at minConfidence percent: gfa is not being deleted, gfr belongs to gfa and
// its target, it is provided, and it is confident enough (ConfidentEnough). When it does
// not, it returns the reason and a message for people; otherwise "" and "".
func Applies(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, minConfidence int32) (Reason, string) {
	if gfa.DeletionTimestamp != nil {
		return ReasonDeleting, "the autoscaler is being deleted"
	}
	for _, or := range gfr.OwnerReferences {
		if or.Kind == "GPUFractionAutoscaler" && or.UID != gfa.UID {
			return ReasonStale, "the recommendation belongs to an earlier autoscaler of the same name"
		}
	}
	if !Adopted(gfa, gfr) {
		return ReasonStale, "the recommendation has no ownerReference to the autoscaler (orphaned: an earlier autoscaler of the same name deleted with --cascade=orphan, or the reference removed); the recommender adopts it on its next write"
	}
	if Retargeted(gfa, gfr) {
		o, n := gfr.Spec.TargetRef, gfa.Spec.TargetRef
		return ReasonStale, fmt.Sprintf("the recommendation was made for %s %s, not %s %s (spec.targetRef changed; the recommender has not written since)", o.Kind, o.Name, n.Kind, n.Name)
	}
	if c := meta.FindStatusCondition(gfr.Status.Conditions, gpufracv1.ConditionRecommendationProvided); len(gfr.Status.ContainerRecommendations) == 0 || (c != nil && c.Status != metav1.ConditionTrue) {
		return ReasonNotProvided, "RecommendationProvided is not True"
	}
	if conf := gfr.Status.ConfidencePercent; !ConfidentEnough(conf, minConfidence) {
		c := int32(0)
		if conf != nil {
			c = *conf
		}
		return ReasonLowConfidence, fmt.Sprintf("confidence %d%% is below the webhook's minimum %d%%", c, minConfidence)
	}
	return "", ""
}

// Adopted reports whether gfr has an ownerReference to gfa (a GPUFractionAutoscaler of
// its UID), as the recommender creates every recommendation with (its controller
// reference). One without (orphaned by `kubectl delete gfa --cascade=orphan`, or the
// reference removed) may be an earlier autoscaler's of the same name, and garbage
// collection would not delete it with gfa: Applies takes it as stale until the
// recommender adopts it (sets the controller reference to gfa) on its next write.
func Adopted(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) bool {
	for _, or := range gfr.OwnerReferences {
		if or.Kind == "GPUFractionAutoscaler" && or.UID == gfa.UID {
			return true
		}
	}
	return false
}

// Retargeted reports whether gfr was made for another workload than gfa targets now: its
// spec.targetRef, which the recommender keeps equal to the autoscaler's, names another
// kind or name. Its values are then another workload's. A recommendation without a
// spec.targetRef is not taken as retargeted.
func Retargeted(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) bool {
	o, n := gfr.Spec.TargetRef, gfa.Spec.TargetRef
	return o.Name != "" && (o.Kind != n.Kind || o.Name != n.Name)
}

// IncompleteData returns the message of gfr's MetricsUnavailable condition while it is
// True for a gap in the recommender's data (a failed or partial read of Prometheus, an
// exporter down, no sample while pods run, every sample filtered, a history that
// Prometheus no longer holds in full, memory read as 0 while the pod was busy: the
// reasons of
// api/v1alpha1/reasons.go), and "" otherwise (also for a nil gfr, and for the reasons
// whose recommendation is written from the valid samples, such as StaleSeries). The
// recommendation is then the last one written, kept while what the pods use now is
// unknown: the updater shrinks no pod on it; growth still applies.
func IncompleteData(gfr *gpufracv1.GPUFractionRecommendation) string {
	if gfr == nil {
		return ""
	}
	c := meta.FindStatusCondition(gfr.Status.Conditions, gpufracv1.ConditionMetricsUnavailable)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	switch c.Reason {
	case gpufracv1.ReasonPrometheusError, gpufracv1.ReasonPartialResponse, gpufracv1.ReasonNoSamplesWhileRunning,
		gpufracv1.ReasonAllSamplesFiltered, gpufracv1.ReasonExporterDown, gpufracv1.ReasonHistoryIncomplete,
		gpufracv1.ReasonZeroMemoryWhileBusy:
		return c.Reason + ": " + c.Message
	}
	return ""
}

// ConfidentEnough reports whether a recommendation's status.confidencePercent (nil:
// none) reaches minConfidence percent; without a confidence only a minimum of 0 or less
// is reached.
func ConfidentEnough(confidencePercent *int32, minConfidence int32) bool {
	if confidencePercent == nil {
		return minConfidence <= 0
	}
	return *confidencePercent >= minConfidence
}

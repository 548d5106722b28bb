package framework

import (
	"context"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// WriteRecommendation creates gfa's GPUFractionRecommendation (owned by gfa) and writes
// its status as the recommender would: container gets target memory 3Gi and compute
// 250m (milli-GPU), upper bound 4Gi, sharing mode MPS, confidence 90 % from 48 h of
// history, and RecommendationProvided True; by names the writer in the messages. It
// returns the object or the API server's error.
func (c *Cluster) WriteRecommendation(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler, container, by string) (*gpufracv1.GPUFractionRecommendation, error) {
	r := &gpufracv1.GPUFractionRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: gfa.Namespace, Name: gfa.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: gfa.Name, UID: gfa.UID, Controller: ptr.To(true),
		}}},
		Spec: gpufracv1.GPUFractionRecommendationSpec{TargetRef: gfa.Spec.TargetRef},
	}
	if err := c.Client.Create(ctx, r); err != nil {
		return nil, err
	}
	mem, compute, upper := resource.MustParse("3Gi"), resource.MustParse("250m"), resource.MustParse("4Gi")
	r.Status = gpufracv1.GPUFractionRecommendationStatus{
		ContainerRecommendations: []gpufracv1.ContainerRecommendation{{
			ContainerName: container,
			Target:        gpufracv1.GPUResources{Memory: &mem, Compute: &compute},
			UpperBound:    gpufracv1.GPUResources{Memory: &upper},
			SharingMode:   gpufracv1.SharingModeMPS, SharingModeReason: "written by " + by,
			ConfidencePercent: 90, HistoryHours: 48,
		}},
		ConfidencePercent: ptr.To[int32](90),
		Conditions: []metav1.Condition{{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue,
			Reason: "Written", Message: "written by " + by, LastTransitionTime: metav1.Now()}},
	}
	return r, c.Client.Status().Update(ctx, r)
}

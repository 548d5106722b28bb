// Package v1alpha1 holds the gpufrac API: GPUFractionAutoscaler (what the platform team
// asks for, per workload) and GPUFractionRecommendation (what the recommender measured and
// recommends), group autoscaling.gpufrac.io, version v1alpha1.
//
// Units used throughout: GPU memory is a resource quantity in bytes ("40Gi"); GPU compute
// is a share of one whole GPU as a quantity, so "350m" is 0.35 of one GPU and "1" is the
// whole GPU; ratios are 0–1; percentages are integers 0–100.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.gpufrac.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of gpufrac's objects.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.gpufrac.io", Version: "v1alpha1"}

	// SchemeBuilder registers the gpufrac types with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's layout: the types files' init() Register calls use it; moving to apimachinery's runtime.SchemeBuilder touches every types file (issue 15 item 1 reshapes api/).
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the gpufrac types to a scheme; it returns an error only when a
	// type is registered twice under different names.
	AddToScheme = SchemeBuilder.AddToScheme
)

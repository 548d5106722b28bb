package recommender

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// startOrder returns each container's position in the order the kubelet starts the
// containers of pod (workload.Containers), for adding up the pod's totals; nil for a nil
// pod.
func startOrder(pod *corev1.Pod) map[string]int {
	if pod == nil {
		return nil
	}
	start := map[string]int{}
	for i, c := range workload.Containers(pod) {
		start[c.Container.Name] = i
	}
	return start
}

// confidenceSet returns the recommendations that speak for the pod's confidence and
// sharing mode: its regular containers and native sidecars
// (ContainerRecommendation.CountsInConfidence), or every one when it has no other.
func confidenceSet(recs []gpufracv1.ContainerRecommendation) []gpufracv1.ContainerRecommendation {
	var out []gpufracv1.ContainerRecommendation
	for _, c := range recs {
		if c.CountsInConfidence() {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return recs
	}
	return out
}

// summarise fills the pod-level totals from the container recommendations: memory and
// compute targets added up as the scheduler adds up requests (gpufracv1.PodTotal, in
// start order), and the confidence and sharing mode of the confidence set
// (confidenceSet).
func summarise(st *gpufracv1.GPUFractionRecommendationStatus, start map[string]int) {
	st.Memory, st.Compute = nil, nil
	if v, ok := gpufracv1.PodTotal(st.ContainerRecommendations, start, memoryTarget); ok {
		st.Memory = resource.NewQuantity(v, resource.BinarySI)
	}
	if v, ok := gpufracv1.PodTotal(st.ContainerRecommendations, start, computeTarget); ok {
		st.Compute = resource.NewMilliQuantity(v, resource.DecimalSI)
	}
	conf := int32(100)
	mode := gpufracv1.SharingModeTimeSlicing
	rank := map[gpufracv1.SharingMode]int{gpufracv1.SharingModeTimeSlicing: 0, gpufracv1.SharingModeMPS: 1, gpufracv1.SharingModeExclusive: 2}
	for _, c := range confidenceSet(st.ContainerRecommendations) {
		conf = min(conf, c.ConfidencePercent)
		if rank[c.SharingMode] > rank[mode] {
			mode = c.SharingMode
		}
	}
	st.SharingMode = mode
	st.ConfidencePercent = ptr.To(conf)
}

// memoryTarget is a recommendation's memory target, bytes.
func memoryTarget(c *gpufracv1.ContainerRecommendation) (int64, bool) {
	if c.Target.Memory == nil {
		return 0, false
	}
	return c.Target.Memory.Value(), true
}

// computeTarget is a recommendation's compute target, thousandths of one GPU.
func computeTarget(c *gpufracv1.ContainerRecommendation) (int64, bool) {
	if c.Target.Compute == nil {
		return 0, false
	}
	return c.Target.Compute.MilliValue(), true
}

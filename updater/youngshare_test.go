package updater

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// TestYoungShareReplacesOnlyAcrossShares: a young pod written at its share of an 80Gi GPU
// (contract.Target.YoungShare: the recommender's memoryLimit at the upper bound) is in
// date while the need moves inside that share — narrower by the hour, or higher at a new
// level with the peak still far from the share — and is replaced when the need moves to
// another share (shrink out of the upper bound; growth, protective when the peak nears
// the share). The same pod written at the need of its hour (no memoryLimit: a backend that
// places pods by the target) is grown for the new level's peak.
func TestYoungShareReplacesOnlyAcrossShares(t *testing.T) {
	rules := Rules{Threshold: 0.1, MinPodAge: 12 * time.Hour, NearLimit: 0.9, UrgentGrowth: true}
	facts := PodFacts{Age: 3 * time.Hour}
	// need and peak in GiB; the upper bound is the share the need falls in.
	targets := func(need, peak, share int64, limit bool) map[string]contract.Target {
		c := gpufracv1.ContainerRecommendation{ContainerName: "main", YoungMarginPercent: 50,
			Target:             gpufracv1.GPUResources{Memory: resource.NewQuantity(need*gi, resource.BinarySI)},
			LowerBound:         gpufracv1.GPUResources{Memory: resource.NewQuantity(peak*gi, resource.BinarySI)},
			UpperBound:         gpufracv1.GPUResources{Memory: resource.NewQuantity(share*gi, resource.BinarySI)},
			ObservedPeakMemory: resource.NewQuantity(peak*gi, resource.BinarySI)}
		if limit {
			c.MemoryLimit = resource.NewQuantity(share*gi, resource.BinarySI)
		}
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{c}
		return contract.TargetsOf(nil, gfr)
	}
	for _, tc := range []struct {
		name             string
		podGi            int64 // what the pod's record holds
		need, peak, shr  int64
		limit            bool
		grow, shrink     bool
		protectiveGrowth bool
	}{
		{name: "at its share, need of the hour", podGi: 40, need: 30, peak: 20, shr: 40, limit: true},
		{name: "at its share, need narrower", podGi: 40, need: 24, peak: 20, shr: 40, limit: true},
		{name: "at its share, a new level inside it", podGi: 40, need: 35, peak: 28, shr: 40, limit: true},
		{name: "at its share, need in a smaller share", podGi: 40, need: 18, peak: 12, shr: 20, limit: true, shrink: true},
		{name: "at its share, peak near it, need in the next share", podGi: 40, need: 41, peak: 37, shr: 80, limit: true, grow: true, protectiveGrowth: true},
		{name: "at the need of its hour, a new level", podGi: 30, need: 35, peak: 28, shr: 40, grow: true, protectiveGrowth: true},
	} {
		n := Evaluate(podAlloc(tc.podGi*gi, -1), targets(tc.need, tc.peak, tc.shr, tc.limit), facts, rules)
		if n.Grow != tc.grow || n.Shrink != tc.shrink || n.Protective != tc.protectiveGrowth {
			t.Errorf("%s: grow %v shrink %v protective %v (%s); want %v %v %v", tc.name, n.Grow, n.Shrink, n.Protective, n.Reason(), tc.grow, tc.shrink, tc.protectiveGrowth)
		}
	}
}

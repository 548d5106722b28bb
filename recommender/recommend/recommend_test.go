package recommend

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// A new recommendation replaces the written one only past the noise: memory 2 %
// relative, compute 0.01 absolute, bounds 10 % relative, and any change of sharing mode.
func TestWithinNoise(t *testing.T) {
	c := Config{}.WithDefaults()
	base := func() *gpufracv1.ContainerRecommendation {
		return &gpufracv1.ContainerRecommendation{SharingMode: gpufracv1.SharingModeMPS,
			Target:     gpufracv1.GPUResources{Memory: q("10000Mi"), Compute: q("300m")},
			LowerBound: gpufracv1.GPUResources{Memory: q("8000Mi")}, UpperBound: gpufracv1.GPUResources{Memory: q("20000Mi")}}
	}
	for _, tc := range []struct {
		name string
		mod  func(r *gpufracv1.ContainerRecommendation)
		want bool
	}{
		{"same", func(*gpufracv1.ContainerRecommendation) {}, true},
		{"memory +1.5%", func(r *gpufracv1.ContainerRecommendation) { r.Target.Memory = q("10150Mi") }, true},
		{"memory +3%", func(r *gpufracv1.ContainerRecommendation) { r.Target.Memory = q("10300Mi") }, false},
		{"compute +5m", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("305m") }, true},
		{"compute +20m", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("320m") }, false},
		{"upper bound -8%", func(r *gpufracv1.ContainerRecommendation) { r.UpperBound.Memory = q("18400Mi") }, true},
		{"upper bound -15%", func(r *gpufracv1.ContainerRecommendation) { r.UpperBound.Memory = q("17000Mi") }, false},
		{"compute gone", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = nil }, false},
		{"sharing mode", func(r *gpufracv1.ContainerRecommendation) { r.SharingMode = gpufracv1.SharingModeTimeSlicing }, false},
	} {
		cur := base()
		tc.mod(cur)
		if got := withinNoise(base(), cur, c); got != tc.want {
			t.Errorf("%s: withinNoise %v, want %v", tc.name, got, tc.want)
		}
	}
}

package scheme

import (
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func TestNewKnowsBothAPIs(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Pod", "GPUFractionAutoscaler", "GPUFractionRecommendation", "GPUSharingPolicy"} {
		gv := gpufracv1.GroupVersion
		if kind == "Pod" {
			gv.Group, gv.Version = "", "v1"
		}
		if !s.Recognizes(gv.WithKind(kind)) {
			t.Errorf("scheme does not know %s", gv.WithKind(kind))
		}
	}
}

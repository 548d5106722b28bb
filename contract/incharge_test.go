package contract

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func TestPrecedesIgnoresDeletedAutoscalers(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	old := autoscaler("old")
	old.CreationTimestamp = metav1.NewTime(t0)
	young := autoscaler("young")
	young.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	if w, l := InCharge([]*gpufracv1.GPUFractionAutoscaler{young, old}); w != old || len(l) != 1 || l[0] != young {
		t.Fatalf("winner %s, want old", w.Name)
	}
	old.DeletionTimestamp = &metav1.Time{Time: t0.Add(2 * time.Hour)}
	if w, _ := InCharge([]*gpufracv1.GPUFractionAutoscaler{old, young}); w != young {
		t.Fatalf("winner %s, want young (old is being deleted)", w.Name)
	}
}

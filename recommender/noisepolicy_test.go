package recommender

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestNoiseKeepsNoTargetOutsideThePolicy: the noise rule keeps a written target that a
// new one is within noise of; a policy minimum raised (or maximum lowered) by less than
// the noise since it was written still moves it into the policy.
func TestNoiseKeepsNoTargetOutsideThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ratio float64 // of the written memory target
		min   bool
	}{
		{"minMemory 1% above", 1.01, true},
		{"minMemory 0.5% above", 1.005, true},
		{"maxMemory 1% below", 0.99, false},
		{"maxMemory 1.5% below", 0.985, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
			h := newHarness(t, objs, promFor(objs, 20*gib, 0.3))
			ctx := context.Background()
			if err := h.rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			written := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0].Target.Memory.Value()
			bound := resource.NewQuantity(int64(float64(written)*tc.ratio)>>20<<20, resource.BinarySI)
			var a gpufracv1.GPUFractionAutoscaler
			if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &a); err != nil {
				t.Fatal(err)
			}
			cp := gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: bound}
			if tc.min {
				cp = gpufracv1.ContainerPolicy{ContainerName: "main", MinMemory: bound}
			}
			a.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{cp}}
			if err := h.c.Update(ctx, &a); err != nil {
				t.Fatal(err)
			}
			h.now = h.now.Add(time.Minute)
			if err := h.rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			got := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0].Target.Memory
			if got.Cmp(*bound) != 0 {
				t.Errorf("memory target %s (written %d), want the policy's %s", got, written, bound)
			}
		})
	}
}

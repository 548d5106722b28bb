package recommender

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// TestOrphanedRecommendationIsAdopted: `kubectl delete gfa --cascade=orphan` strips the
// recommendation's ownerReference; an autoscaler of the same name created again finds
// it. The recommender's next write, whether Prometheus is read or not, sets the new
// autoscaler as its controller owner (garbage collection deletes it with the new one),
// keeps other objects' references and drops the earlier autoscaler's; the webhook and
// the updater take it as stale until then (contract.Applies).
func TestOrphanedRecommendationIsAdopted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failed bool // Prometheus cannot be read after the recreation
		refs   []metav1.OwnerReference
	}{
		{name: "orphaned"},
		{name: "orphaned, Prometheus down", failed: true},
		{name: "another object's reference kept", refs: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "keep", UID: "cm-uid"}}},
		{name: "the earlier autoscaler's non-controller reference dropped", refs: []metav1.OwnerReference{{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: "sd", UID: "gfa-ml-sd"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
			prom := promFor(objs, 20*gib, 0.3)
			h := newHarness(t, objs, prom)
			ctx := context.Background()
			if err := h.rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			// Orphaned: the references stripped, the autoscaler recreated with a new UID.
			gfr := h.gfr(t, "ml", "sd")
			gfr.OwnerReferences = tc.refs
			if err := h.c.Update(ctx, gfr); err != nil {
				t.Fatal(err)
			}
			var old gpufracv1.GPUFractionAutoscaler
			if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &old); err != nil {
				t.Fatal(err)
			}
			if err := h.c.Delete(ctx, &old); err != nil {
				t.Fatal(err)
			}
			again := gfa("ml", "sd", "sd")
			again.UID = "gfa-ml-sd-again"
			create(t, h.c, again)
			if reason, _ := contract.Applies(again, h.gfr(t, "ml", "sd"), 0); reason != contract.ReasonStale {
				t.Fatalf("orphaned recommendation: Applies %q, want %q", reason, contract.ReasonStale)
			}

			prom.fail.Store(tc.failed)
			h.now = h.now.Add(time.Minute)
			_ = h.rec.RunOnce(ctx)
			gfr = h.gfr(t, "ml", "sd")
			ctrl := metav1.GetControllerOf(gfr)
			if ctrl == nil || ctrl.Kind != "GPUFractionAutoscaler" || ctrl.UID != again.UID || ctrl.Name != "sd" {
				t.Fatalf("controller %+v, want the recreated autoscaler (%s)", ctrl, again.UID)
			}
			for _, want := range tc.refs {
				kept := false
				for _, o := range gfr.OwnerReferences {
					kept = kept || o.UID == want.UID
				}
				if kept != (want.Kind != "GPUFractionAutoscaler") {
					t.Errorf("reference %s %s kept %v; references %+v", want.Kind, want.UID, kept, gfr.OwnerReferences)
				}
			}
			if reason, msg := contract.Applies(again, gfr, 0); reason != "" {
				t.Errorf("adopted recommendation: Applies %q: %s", reason, msg)
			}
		})
	}
}

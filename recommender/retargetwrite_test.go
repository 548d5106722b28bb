package recommender

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// A recommendation's spec (spec.targetRef, its controller reference) and its status are
// two writes. When the status write of the cycle that follows spec.targetRef to a new
// workload fails (a timeout, a throttled or refused patch, the recommender killed
// between the two), the stored recommendation must never name the new target while it
// holds the former one's container recommendations: the webhook and the updater take
// spec.targetRef as the workload the values are for (contract.Retargeted), and would
// write a's 10 GiB into b's pods; the next cycles would keep a's values as b's too. The
// same holds when an orphaned recommendation of an earlier autoscaler of the same name
// (made for a) is adopted by one that targets b.
func TestRetargetWithFailedStatusWrite(t *testing.T) {
	gr := schema.GroupResource{Group: gpufracv1.GroupVersion.Group, Resource: "gpufractionrecommendations"}
	for _, adopted := range []bool{false, true} {
		for _, bSamples := range []bool{false, true} {
			for _, fails := range []int{1, 2} {
				name := fmt.Sprintf("adopted=%v/b-samples=%v/fails=%d", adopted, bSamples, fails)
				t.Run(name, func(t *testing.T) {
					objs := append(deployment("ml", "a", 1), deployment("ml", "b", 1)...)
					objs = append(objs, gfa("ml", "sd", "a"))
					prom := promFor(objs, 10*gib, 0.2)
					bPod := podsOf(objs)[1].Name
					if bSamples {
						prom.mem[bPod] = 2 * gib
					} else {
						delete(prom.mem, bPod)
						delete(prom.cpu, bPod)
					}
					h := newHarness(t, objs, prom)
					ctx := context.Background()
					if err := h.rec.RunOnce(ctx); err != nil {
						t.Fatal(err)
					}
					aRecs := h.gfr(t, "ml", "sd").Status.ContainerRecommendations
					if len(aRecs) == 0 {
						t.Fatal("no recommendation for a")
					}
					var g gpufracv1.GPUFractionAutoscaler
					if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &g); err != nil {
						t.Fatal(err)
					}
					if adopted {
						gfr := h.gfr(t, "ml", "sd")
						gfr.OwnerReferences = nil
						if err := h.c.Update(ctx, gfr); err != nil {
							t.Fatal(err)
						}
						if err := h.c.Delete(ctx, &g); err != nil {
							t.Fatal(err)
						}
						again := gfa("ml", "sd", "b")
						again.UID = "gfa-ml-sd-again"
						create(t, h.c, again)
					} else {
						g.Spec.TargetRef.Name = "b"
						if err := h.c.Update(ctx, &g); err != nil {
							t.Fatal(err)
						}
					}
					failed := 0
					h.rec.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{List: slimPods.List,
						SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
							if _, ok := obj.(*gpufracv1.GPUFractionRecommendation); ok && failed < fails {
								failed++
								return apierrors.NewServerTimeout(gr, "patch", 1)
							}
							return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
						}})
					for i := range fails + 3 {
						h.now = h.now.Add(time.Minute)
						err := h.rec.RunOnce(ctx)
						if i >= fails && err != nil {
							t.Fatalf("cycle %d, writes succeeding: %v", i, err)
						}
						var now gpufracv1.GPUFractionAutoscaler
						if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &now); err != nil {
							t.Fatal(err)
						}
						gfr := h.gfr(t, "ml", "sd")
						if contract.Retargeted(&now, gfr) {
							continue // the webhook and the updater take it as stale
						}
						for _, c := range gfr.Status.ContainerRecommendations {
							if m := c.Target.Memory; m != nil && m.AsApproximateFloat64() >= 5*gib {
								t.Fatalf("cycle %d (%d status writes failed): the stored recommendation names %s %s with a's memory target %s",
									i, min(i+1, fails), gfr.Spec.TargetRef.Kind, gfr.Spec.TargetRef.Name, m)
							}
						}
					}
				})
			}
		}
	}
}

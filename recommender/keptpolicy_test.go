package recommender

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestKeptRecommendationFollowsThePolicy: while no new recommendation is made (a failed
// read of Prometheus, no sample while the pods run), the written one is kept
// but moved into the container policy as it is now: a raised minimum raises it, a
// lowered maximum (the user's explicit choice) lowers it and CappedBelowNeed says so
// where the need is above it; a minimum below it or a maximum above it changes nothing,
// and nothing else shrinks it.
func TestKeptRecommendationFollowsThePolicy(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	// Written: 20 GiB per pod × 1.15 headroom ≈ 23.6 GiB, compute 357m.
	for _, tc := range []struct {
		name   string
		policy gpufracv1.ContainerPolicy
		// wantMem and wantCPU: the kept target; "" is the written one.
		wantMem, wantCPU string
		capped           bool
	}{
		{name: "minMemory raised", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MinMemory: q("30Gi")}, wantMem: "30Gi"},
		{name: "minMemory raised by the * policy", policy: gpufracv1.ContainerPolicy{ContainerName: "*", MinMemory: q("40Gi")}, wantMem: "40Gi"},
		{name: "minMemory below the written one", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MinMemory: q("10Gi")}},
		{name: "maxMemory lowered", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("16Gi")}, wantMem: "16Gi", capped: true},
		{name: "maxMemory above the written one", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("60Gi")}},
		{name: "minCompute raised", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MinCompute: q("500m")}, wantCPU: "500m"},
		{name: "maxCompute lowered", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MaxCompute: q("200m")}, wantCPU: "200m", capped: true},
		{name: "both raised", policy: gpufracv1.ContainerPolicy{ContainerName: "main", MinMemory: q("25Gi"), MinCompute: q("400m")}, wantMem: "25Gi", wantCPU: "400m"},
	} {
		for _, path := range []string{"failed read", "no samples while running"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
				prom := promFor(objs, 20*gib, 0.3)
				h := newHarness(t, objs, prom)
				rec := events.NewFakeRecorder(50)
				h.rec.Events = rec
				ctx := context.Background()
				if err := h.rec.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
				written := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0]

				// The outage first, then the policy change, then a cycle of the outage.
				cycles := 1
				if path == "failed read" {
					prom.fail.Store(true)
				} else {
					prom.mu.Lock()
					prom.pods = nil // the exporter stops; the pods keep running
					prom.mu.Unlock()
					cycles = EmptyCyclesWhileRunning
				}
				for i := 0; i < cycles; i++ {
					h.now = h.now.Add(time.Minute)
					_ = h.rec.RunOnce(ctx)
				}
				if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); path != "failed read" && !isTrue(c) {
					t.Fatalf("no gap: %+v", c)
				}
				var a gpufracv1.GPUFractionAutoscaler
				if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &a); err != nil {
					t.Fatal(err)
				}
				a.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{tc.policy}}
				a.Generation++
				if err := h.c.Update(ctx, &a); err != nil {
					t.Fatal(err)
				}
				h.now = h.now.Add(time.Minute)
				_ = h.rec.RunOnce(ctx)
				gfr := h.gfr(t, "ml", "sd")
				if c := condition(gfr.Status, gpufracv1.ConditionMetricsUnavailable); path != "failed read" && !isTrue(c) {
					t.Fatalf("no gap: %+v", c)
				}
				got := gfr.Status.ContainerRecommendations[0]
				for _, r := range []struct {
					what      string
					got, orig *resource.Quantity
					want      string
					lo, hi    *resource.Quantity
					bounds    [2]*resource.Quantity
				}{
					{"memory", got.Target.Memory, written.Target.Memory, tc.wantMem, tc.policy.MinMemory, tc.policy.MaxMemory, [2]*resource.Quantity{got.LowerBound.Memory, got.UpperBound.Memory}},
					{"compute", got.Target.Compute, written.Target.Compute, tc.wantCPU, tc.policy.MinCompute, tc.policy.MaxCompute, [2]*resource.Quantity{got.LowerBound.Compute, got.UpperBound.Compute}},
				} {
					want := r.orig
					if r.want != "" {
						want = q(r.want)
					}
					if r.got.Cmp(*want) != 0 {
						t.Errorf("%s target %s, want %s (written %s)", r.what, r.got, want, r.orig)
					}
					if r.hi == nil && r.got.Cmp(*r.orig) < 0 {
						t.Errorf("%s shrank from %s to %s without a maximum below it", r.what, r.orig, r.got)
					}
					for _, b := range r.bounds {
						if b != nil && ((r.lo != nil && b.Cmp(*r.lo) < 0) || (r.hi != nil && b.Cmp(*r.hi) > 0)) {
							t.Errorf("%s bound %s outside the policy [%v, %v]", r.what, b, r.lo, r.hi)
						}
					}
				}
				if c := condition(gfr.Status, gpufracv1.ConditionCappedBelowNeed); isTrue(c) != tc.capped {
					t.Errorf("CappedBelowNeed %+v, want true: %v", c, tc.capped)
				}
				moved := 0
				for len(rec.Events) > 0 {
					if strings.Contains(<-rec.Events, ReasonPolicyChanged) {
						moved++
					}
				}
				if want := tc.wantMem != "" || tc.wantCPU != ""; (moved == 1) != want || moved > 1 {
					t.Errorf("%d %s events, want one: %v", moved, ReasonPolicyChanged, want)
				}
				if gfr.Status.ObservedGeneration != a.Generation {
					t.Errorf("observedGeneration %d, want %d", gfr.Status.ObservedGeneration, a.Generation)
				}
				if !meta.IsStatusConditionTrue(gfr.Status.Conditions, gpufracv1.ConditionRecommendationProvided) {
					t.Errorf("RecommendationProvided not True: %+v", gfr.Status.Conditions)
				}
			})
		}
	}
}

package recommender

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// maxMemory under the need (issue 14 kind 7): the target sits at the cap, CappedBelowNeed
// is True on the recommendation and the autoscaler with the shortfall in MiB, one
// Warning event says the same (not one per cycle), and the uncapped need follows the
// data instead of staying at the value written when the target last changed.
func TestCappedBelowNeed(t *testing.T) {
	objs := deployment("ml", "sd", 1)
	g := gfa("ml", "sd", "sd")
	g.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "main", MaxMemory: ptrQuantity("4Gi")}}}
	objs = append(objs, g)
	prom := promFor(objs, 8*gib, 0.3)
	h := newHarness(t, objs, prom)
	rec := events.NewFakeRecorder(20)
	h.rec.Events = rec
	ctx := context.Background()
	cycle := func() *gpufracv1.GPUFractionRecommendation {
		t.Helper()
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		h.now = h.now.Add(time.Minute)
		return h.gfr(t, "ml", "sd")
	}
	gfr := cycle()
	cr := gfr.Status.ContainerRecommendations[0]
	if cr.Target.Memory.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Fatalf("target %v, want the 4Gi cap", cr.Target.Memory)
	}
	need := cr.UncappedTarget.Memory.Value()
	if float64(need) <= 8*gib {
		t.Fatalf("uncapped need %d, want above the 8 GiB used", need)
	}
	c := condition(gfr.Status, gpufracv1.ConditionCappedBelowNeed)
	wantBy := "capped below need by " + strconv.FormatInt((need-4<<30+(1<<20)-1)>>20, 10) + " MiB"
	if !isTrue(c) || c.Reason != gpufracv1.ReasonPolicyMaximum || !strings.Contains(c.Message, wantBy) {
		t.Fatalf("CappedBelowNeed %+v, want True/%s with %q", c, gpufracv1.ReasonPolicyMaximum, wantBy)
	}
	var a gpufracv1.GPUFractionAutoscaler
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &a); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(a.Status.Conditions, gpufracv1.ConditionCappedBelowNeed) {
		t.Errorf("autoscaler conditions lack CappedBelowNeed True: %+v", a.Status.Conditions)
	}

	// The need grows (a bigger model); the capped target stays within noise at 4Gi, the
	// uncapped need and the message follow.
	prom.mu.Lock()
	for k := range prom.mem {
		prom.mem[k] = 20 * gib
	}
	prom.mu.Unlock()
	gfr = cycle()
	cr = gfr.Status.ContainerRecommendations[0]
	if cr.Target.Memory.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("target %v left the cap", cr.Target.Memory)
	}
	if got := cr.UncappedTarget.Memory.Value(); float64(got) <= 20*gib {
		t.Errorf("uncapped need %d stayed at the old value %d; want above the 20 GiB used", got, need)
	}
	c = condition(gfr.Status, gpufracv1.ConditionCappedBelowNeed)
	if c == nil || strings.Contains(c.Message, wantBy) {
		t.Errorf("message did not follow the need: %+v", c)
	}

	var capped []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, gpufracv1.ReasonPolicyMaximum) {
			capped = append(capped, e)
		}
	}
	if len(capped) != 1 || !strings.Contains(capped[0], "Warning") || !strings.Contains(capped[0], "capped below need by") {
		t.Errorf("events %q: want one Warning saying capped below need by", capped)
	}

	// The cap is lifted: the condition turns False.
	var cur gpufracv1.GPUFractionAutoscaler
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.ResourcePolicy = nil
	if err := h.c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	gfr = cycle()
	if c := condition(gfr.Status, gpufracv1.ConditionCappedBelowNeed); !isFalse(c) || c.Reason != gpufracv1.ReasonWithinPolicy {
		t.Errorf("without a cap: %+v", c)
	}
}

package recommender

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
)

func inShard(g *gpufracv1.GPUFractionAutoscaler, name string) *gpufracv1.GPUFractionAutoscaler {
	g.Spec.Recommenders = []gpufracv1.RecommenderName{{Name: name}}
	return g
}

// hasGFR reports whether the recommender wrote a recommendation object for the autoscaler.
func hasGFR(t *testing.T, c client.Client, ns, name string) bool {
	t.Helper()
	var r gpufracv1.GPUFractionRecommendation
	return c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &r) == nil
}

// Two shards over the same cluster: each writes only the autoscalers that name it (none
// named: the default shard), exports only those, and the shards' duplicate resolution
// agrees, so a workload never gets two recommendations.
func TestShardsSplitAutoscalers(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	objs := append(deployment("ml", "sd", 1), deployment("ml", "llm", 1)...)
	older := gfa("ml", "sd", "sd")                 // default shard, the oldest on sd
	newer := inShard(gfa("ml", "sd-b", "sd"), "b") // shard b, a duplicate on sd
	llm := inShard(gfa("ml", "llm", "llm"), "b")   // shard b
	older.CreationTimestamp, newer.CreationTimestamp = metav1.NewTime(t0), metav1.NewTime(t0.Add(time.Hour))
	objs = append(objs, older, newer, llm)

	run := func(shard string) *harness {
		h := newHarness(t, objs, promFor(objs, 8*gib, 0.2))
		h.rec.Config.Shard = Shard{Name: shard}
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatalf("shard %q: %v", shard, err)
		}
		return h
	}
	def := run("")
	if !hasGFR(t, def.c, "ml", "sd") || hasGFR(t, def.c, "ml", "llm") || hasGFR(t, def.c, "ml", "sd-b") {
		t.Errorf("default shard wrote sd %v, llm %v, sd-b %v; want only sd", hasGFR(t, def.c, "ml", "sd"), hasGFR(t, def.c, "ml", "llm"), hasGFR(t, def.c, "ml", "sd-b"))
	}
	if !meta.IsStatusConditionTrue(def.gfr(t, "ml", "sd").Status.Conditions, gpufracv1.ConditionRecommendationProvided) {
		t.Errorf("default shard: sd has no recommendation")
	}
	b := run("b")
	if hasGFR(t, b.c, "ml", "sd") || !hasGFR(t, b.c, "ml", "llm") || !hasGFR(t, b.c, "ml", "sd-b") {
		t.Errorf("shard b wrote sd %v, llm %v, sd-b %v; want llm and sd-b", hasGFR(t, b.c, "ml", "sd"), hasGFR(t, b.c, "ml", "llm"), hasGFR(t, b.c, "ml", "sd-b"))
	}
	if !meta.IsStatusConditionTrue(b.gfr(t, "ml", "llm").Status.Conditions, gpufracv1.ConditionRecommendationProvided) {
		t.Errorf("shard b: llm has no recommendation")
	}
	// sd-b lost to the default shard's older sd: no recommendation, DuplicateTarget.
	lose := b.gfr(t, "ml", "sd-b")
	if len(lose.Status.ContainerRecommendations) != 0 {
		t.Errorf("sd-b got a recommendation although sd (another shard's, older) is in charge")
	}
	if c := condition(lose.Status, gpufracv1.ConditionConfigUnsupported); c == nil || c.Reason != gpufracv1.ReasonDuplicateTarget {
		t.Errorf("sd-b ConfigUnsupported %+v, want %s", c, gpufracv1.ReasonDuplicateTarget)
	}
	if _, ok := b.rec.tracked[history.WorkloadKey{Namespace: "ml", Kind: "Deployment", Name: "sd"}]; ok {
		t.Errorf("shard b tracks sd, whose autoscaler in charge is the default shard's")
	}
}

// A namespace selector limits a shard to the namespaces it matches.
func TestShardNamespaceSelector(t *testing.T) {
	objs := append(deployment("team-a", "sd", 1), deployment("team-b", "sd", 1)...)
	objs = append(objs, gfa("team-a", "sd", "sd"), gfa("team-b", "sd", "sd"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"shard": "one"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{"shard": "two"}}})
	h := newHarness(t, objs, promFor(objs, 8*gib, 0.2))
	h.rec.Config.Shard = Shard{Namespaces: labels.SelectorFromSet(labels.Set{"shard": "one"})}
	if err := h.rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !hasGFR(t, h.c, "team-a", "sd") || hasGFR(t, h.c, "team-b", "sd") {
		t.Errorf("wrote team-a %v, team-b %v; want team-a only", hasGFR(t, h.c, "team-a", "sd"), hasGFR(t, h.c, "team-b", "sd"))
	}
}

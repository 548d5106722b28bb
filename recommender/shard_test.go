package recommender

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
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

// An autoscaler that names this instance in a namespace its selector leaves out (the
// namespace relabelled away) is recommended for by nobody, while this instance's status
// Lease stays fresh. The instance marks it, on the autoscaler and on the recommendation
// it wrote before (values left as they were): ConfigUnsupported True
// NamespaceNotSelected, a Warning event once, gpufrac_recommender_autoscalers_not_selected.
// An autoscaler there naming another instance, and one in a selected namespace, are not
// marked; selected again, the mark is cleared. Only an instance that leads its name's
// Lease (Shard.Exclusive) marks: without leader election another instance of its name
// may select that namespace (TestShardWithoutLeaderElectionMarksNothing).
func TestShardMarksAutoscalersItsSelectorLeavesOut(t *testing.T) {
	objs := append(deployment("team-a", "sd", 1), deployment("team-b", "sd", 1)...)
	objs = append(objs, deployment("team-b", "llm", 1)...)
	objs = append(objs, inShard(gfa("team-a", "sd", "sd"), "b"), inShard(gfa("team-b", "sd", "sd"), "b"), inShard(gfa("team-b", "llm", "llm"), "other"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"shard": "b"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{"shard": "b"}}})
	h := newHarness(t, objs, promFor(objs, 8*gib, 0.2))
	rec := events.NewFakeRecorder(20)
	h.rec.Events = rec
	h.rec.Config.Shard = Shard{Name: "b", Namespaces: labels.SelectorFromSet(labels.Set{"shard": "b"}), Exclusive: true}
	ctx := context.Background()
	relabel := func(shard string) {
		t.Helper()
		var ns corev1.Namespace
		if err := h.c.Get(ctx, types.NamespacedName{Name: "team-b"}, &ns); err != nil {
			t.Fatal(err)
		}
		ns.Labels["shard"] = shard
		if err := h.c.Update(ctx, &ns); err != nil {
			t.Fatal(err)
		}
	}
	notSelected := func(ns, name string) (gfr, gfa *metav1.Condition) {
		t.Helper()
		var a gpufracv1.GPUFractionAutoscaler
		if err := h.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &a); err != nil {
			t.Fatal(err)
		}
		r := condition(h.gfr(t, ns, name).Status, gpufracv1.ConditionConfigUnsupported)
		if r != nil && (r.Status != metav1.ConditionTrue || r.Reason != gpufracv1.ReasonNamespaceNotSelected) {
			r = nil
		}
		c := meta.FindStatusCondition(a.Status.Conditions, gpufracv1.ConditionConfigUnsupported)
		if c != nil && (c.Status != metav1.ConditionTrue || c.Reason != gpufracv1.ReasonNamespaceNotSelected) {
			c = nil
		}
		return r, c
	}
	countEvents := func() (n int) {
		for len(rec.Events) > 0 {
			if e := <-rec.Events; strings.Contains(e, gpufracv1.ReasonNamespaceNotSelected) {
				n++
			}
		}
		return n
	}
	run := func() {
		t.Helper()
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run()
	before := h.gfr(t, "team-b", "sd").Status.ContainerRecommendations
	if len(before) == 0 {
		t.Fatal("team-b/sd has no recommendation while selected")
	}
	relabel("elsewhere")
	for i := range 2 {
		run()
		r, a := notSelected("team-b", "sd")
		if r == nil || a == nil {
			t.Fatalf("cycle %d: team-b/sd ConfigUnsupported %s on the recommendation %v, on the autoscaler %v; want both", i, gpufracv1.ReasonNamespaceNotSelected, r != nil, a != nil)
		}
		for _, want := range []string{`"b"`, "team-b", "protective growth"} {
			if !strings.Contains(r.Message, want) {
				t.Errorf("message %q does not say %s", r.Message, want)
			}
		}
		if got := h.gfr(t, "team-b", "sd").Status.ContainerRecommendations; !equality.Semantic.DeepEqual(got, before) {
			t.Errorf("the recommendation's values changed while nobody recommends for it")
		}
		if got := testutil.ToFloat64(autoscalersNotSelected); got != 1 {
			t.Errorf("gpufrac_recommender_autoscalers_not_selected = %v, want 1", got)
		}
		if n, want := countEvents(), map[int]int{0: 1, 1: 0}[i]; n != want {
			t.Errorf("cycle %d: %d %s events, want %d", i, n, gpufracv1.ReasonNamespaceNotSelected, want)
		}
	}
	if r, a := notSelected("team-a", "sd"); r != nil || a != nil {
		t.Errorf("team-a/sd, selected, is marked %s", gpufracv1.ReasonNamespaceNotSelected)
	}
	if hasGFR(t, h.c, "team-b", "llm") {
		t.Errorf("team-b/llm, another instance's, was written")
	}
	relabel("b")
	run()
	if r, a := notSelected("team-b", "sd"); r != nil || a != nil {
		t.Errorf("team-b/sd, selected again, is still marked %s", gpufracv1.ReasonNamespaceNotSelected)
	}
	if got := testutil.ToFloat64(autoscalersNotSelected); got != 0 {
		t.Errorf("gpufrac_recommender_autoscalers_not_selected = %v, want 0", got)
	}
}

// Two instances may share a name without leader election, each with its own namespace
// selector (make bench-scale SHARDS=2 runs its shards so): one cannot tell that the
// other leaves a namespace it does not select uncovered, so neither marks the other's
// autoscalers (it would every cycle, and the other would clear it).
func TestShardWithoutLeaderElectionMarksNothing(t *testing.T) {
	objs := append(deployment("team-a", "sd", 1), deployment("team-b", "sd", 1)...)
	objs = append(objs, inShard(gfa("team-a", "sd", "sd"), "b"), inShard(gfa("team-b", "sd", "sd"), "b"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"shard": "b"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{"shard": "c"}}})
	h := newHarness(t, objs, promFor(objs, 8*gib, 0.2))
	for _, exclusive := range []bool{false, true} {
		h.rec.Config.Shard = Shard{Name: "b", Namespaces: labels.SelectorFromSet(labels.Set{"shard": "b"}), Exclusive: exclusive}
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		var a gpufracv1.GPUFractionAutoscaler
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "team-b", Name: "sd"}, &a); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(a.Status.Conditions, gpufracv1.ConditionConfigUnsupported)
		marked := c != nil && c.Status == metav1.ConditionTrue && c.Reason == gpufracv1.ReasonNamespaceNotSelected
		if marked != exclusive {
			t.Errorf("exclusive %v: team-b/sd marked %s %v, want %v", exclusive, gpufracv1.ReasonNamespaceNotSelected, marked, exclusive)
		}
	}
}

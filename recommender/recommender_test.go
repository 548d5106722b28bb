package recommender

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

func TestRecommenderCycle(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), deployment("ml", "idle", 0)...)
	objs = append(objs, gfa("ml", "sd", "sd"), gfa("ml", "idle", "idle"), gfa("ml", "missing", "nope"))
	prom := promFor(objs, 20*gib, 0.3)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}

	sd := h.gfr(t, "ml", "sd")
	if !meta.IsStatusConditionTrue(sd.Status.Conditions, gpufracv1.ConditionRecommendationProvided) {
		t.Fatalf("sd: no recommendation after the first cycle: %+v", sd.Status.Conditions)
	}
	if len(sd.OwnerReferences) != 1 || sd.OwnerReferences[0].Name != "sd" || !*sd.OwnerReferences[0].Controller {
		t.Errorf("gfr must be owned by its gfa: %+v", sd.OwnerReferences)
	}
	cr := sd.Status.ContainerRecommendations[0]
	// 20 GiB per-interval peaks: p90 is the end of 20 GiB's bucket, ×1.15 headroom, in MiB.
	wantMem := 20 * gib * 1.15
	if got := cr.Target.Memory.AsApproximateFloat64(); got < wantMem || got > wantMem*1.05 {
		t.Errorf("memory target %v, want within one 5%% bucket above %v", got, wantMem)
	}
	if got := cr.Target.Compute.MilliValue(); got != 357 { // 0.31 (bucket end) × 1.15 = 0.3565 → 357m
		t.Errorf("compute target %dm, want 357m", got)
	}
	if sd.Status.MatchedPods != 2 || cr.HistoryHours < 47 || cr.ConfidencePercent != 80 { // GPU_UTIL caps at 80
		t.Errorf("pods %d, history %dh, confidence %d", sd.Status.MatchedPods, cr.HistoryHours, cr.ConfidencePercent)
	}
	if cr.ComputeSource != metrics.DCGMGPUUtil {
		t.Errorf("compute source %q", cr.ComputeSource)
	}

	idle := h.gfr(t, "ml", "idle")
	if !meta.IsStatusConditionTrue(idle.Status.Conditions, gpufracv1.ConditionNoPodsMatched) {
		t.Errorf("idle: want NoPodsMatched: %+v", idle.Status.Conditions)
	}
	missing := h.gfr(t, "ml", "missing")
	if c := condition(missing.Status, gpufracv1.ConditionConfigUnsupported); !isTrue(c) || c.Reason != ReasonTargetNotFound {
		t.Errorf("missing: want ConfigUnsupported/TargetNotFound: %+v", missing.Status.Conditions)
	}

	// Prometheus fails: nothing changes but MetricsUnavailable, and that only once the
	// reads have failed FailedReadsBeforeUnavailable cycles in a row (one failed read
	// writes nothing: the status is as it was).
	before := sd.Status.ContainerRecommendations
	prom.fail.Store(true)
	prom.mu.Lock()
	for k := range prom.mem {
		prom.mem[k] = 1 * gib
	}
	prom.mu.Unlock()
	for i := 1; i <= FailedReadsBeforeUnavailable; i++ {
		rv := sd.ResourceVersion
		h.now = h.now.Add(time.Minute)
		if err := h.rec.RunOnce(ctx); err == nil {
			t.Fatal("cycle with a failing Prometheus must return an error")
		}
		sd = h.gfr(t, "ml", "sd")
		unavailable := meta.IsStatusConditionTrue(sd.Status.Conditions, gpufracv1.ConditionMetricsUnavailable)
		if want := i == FailedReadsBeforeUnavailable; unavailable != want {
			t.Errorf("failed read %d of %d: MetricsUnavailable %v, want %v: %+v", i, FailedReadsBeforeUnavailable, unavailable, want, sd.Status.Conditions)
		}
		if i < FailedReadsBeforeUnavailable && sd.ResourceVersion != rv {
			t.Errorf("failed read %d: the status was written (resourceVersion %s → %s)", i, rv, sd.ResourceVersion)
		}
	}
	if sd.Status.ContainerRecommendations[0].Target.Memory.Cmp(*before[0].Target.Memory) != 0 {
		t.Errorf("recommendation changed while Prometheus failed")
	}
	prom.fail.Store(false)
	h.now = h.now.Add(time.Minute)
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	sd = h.gfr(t, "ml", "sd")
	if meta.IsStatusConditionTrue(sd.Status.Conditions, gpufracv1.ConditionMetricsUnavailable) {
		t.Errorf("MetricsUnavailable must clear when Prometheus is back")
	}
	// Memory fell to 1 GiB, but the recent peak (20 GiB) still holds the target up.
	if got := sd.Status.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64(); got < wantMem {
		t.Errorf("memory target fell below the recent peak plus headroom: %v", got)
	}
}

func TestGuardrailStopsShrink(t *testing.T) {
	objs := singlePodWorkloads("ml", "sd")
	g := objs[len(objs)-1].(*gpufracv1.GPUFractionAutoscaler)
	g.Spec.LatencyGuardrail = &gpufracv1.LatencyGuardrail{Query: "latency_seconds", Objective: metav1.Duration{Duration: time.Second}}
	pod := objs[2].(*corev1.Pod)
	prom := &fakeProm{pods: []metrics.ContainerID{{Namespace: "ml", Pod: pod.Name, Container: "main"}},
		mem: map[string]float64{pod.Name: 20 * gib}, cpu: map[string]float64{pod.Name: 0.5}, latency: ptr.To(0.2)}
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	first := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0].Target.Compute.MilliValue()
	if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionLatencyGuardrailActive); !isFalse(c) {
		t.Fatalf("guardrail must be inactive at 0.2s < 1s: %+v", c)
	}
	// Latency breaches the objective: compute grows each cycle.
	*prom.latency = 2
	h.now = h.now.Add(time.Minute)
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	gfr := h.gfr(t, "ml", "sd")
	if !meta.IsStatusConditionTrue(gfr.Status.Conditions, gpufracv1.ConditionLatencyGuardrailActive) {
		t.Fatalf("want LatencyGuardrailActive: %+v", gfr.Status.Conditions)
	}
	if got := gfr.Status.ContainerRecommendations[0].Target.Compute.MilliValue(); got != first+100 {
		t.Errorf("compute %dm after a breach, want %dm", got, first+100)
	}
}

// A latency guardrail query that answers only values no latency can have (negative: a
// broken query, e.g. a counter reset inside a rate; NaN; a native histogram, whose
// sample has no float value: a query that forgot histogram_quantile) is a broken
// metric: the guardrail holds (no shrink), as for a failed query, instead of reading
// the objective as met.
func TestGuardrailImpossibleLatencyHolds(t *testing.T) {
	histogram := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		writeResult(w, "vector", []any{map[string]any{"metric": map[string]string{}, "histogram": []any{json.Number(r.Form.Get("time")),
			map[string]any{"count": "2", "sum": "3.5", "buckets": []any{[]any{0, "0", "1", "2"}}}}}})
	})
	for _, tc := range []struct {
		name    string
		latency float64
		answer  http.Handler // the guardrail query's answer; nil: latency as a scalar
	}{{"negative", -0.5, nil}, {"NaN", math.NaN(), nil}, {"native histogram", 0, histogram}} {
		objs := singlePodWorkloads("ml", "sd")
		g := objs[len(objs)-1].(*gpufracv1.GPUFractionAutoscaler)
		g.Spec.LatencyGuardrail = &gpufracv1.LatencyGuardrail{Query: "latency_seconds", Objective: metav1.Duration{Duration: time.Second}}
		prom := promFor(objs, 20*gib, 0.5)
		prom.latency = ptr.To(tc.latency)
		h := newHarness(t, objs, prom)
		if tc.answer != nil {
			h.rec.Reader = promReader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _ = r.ParseForm(); r.Form.Get("query") == g.Spec.LatencyGuardrail.Query {
					tc.answer.ServeHTTP(w, r)
					return
				}
				prom.ServeHTTP(w, r)
			}))
		}
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		gfr := h.gfr(t, "ml", "sd")
		c := condition(gfr.Status, gpufracv1.ConditionLatencyGuardrailActive)
		if guard, _ := gpufracv1.GuardrailOf(gfr); guard != gpufracv1.GuardrailHold || c == nil || c.Reason != gpufracv1.ReasonLatencyUnknown {
			t.Errorf("%s: guardrail %v, condition %+v; want Hold (%s): shrinking on a latency that cannot be true", tc.name, guard, c, gpufracv1.ReasonLatencyUnknown)
		}
	}
}

// An autoscaler retargeted from Deployment a (10 GiB of history) to Deployment b, whose
// pods have no GPU sample yet: a's recommendation is another workload's and is dropped
// (RecommendationProvided False, TargetChanged), never kept as b's, where the webhook
// would write a's 10 GiB into b's pods and the updater replace them towards it.
func TestRetargetDropsTheFormerRecommendation(t *testing.T) {
	objs := append(deployment("ml", "a", 1), deployment("ml", "b", 1)...)
	objs = append(objs, gfa("ml", "sd", "a"))
	prom := promFor(objs, 10*gib, 0.2)
	bPod := podsOf(objs)[1].Name
	delete(prom.mem, bPod)
	delete(prom.cpu, bPod)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.gfr(t, "ml", "sd").Status.ContainerRecommendations) == 0 {
		t.Fatal("no recommendation for a")
	}
	g := &gpufracv1.GPUFractionAutoscaler{}
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "ml", Name: "sd"}, g); err != nil {
		t.Fatal(err)
	}
	g.Spec.TargetRef.Name = "b"
	if err := h.c.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		h.now = h.now.Add(time.Minute)
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := h.gfr(t, "ml", "sd").Status
	if c := condition(st, gpufracv1.ConditionRecommendationProvided); len(st.ContainerRecommendations) > 0 || !isFalse(c) || c.Reason != ReasonTargetChanged {
		t.Errorf("after retargeting to b (no samples): %d container recommendations, RecommendationProvided %+v; want none, False (%s)",
			len(st.ContainerRecommendations), c, ReasonTargetChanged)
	}
}

// An autoscaler created after the first cycle, in a namespace whose live samples are
// already read, still gets its whole history (not only what the live loads saw).
func TestLateAutoscalerGetsFullHistory(t *testing.T) {
	objs := append(deployment("ml", "a", 1), deployment("ml", "b", 1)...)
	objs = append(objs, gfa("ml", "a", "a"))
	prom := promFor(objs, 10*gib, 0.2)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(time.Minute)
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	create(t, h.c, gfa("ml", "b", "b"))
	h.now = h.now.Add(time.Minute)
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := h.gfr(t, "ml", "a").Status.ContainerRecommendations[0], h.gfr(t, "ml", "b").Status.ContainerRecommendations[0]
	if b.HistoryHours != a.HistoryHours || b.HistoryHours < 47 {
		t.Errorf("late autoscaler has %dh of history, the first %dh", b.HistoryHours, a.HistoryHours)
	}
}

// With Prometheus failing for several cycles between good ones, and usage falling,
// no recommendation ever decreases while it fails, and the failures change nothing.
func TestErrorsNeverShrink(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	prom := promFor(objs, 30*gib, 0.5)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	last := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0]
	for cycle := 0; cycle < 12; cycle++ {
		h.now = h.now.Add(time.Minute)
		prom.fail.Store(cycle%4 != 3) // three failing cycles, then one good one
		prom.mu.Lock()
		for k := range prom.mem {
			prom.mem[k] = 1 * gib // usage collapses (e.g. a broken exporter reporting low)
			prom.cpu[k] = 0.01
		}
		prom.mu.Unlock()
		err := h.rec.RunOnce(ctx)
		if prom.fail.Load() != (err != nil) {
			t.Fatalf("cycle %d: failing=%v err=%v", cycle, prom.fail.Load(), err)
		}
		cur := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0]
		if prom.fail.Load() && (cur.Target.Memory.Cmp(*last.Target.Memory) != 0 || cur.Target.Compute.Cmp(*last.Target.Compute) != 0) {
			t.Fatalf("cycle %d: recommendation changed while Prometheus failed: %v/%v → %v/%v", cycle,
				last.Target.Memory, last.Target.Compute, cur.Target.Memory, cur.Target.Compute)
		}
		if cur.Target.Memory.Cmp(*last.Target.Memory) < 0 {
			t.Fatalf("cycle %d: memory decreased %v → %v within the peak window", cycle, last.Target.Memory, cur.Target.Memory)
		}
		last = cur
	}
}

func TestAutoscalerMetrics(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	prom := promFor(objs, 20*gib, 0.3)
	h := newHarness(t, objs, prom)
	if err := h.rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := WithAutoscalers(prometheus.NewPedanticRegistry())
	got, err := testutil.GatherAndCount(reg, "gpufrac_autoscaler_pod_info", "gpufrac_recommendation_memory_bytes", "gpufrac_autoscaler_gpus_held")
	if err != nil {
		t.Fatal(err)
	}
	if got != 2+4+1 { // two pods; four memory bounds; one held gauge
		t.Errorf("%d series, want 7", got)
	}
	want := strings.NewReader(`# HELP gpufrac_autoscaler_gpus_held Whole GPUs the workload's live pods hold at one per pod.
# TYPE gpufrac_autoscaler_gpus_held gauge
gpufrac_autoscaler_gpus_held{autoscaler="sd",namespace="ml"} 2
`)
	if err := testutil.GatherAndCompare(reg, want, "gpufrac_autoscaler_gpus_held"); err != nil {
		t.Error(err)
	}
}

// Two autoscalers on one workload (the validating webhook was down): the oldest is in
// charge whatever the names; the other gets no container recommendations (even one it
// had before), RecommendationProvided False and ConfigUnsupported True with reason
// DuplicateTarget, and both get one event, not one per cycle.
func TestDuplicateTargetOldestWins(t *testing.T) {
	objs := deployment("ml", "sd", 2)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	older, newer := gfa("ml", "z-sd", "sd"), gfa("ml", "a-sd", "sd")
	older.CreationTimestamp, newer.CreationTimestamp = metav1.NewTime(t0), metav1.NewTime(t0.Add(time.Hour))
	stale := &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a-sd",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: "a-sd", UID: newer.UID, Controller: ptr.To(true)}}},
		Status: gpufracv1.GPUFractionRecommendationStatus{ContainerRecommendations: []gpufracv1.ContainerRecommendation{{ContainerName: "main",
			Target: gpufracv1.GPUResources{Memory: ptrQuantity("1Gi")}}},
			Conditions: []metav1.Condition{{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: ReasonRecommended, LastTransitionTime: metav1.NewTime(t0)}}}}
	objs = append(objs, newer, older, stale)
	prom := promFor(objs, 4*gib, 0.3)
	h := newHarness(t, objs, prom)
	rec := events.NewFakeRecorder(20)
	h.rec.Events = rec
	ctx := context.Background()
	for range 2 {
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		h.now = h.now.Add(time.Minute)
	}
	win := h.gfr(t, "ml", "z-sd")
	if !meta.IsStatusConditionTrue(win.Status.Conditions, gpufracv1.ConditionRecommendationProvided) || len(win.Status.ContainerRecommendations) == 0 {
		t.Fatalf("the older autoscaler z-sd has no recommendation: %+v", win.Status.Conditions)
	}
	if c := condition(win.Status, gpufracv1.ConditionConfigUnsupported); !isFalse(c) {
		t.Errorf("winner ConfigUnsupported %+v", c)
	}
	lose := h.gfr(t, "ml", "a-sd")
	if len(lose.Status.ContainerRecommendations) != 0 || lose.Status.Memory != nil {
		t.Errorf("the newer autoscaler a-sd kept recommendations: %+v", lose.Status.ContainerRecommendations)
	}
	if c := condition(lose.Status, gpufracv1.ConditionRecommendationProvided); !isFalse(c) || c.Reason != gpufracv1.ReasonDuplicateTarget {
		t.Errorf("loser RecommendationProvided %+v, want False/%s", c, gpufracv1.ReasonDuplicateTarget)
	}
	if c := condition(lose.Status, gpufracv1.ConditionConfigUnsupported); !isTrue(c) || c.Reason != gpufracv1.ReasonDuplicateTarget || !strings.Contains(c.Message, "z-sd") {
		t.Errorf("loser ConfigUnsupported %+v, want True/%s naming z-sd", c, gpufracv1.ReasonDuplicateTarget)
	}
	var evs []string
	for len(rec.Events) > 0 {
		evs = append(evs, <-rec.Events)
	}
	onWinner, onLoser := 0, 0
	for _, e := range evs {
		if strings.Contains(e, gpufracv1.ReasonDuplicateTarget) && strings.Contains(e, "also target") {
			onWinner++
		}
		if strings.Contains(e, gpufracv1.ReasonDuplicateTarget) && strings.Contains(e, "is ignored") {
			onLoser++
		}
	}
	if onWinner != 1 || onLoser != 1 {
		t.Errorf("events %q: want one DuplicateTarget event on each autoscaler over two cycles", evs)
	}
}

package recommender

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// engineHarness runs the recommender against the real PromQL engine (promtest) over
// samples written with the exporters' published names, labels and units.
type engineHarness struct {
	rec  *Recommender
	c    client.Client
	prom *promtest.Server
	now  time.Time
}

func newEngineHarness(t testing.TB, objs []client.Object, src metrics.Source) *engineHarness {
	prom := promtest.New(t)
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&gpufracv1.GPUFractionAutoscaler{}, &gpufracv1.GPUFractionRecommendation{}).Build()
	h := &engineHarness{c: c, prom: prom, now: time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)}
	h.rec = New(c, &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels}, src, Config{HistoryLength: 48 * time.Hour})
	h.rec.Now = func() time.Time { return h.now }
	return h
}

func (h *engineHarness) gfr(t testing.TB, ns, name string) *gpufracv1.GPUFractionRecommendation {
	return (&harness{c: h.c}).gfr(t, ns, name)
}

// podsOf returns the pods among objs.
func podsOf(objs []client.Object) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// dcgmLabels are a dcgm-exporter series' labels as scraped with honor_labels.
func dcgmLabels(metric string, p *corev1.Pod, uuid string) map[string]string {
	return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "container": "main",
		"UUID": uuid, "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1"}
}

// addDCGM writes n samples every 30s ending at end for pod: FB_USED in MiB and SM_ACTIVE
// as a ratio, as dcgm-exporter publishes them.
func addDCGM(t testing.TB, prom *promtest.Server, p *corev1.Pod, uuid string, end time.Time, n int, fbMiB, smActive float64) {
	start := end.Add(-time.Duration(n-1) * 30 * time.Second)
	prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, uuid), start, 30*time.Second, promtest.Repeat(fbMiB, n)...)
	prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, uuid), start, 30*time.Second, promtest.Repeat(smActive, n)...)
}

func condition(st gpufracv1.GPUFractionRecommendationStatus, typ string) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, typ)
}

// Kind 1 (issue 13): an answer with warnings is incomplete. With one pod's series
// missing from a partial answer and the other's collapsing, nothing changes: targets
// stay, MetricsUnavailable says PartialResponse, the counter moves; and once answers are
// complete again, the recommender reads what it skipped.
func TestPartialResponseNeverShrinks(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	for i, p := range pods {
		addDCGM(t, h.prom, p, "GPU-"+string(rune('a'+i)), h.now, 48*120, 20000, 0.6)
	}
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	first := h.gfr(t, "ml", "sd").Status
	if len(first.ContainerRecommendations) != 1 {
		t.Fatalf("no recommendation: %+v", first.Conditions)
	}
	want := first.ContainerRecommendations[0]
	if c := want.Target.Compute.MilliValue(); c < 600 {
		t.Fatalf("compute target %dm from SM_ACTIVE 0.6", c)
	}

	// A store is down: the answer omits pod 1 and pod 0 reads low.
	partials := testutil.ToFloat64(metrics.Incomplete.WithLabelValues(metrics.IncompletePartialResponse))
	h.prom.SetWarnings([]string{"No StoreAPIs matched for this query", "store 10.0.3.7:10901: rpc error: code = Unavailable"})
	for cycle := 0; cycle < 3; cycle++ {
		h.now = h.now.Add(time.Minute)
		addDCGM(t, h.prom, pods[0], "GPU-a", h.now, 2, 1000, 0.04)
		err := h.rec.RunOnce(ctx)
		if err == nil {
			t.Fatalf("cycle %d: a partial answer must fail the cycle", cycle)
		}
		st := h.gfr(t, "ml", "sd").Status
		got := st.ContainerRecommendations[0]
		if got.Target.Compute.Cmp(*want.Target.Compute) != 0 || got.Target.Memory.Cmp(*want.Target.Memory) != 0 {
			t.Fatalf("cycle %d: target changed on a partial answer: %v/%v → %v/%v", cycle, want.Target.Memory, want.Target.Compute, got.Target.Memory, got.Target.Compute)
		}
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != gpufracv1.ReasonPartialResponse {
			t.Fatalf("cycle %d: want MetricsUnavailable=True PartialResponse, got %+v", cycle, c)
		}
	}
	if d := testutil.ToFloat64(metrics.Incomplete.WithLabelValues(metrics.IncompletePartialResponse)) - partials; d < 3 {
		t.Errorf("incomplete_data_total{partial_response} += %v, want ≥ 3 (one per partial answer)", d)
	}

	// Complete answers again: the condition clears.
	h.prom.SetWarnings(nil)
	h.now = h.now.Add(time.Minute)
	if err := h.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("MetricsUnavailable must clear with complete answers: %+v", c)
	}
}

package recommender

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// countQueries counts the queries prom received that contain s.
func countQueries(prom *promtest.Server, s string) int {
	n := 0
	for _, q := range prom.Queries() {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

// dcgm-exporter scraped without honor_labels by Prometheus' example
// kubernetes-service-endpoints job, which sets a namespace target label but no pod: the
// series carry exported_namespace (the workload's), namespace (the exporter's) and a
// plain pod, which neither reading of --label-mode auto matches. The condition says
// NoSamples, then NoSamplesWhileRunning, as before, and now names the series and the
// flags that read them; the look runs in the first cycle and then at most once per
// LabelHintEvery intervals. With the flags it names, the workload gets a recommendation.
// Before, the message said only "no GPU samples in Prometheus for the workload's pods",
// then "an exporter or scrape gap".
func TestNoSamplesNamesLabelsNotRead(t *testing.T) {
	objs := singlePodWorkloads("ml", "llm")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pod := podsOf(objs)[0]
	lbl := func(metric string) map[string]string {
		return map[string]string{"__name__": metric, "exported_namespace": pod.Namespace, "namespace": "gpu-operator", "pod": pod.Name, "container": "main",
			"service": "dcgm-exporter", "instance": "10.0.0.5:9400", "job": "kubernetes-service-endpoints", "UUID": "GPU-1", "gpu": "0", "Hostname": "node-1"}
	}
	add := func(end time.Time, n int) {
		from := end.Add(-time.Duration(n-1) * 30 * time.Second)
		h.prom.Add(t, lbl(metrics.DCGMFBUsed), from, 30*time.Second, promtest.Repeat(20000, n)...)
		h.prom.Add(t, lbl(metrics.DCGMSMActive), from, 30*time.Second, promtest.Repeat(0.5, n)...)
	}
	add(h.now, 48*120)
	const flags = "--namespace-label=exported_namespace --label-mode=direct"
	h.runCycles(t, 1, nil)
	c := condition(h.gfr(t, "ml", "llm").Status, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != ReasonNoSamples || !strings.Contains(c.Message, flags) || !strings.Contains(c.Message, "exported_namespace with a plain pod") {
		t.Fatalf("first cycle: MetricsUnavailable %+v, want NoSamples naming exported_namespace and %s", c, flags)
	}
	h.runCycles(t, 15, func(now time.Time) { add(now, 2) })
	c = condition(h.gfr(t, "ml", "llm").Status, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || !strings.Contains(c.Message, flags) || strings.Contains(c.Message, "exporter or scrape gap") {
		t.Errorf("after 16 cycles: MetricsUnavailable %+v, want it to name %s, not a scrape gap", c, flags)
	}
	// 16 cycles a minute apart: looked at minute 0 and minute 10.
	if n := countQueries(h.prom, "gpufrac_layout"); n != 2 {
		t.Errorf("%d looks for labels not read in 16 cycles, want 2 (one per %d intervals)", n, LabelHintEvery)
	}

	// The flags named: the same series are read.
	fixed := New(h.c, &metrics.Reader{API: h.prom.API(t), Labels: metrics.Labels{Namespace: "exported_namespace", Pod: "pod", Container: "container"}},
		metrics.DCGM{}, Config{HistoryLength: 48 * time.Hour, LabelMode: "direct"})
	fixed.Now = func() time.Time { return h.now }
	h.rec = fixed
	before := countQueries(h.prom, "gpufrac_layout")
	h.runCycles(t, 2, func(now time.Time) { add(now, 2) })
	st := h.gfr(t, "ml", "llm").Status
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) || len(st.ContainerRecommendations) != 1 {
		t.Errorf("with %s: MetricsUnavailable %+v, recommendations %+v; want a recommendation", flags, c, st.ContainerRecommendations)
	}
	if n := countQueries(h.prom, "gpufrac_layout") - before; n != 0 {
		t.Errorf("%d looks for labels not read while every workload has samples, want none", n)
	}
}

// Series read as they are (honor_labels) in one namespace and a workload of another
// namespace whose pod has no GPU series at all: the look runs (a workload got no
// sample) and finds nothing, so the message is the plain NoSamples one.
func TestNoSamplesWithoutOtherLabelsSaysNoSamples(t *testing.T) {
	objs := append(singlePodWorkloads("ml", "llm"), singlePodWorkloads("idle", "web")...)
	h := newEngineHarness(t, objs, metrics.DCGM{})
	var pod *corev1.Pod
	for _, p := range podsOf(objs) {
		if p.Namespace == "ml" {
			pod = p
		}
	}
	addDCGM(t, h.prom, pod, "GPU-1", h.now, 48*120, 20000, 0.5)
	h.runCycles(t, 1, nil)
	c := condition(h.gfr(t, "idle", "web").Status, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != ReasonNoSamples || c.Message != "no GPU samples in Prometheus for the workload's pods" {
		t.Errorf("MetricsUnavailable %+v, want the plain NoSamples message", c)
	}
	if n := countQueries(h.prom, "gpufrac_layout"); n != 1 {
		t.Errorf("%d looks, want 1", n)
	}
}

// dcgm-exporter run without its Kubernetes mode: every GPU's series and none names a
// pod. The running workload's NoSamples message says so and what makes the exporter
// name pods. Before, it said only "no GPU samples in Prometheus for the workload's pods".
func TestNoSamplesNamesMetricsThatNameNoPod(t *testing.T) {
	objs := singlePodWorkloads("ml", "llm")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	for _, m := range []string{metrics.DCGMFBUsed, metrics.DCGMSMActive} {
		h.prom.Add(t, map[string]string{"__name__": m, "UUID": "GPU-1", "gpu": "0", "Hostname": "node-1"}, h.now.Add(-time.Hour), 30*time.Second, promtest.Repeat(0.5, 121)...)
	}
	h.runCycles(t, 1, nil)
	c := condition(h.gfr(t, "ml", "llm").Status, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != ReasonNoSamples || !strings.Contains(c.Message, "DCGM_EXPORTER_KUBERNETES=true") {
		t.Errorf("MetricsUnavailable %+v, want NoSamples naming dcgm-exporter's Kubernetes mode", c)
	}
}

// A workload whose only pod is pending (not on a GPU yet) has no sample and is no
// reason to look: no look for labels not read.
func TestNoLabelLookForPendingPods(t *testing.T) {
	objs := singlePodWorkloads("ml", "llm")
	podsOf(objs)[0].Status.Phase = corev1.PodPending
	h := newEngineHarness(t, objs, metrics.DCGM{})
	for _, m := range []string{metrics.DCGMFBUsed, metrics.DCGMSMActive} {
		h.prom.Add(t, map[string]string{"__name__": m, "UUID": "GPU-1", "Hostname": "node-1"}, h.now.Add(-time.Hour), 30*time.Second, promtest.Repeat(0.5, 121)...)
	}
	h.runCycles(t, 3, nil)
	if n := countQueries(h.prom, "gpufrac_layout"); n != 0 {
		t.Errorf("%d looks for a pending pod, want none", n)
	}
}

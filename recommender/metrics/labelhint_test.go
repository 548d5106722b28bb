package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// GPU series whose workload labels only part of which Prometheus renamed to exported_*
// (a scrape without honor_labels by a job that sets a namespace target label but no pod,
// or a pod but no namespace), which neither reading of --label-mode auto matches: each
// is found in its watched namespace, named with the flags that read it; series read as
// they are and those of namespaces not watched are not. With --label-mode direct, series
// with both labels exported are found too (--label-mode=auto reads them).
func TestLabelHintsFindSeriesTheLabelsDoNotRead(t *testing.T) {
	prom := promtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	add := func(lbls map[string]string) {
		for _, m := range []string{metrics.DCGMFBUsed, metrics.DCGMSMActive} {
			l := map[string]string{"__name__": m, "UUID": "GPU-1", "container": "main"}
			for k, v := range lbls {
				l[k] = v
			}
			prom.Add(t, l, now.Add(-time.Minute), 30*time.Second, 1, 1, 1)
		}
	}
	// kubernetes-service-endpoints: namespace is the exporter's, pod the workload's.
	add(map[string]string{"exported_namespace": "ml", "namespace": "gpu-operator", "pod": "llm-0"})
	add(map[string]string{"exported_namespace": "unwatched", "namespace": "gpu-operator", "pod": "x-0"})
	// A job that sets pod only.
	add(map[string]string{"namespace": "team", "exported_pod": "trainer-0", "pod": "dcgm-exporter-abc"})
	// Read by auto: honor_labels, and both exported.
	add(map[string]string{"namespace": "ok", "pod": "svc-0"})
	add(map[string]string{"exported_namespace": "both", "exported_pod": "b-0", "namespace": "gpu-operator", "pod": "dcgm-exporter-abc"})
	rd := &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels}
	watched := []string{"ml", "team", "ok", "both"}

	for _, tc := range []struct {
		direct bool
		want   []string // namespace: flags
	}{
		{false, []string{"ml: --namespace-label=exported_namespace --label-mode=direct", "team: --pod-label=exported_pod --label-mode=direct"}},
		{true, []string{"both: --label-mode=auto", "ml: --namespace-label=exported_namespace --label-mode=direct", "team: --pod-label=exported_pod --label-mode=direct"}},
	} {
		sel := metrics.Selector{Labels: metrics.DefaultLabels, Namespaces: watched, Direct: tc.direct}
		q := metrics.LabelHintQuery([]metrics.Source{metrics.DCGM{}}, sel)
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(q); err != nil {
			t.Fatalf("direct=%v: query does not parse: %v\n%s", tc.direct, err, q)
		}
		hints, err := rd.LabelHints(context.Background(), []metrics.Source{metrics.DCGM{}}, sel, now)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hints {
			got = append(got, h.Namespace+": "+h.Flags)
			if h.Metric != metrics.DCGMFBUsed && h.Metric != metrics.DCGMSMActive {
				t.Errorf("direct=%v: hint %+v names metric %q", tc.direct, h, h.Metric)
			}
			if s := h.String(); !strings.Contains(s, "honor_labels: true") || !strings.Contains(s, h.Flags) || !strings.Contains(s, "namespace "+h.Namespace) {
				t.Errorf("direct=%v: hint reads %q", tc.direct, s)
			}
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("direct=%v: hints\n%s\nwant\n%s", tc.direct, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// A metric whose series name no pod in any layout (dcgm-exporter without its Kubernetes
// mode: every GPU's series, none with a pod label) is named once, for every namespace,
// with what makes the exporter name pods; a metric with one series that names a pod is
// not (the GPUs without a pod are idle ones).
func TestLabelHintsFindMetricsThatNameNoPod(t *testing.T) {
	prom := promtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, uuid := range []string{"GPU-1", "GPU-2"} {
		prom.Add(t, map[string]string{"__name__": metrics.DCGMFBUsed, "UUID": uuid, "Hostname": "node-1"}, now.Add(-time.Minute), 30*time.Second, 1, 1, 1)
		prom.Add(t, map[string]string{"__name__": metrics.DCGMSMActive, "UUID": uuid, "Hostname": "node-1"}, now.Add(-time.Minute), 30*time.Second, 1, 1, 1)
	}
	rd := &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels}
	sel := metrics.Selector{Labels: metrics.DefaultLabels, Namespaces: []string{"ml"}}
	hints, err := rd.LabelHints(context.Background(), []metrics.Source{metrics.DCGM{}}, sel, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(hints) != 1 || hints[0].Namespace != "" || hints[0].Metric != metrics.DCGMFBUsed ||
		!strings.Contains(hints[0].String(), "DCGM_EXPORTER_KUBERNETES=true") || !strings.Contains(hints[0].String(), "no series of "+metrics.DCGMFBUsed) {
		t.Fatalf("hints %+v, want one naming %s and dcgm-exporter's Kubernetes mode", hints, metrics.DCGMFBUsed)
	}

	// One pod's series of each metric: the other GPUs are idle.
	for _, m := range []string{metrics.DCGMFBUsed, metrics.DCGMSMActive} {
		prom.Add(t, map[string]string{"__name__": m, "UUID": "GPU-3", "Hostname": "node-1", "namespace": "other", "pod": "p-0", "container": "main"},
			now.Add(-time.Minute), 30*time.Second, 1, 1, 1)
	}
	if hints, err = rd.LabelHints(context.Background(), []metrics.Source{metrics.DCGM{}}, sel, now); err != nil || len(hints) != 0 {
		t.Errorf("with a pod's series: hints %+v, %v; want none", hints, err)
	}
}

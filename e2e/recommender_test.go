package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/trace"
)

const foundationNS = "e2e-found"

// foundationTrace is the synthetic history backfilled for TestRecommender: two
// Deployments of two pods each, 48 hours at one sample per minute, ending at dataEnd.
var foundationTrace trace.Trace

func init() {
	backfills["foundation"] = func(dir string, end time.Time) (string, error) {
		foundationTrace = trace.Synthesize(trace.SynthOptions{Workloads: 2, PodsPerWorkload: 2, Duration: 48 * time.Hour,
			Step: time.Minute, Seed: 7, End: end, Namespace: foundationNS, WorkloadPrefix: "found"})
		return writeOpenMetrics(dir, "foundation.om", foundationTrace)
	}
}

func writeOpenMetrics(dir, name string, tr trace.Trace) (string, error) {
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := trace.WriteOpenMetrics(f, tr, trace.OpenMetricsOptions{}); err != nil {
		return "", err
	}
	return path, f.Close()
}

// Independent expectations, computed here from the backfilled samples without the
// product's estimator: memory = max(decayed p90 of per-pod hourly peaks, highest peak of
// the peak window) × 1.15, rounded down to a whole share of the GPU when the peak plus
// headroom fits it (expectedShare); compute = decayed p90 of per-minute activity × 1.15.
// Decay halves a sample's weight every 24 h (weights are relative, so the reference time
// does not matter). The peak window is 7 days since the recommender's default changed
// from 24 h (rare spikes stay in the target for a week), and packing-aware sizing rounds
// a target a little above ½ or ⅓ of a GPU down to it: both deliberate. A young workload
// (history under 12 h, the default low confidence × 24 h, and at least 1 h) gets the
// margin 1/n for the n whole hours its memory stayed at its highest level (youngMargin).
func expectedTargets(pods []trace.Pod, now time.Time, youngMarginPercent int32) (memBytes, compute float64) {
	type ws struct{ v, w float64 }
	weight := func(t time.Time) float64 { return math.Exp2(t.Sub(now).Hours() / 24) }
	intervalStart := func(t time.Time) time.Time { return t.Add(-time.Millisecond).Truncate(time.Hour) }
	var mem, cpu []ws
	recent := 0.0
	for _, p := range pods {
		peaks := map[time.Time]float64{}
		for _, pt := range p.Memory {
			if pt.T.After(now) {
				continue
			}
			i := intervalStart(pt.T)
			peaks[i] = math.Max(peaks[i], pt.V)
		}
		for i, v := range peaks {
			mem = append(mem, ws{v, weight(i)})
			if !i.Before(intervalStart(now.Add(-e2ePeakWindow))) {
				recent = math.Max(recent, v)
			}
		}
		for _, pt := range p.Compute {
			if !pt.T.After(now) {
				cpu = append(cpu, ws{pt.V, weight(pt.T)})
			}
		}
	}
	p90 := func(s []ws) float64 {
		sort.Slice(s, func(i, j int) bool { return s[i].v < s[j].v })
		total := 0.0
		for _, x := range s {
			total += x.w
		}
		acc := 0.0
		for _, x := range s {
			if acc += x.w; acc >= 0.9*total {
				return x.v
			}
		}
		return s[len(s)-1].v
	}
	// A young recommendation is checked against its own stated margin, which must be at
	// least the margin counted here from hourly peaks: the recommender may count fewer
	// hours at the level (it reads history as hourly peaks and live cycles as partial
	// ones), never more.
	m := 1 + max(youngMargin(pods, now), (float64(youngMarginPercent)-0.5)/100) // percent rounded
	return expectedShare(math.Max(p90(mem), recent)*1.15*m, recent*m), math.Max(0.01, p90(cpu)*1.15)
}

// youngMargin is the young-workload margin, computed here from the samples: 0 unless the
// history spans at least 1 h and under 12 h; else 1/n, n = max(1, whole hours since the
// hourly peak (the highest sample of all pods in the hour, stamped at the hour's end, as
// the recommender reads memory history) that first rose more than 5 % above every
// earlier one).
func youngMargin(pods []trace.Pod, now time.Time) float64 {
	first, last := time.Time{}, time.Time{}
	peaks := map[time.Time]float64{}
	for _, p := range pods {
		for _, pt := range p.Memory {
			if pt.T.After(now) {
				continue
			}
			if first.IsZero() || pt.T.Before(first) {
				first = pt.T
			}
			last = maxTime(last, pt.T)
			end := pt.T.Add(-time.Millisecond).Truncate(time.Hour).Add(time.Hour)
			if end.After(now) {
				end = now
			}
			peaks[end] = math.Max(peaks[end], pt.V)
		}
	}
	span := last.Sub(first) + time.Minute
	if len(peaks) == 0 || span < time.Hour || span >= 12*time.Hour {
		return 0
	}
	ends := make([]time.Time, 0, len(peaks))
	for e := range peaks {
		ends = append(ends, e)
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	level, since := 0.0, time.Time{}
	for _, e := range ends {
		if since.IsZero() || peaks[e] > level*1.05 {
			since = e
		}
		level = math.Max(level, peaks[e])
	}
	n := max(1, int(min(now.Sub(since), span)/time.Hour))
	return 1 / float64(n)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func podsOf(tr trace.Trace, workload string) []trace.Pod {
	var out []trace.Pod
	for _, p := range tr.Pods {
		if p.Workload == workload {
			out = append(out, p)
		}
	}
	return out
}

// checkAgainstIndependent asserts a recommendation's targets equal the independent
// computation within one histogram bucket (5 % for memory, 0.01 × 1.15 for compute)
// plus rounding to whole MiB and milli-GPU.
func checkAgainstIndependent(t *testing.T, gfr *gpufracv1.GPUFractionRecommendation, pods []trace.Pod) {
	t.Helper()
	if len(gfr.Status.ContainerRecommendations) != 1 {
		t.Fatalf("%s: want one container recommendation, got %+v", gfr.Name, gfr.Status.ContainerRecommendations)
	}
	cr := gfr.Status.ContainerRecommendations[0]
	if want := youngMargin(pods, gfr.Status.LastUpdateTime.Time); float64(cr.YoungMarginPercent) < math.Round(100*want)-1 {
		t.Errorf("%s: young margin %d%%, independent %.0f%%: fewer hours at the level than the samples show", gfr.Name, cr.YoungMarginPercent, 100*want)
	}
	mem, cpu := expectedTargets(pods, gfr.Status.LastUpdateTime.Time, cr.YoungMarginPercent)
	gotMem, gotCPU := cr.Target.Memory.AsApproximateFloat64(), cr.Target.Compute.AsApproximateFloat64()
	above := 1.05 // one memory bucket
	if cr.YoungMarginPercent > 0 {
		// A young target shrinks every hour; the written one is kept while the new one
		// is within the 2 % memory noise (recommend.Config.MemoryNoise).
		above *= 1.02
	}
	if gotMem < mem-1 || gotMem > mem*above+(1<<20) {
		t.Errorf("%s: memory target %.0f MiB, independent %.0f MiB (allowed: one 5%% bucket above)", gfr.Name, gotMem/(1<<20), mem/(1<<20))
	}
	if gotCPU < cpu-0.002 || gotCPU > cpu+0.0115+0.001 {
		t.Errorf("%s: compute target %.3f, independent %.3f (allowed: one 0.01 bucket × 1.15 above)", gfr.Name, gotCPU, cpu)
	}
	t.Logf("%s: memory %s (independent %.0f MiB), compute %s (independent %.3f), confidence %d%%, attribution %s",
		gfr.Name, cr.Target.Memory, mem/(1<<20), cr.Target.Compute, cpu, cr.ConfidencePercent, gfr.Status.Attribution)
}

// testExporter serves gauges that Prometheus scrapes every second.
type testExporter struct {
	memMiB  *prometheus.GaugeVec
	utilPct *prometheus.GaugeVec
	latency *prometheus.GaugeVec
	addr    string
}

func startExporter(t *testing.T) *testExporter {
	reg := prometheus.NewRegistry()
	e := &testExporter{
		memMiB:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED", Help: "MiB"}, []string{"gpu", "UUID", "Hostname", "namespace", "pod", "container"}),
		utilPct: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL", Help: "percent"}, []string{"gpu", "UUID", "Hostname", "namespace", "pod", "container"}),
		latency: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "e2e_latency_seconds", Help: "seconds"}, []string{"namespace"}),
	}
	reg.MustRegister(e.memMiB, e.utilPct, e.latency)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	e.addr = l.Addr().String()
	if err := testCluster.AddScrapeTarget(context.Background(), e.addr); err != nil {
		t.Fatal(err)
	}
	return e
}

func condition(gfr *gpufracv1.GPUFractionRecommendation, typ string) *metav1.Condition {
	if gfr == nil {
		return nil
	}
	return meta.FindStatusCondition(gfr.Status.Conditions, typ)
}

func TestRecommender(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, foundationNS)
	workloads := foundationTrace.Workloads()
	if len(workloads) != 2 {
		t.Fatalf("want 2 synthetic workloads, got %d", len(workloads))
	}
	for _, w := range workloads {
		create(t, gpuDeployment(foundationNS, w.Name, "inference", 1))
	}
	create(t, gpuDeployment(foundationNS, "empty", "inference", 0))
	for _, w := range workloads {
		waitRunning(t, foundationNS, w.Name, 1)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", freePort(t))
	startRecommender(t, "--metric-source=dcgm", "--metrics-bind-address="+strings.TrimSuffix(strings.TrimPrefix(metricsURL, "http://"), "/metrics"))

	alpha, beta := workloads[0].Name, workloads[1].Name
	create(t, autoscaler(foundationNS, alpha, alpha))
	gb := autoscaler(foundationNS, beta, beta)
	gb.Spec.LatencyGuardrail = &gpufracv1.LatencyGuardrail{
		Query:     fmt.Sprintf(`max(e2e_latency_seconds{namespace=%q})`, foundationNS),
		Objective: metav1.Duration{Duration: time.Second},
	}
	create(t, gb)

	t.Run("history bootstrap gives a recommendation equal to an independent computation", func(t *testing.T) {
		for _, w := range workloads {
			var gfr *gpufracv1.GPUFractionRecommendation
			// Each autoscaler the recommender meets in a later cycle than the other
			// reloads the namespace's 72 h history (see the wait below): up to two loads.
			waitFor(t, 3*time.Minute, "recommendation of "+w.Name, func() (bool, error) {
				gfr = recommendation(t, foundationNS, w.Name)
				c := condition(gfr, gpufracv1.ConditionRecommendationProvided)
				return c != nil && c.Status == metav1.ConditionTrue, nil
			})
			checkAgainstIndependent(t, gfr, podsOf(foundationTrace, w.Name))
			if gfr.Status.Attribution != gpufracv1.AttributionKubeStateMetrics {
				t.Errorf("%s: history of replaced pods attributed by %q, want KubeStateMetrics", w.Name, gfr.Status.Attribution)
			}
			if gfr.Status.MatchedPods != 1 {
				t.Errorf("%s: matched pods %d, want 1", w.Name, gfr.Status.MatchedPods)
			}
			if len(gfr.OwnerReferences) != 1 || gfr.OwnerReferences[0].Kind != "GPUFractionAutoscaler" {
				t.Errorf("%s: owner references %+v", w.Name, gfr.OwnerReferences)
			}
		}
	})

	t.Run("per-autoscaler metrics are served on /metrics beside the registry's", func(t *testing.T) {
		// cmd/recommender serves the cycle's per-autoscaler families next to
		// controller-runtime's registry (recommender.WithAutoscalers); one scrape as
		// Prometheus makes it has both, with the values written in the status.
		gfr := recommendation(t, foundationNS, alpha)
		target := gfr.Status.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64()
		var fams map[string]*dto.MetricFamily
		waitFor(t, time.Minute, "per-autoscaler metrics of "+alpha, func() (bool, error) {
			resp, err := http.Get(metricsURL)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			parser := expfmt.NewTextParser(model.UTF8Validation)
			if fams, err = parser.TextToMetricFamilies(resp.Body); err != nil {
				return false, err
			}
			// The cycle publishes its families after it wrote the statuses, so a scrape
			// right after the first subtest may still serve the cycle before beta's
			// first recommendation: wait for both.
			if v := seriesValue(fams, "gpufrac_autoscaler_info", "namespace", foundationNS, "autoscaler", beta); !(v > 0) {
				return false, fmt.Errorf("no gpufrac_autoscaler_info for %s yet", beta)
			}
			return seriesValue(fams, "gpufrac_recommendation_memory_bytes", "autoscaler", alpha, "bound", "target") == target, fmt.Errorf("memory target %v, want %v",
				seriesValue(fams, "gpufrac_recommendation_memory_bytes", "autoscaler", alpha, "bound", "target"), target)
		})
		for _, name := range []string{"gpufrac_autoscaler_info", "gpufrac_autoscaler_gpus_held"} {
			if v := seriesValue(fams, name, "namespace", foundationNS, "autoscaler", beta); !(v > 0) {
				t.Errorf("no %s for %s", name, beta)
			}
		}
		if seriesValue(fams, "gpufrac_autoscaler_pod_info", "autoscaler", alpha, "namespace", foundationNS) != 1 {
			t.Errorf("gpufrac_autoscaler_pod_info of %s's one live pod missing", alpha)
		}
		for _, name := range []string{"gpufrac_recommender_cycle_duration_seconds", "gpufrac_recommender_prometheus_queries_total", "rest_client_requests_total"} {
			if fams[name] == nil {
				t.Errorf("registered family %s missing beside the per-autoscaler ones", name)
			}
		}
	})

	t.Run("NoPodsMatched and ConfigUnsupported", func(t *testing.T) {
		create(t, autoscaler(foundationNS, "empty", "empty"), autoscaler(foundationNS, "missing", "does-not-exist"))
		cm := autoscaler(foundationNS, "configmap", "some-config")
		cm.Spec.TargetRef.APIVersion, cm.Spec.TargetRef.Kind = "v1", "ConfigMap"
		create(t, cm, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: foundationNS, Name: "some-config"}})
		for name, want := range map[string][2]string{
			"empty":     {gpufracv1.ConditionNoPodsMatched, "NoPods"},
			"missing":   {gpufracv1.ConditionConfigUnsupported, "TargetNotFound"},
			"configmap": {gpufracv1.ConditionConfigUnsupported, "TargetUnsupported"},
		} {
			// Within a cycle, but a cycle that meets a new workload ("empty") first
			// loads its namespace's whole history (72 h; at this suite's 5 s interval
			// the compute reads are 51,840 steps per series, about 35 s on the loaded
			// 2-core machine), so the wait covers two such cycles.
			waitFor(t, 2*time.Minute, name+" "+want[0], func() (bool, error) {
				c := condition(recommendation(t, foundationNS, name), want[0])
				return c != nil && c.Status == metav1.ConditionTrue && c.Reason == want[1], nil
			})
		}
	})

	t.Run("deleting the autoscaler deletes its recommendation", func(t *testing.T) {
		g := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: foundationNS, Name: "missing"}}
		if err := testCluster.Client.Delete(ctx, g); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "garbage collection of gfr missing", func() (bool, error) {
			return recommendation(t, foundationNS, "missing") == nil, nil
		})
	})

	t.Run("live samples raise memory; a latency breach stops shrinking", func(t *testing.T) {
		exp := startExporter(t)
		var pods corev1.PodList
		if err := testCluster.Client.List(ctx, &pods, client.InNamespace(foundationNS), client.MatchingLabels{"app": beta}); err != nil || len(pods.Items) != 1 {
			t.Fatalf("live pod of %s: %v %d", beta, err, len(pods.Items))
		}
		before := recommendation(t, foundationNS, beta).Status.ContainerRecommendations[0]
		const liveMiB = 60 * 1024 // above anything in the history
		labels := []string{"0", "GPU-e2e-live", "node-0", foundationNS, pods.Items[0].Name, "inference"}
		exp.memMiB.WithLabelValues(labels...).Set(liveMiB)
		// A dcgm-exporter exports utilisation next to memory. Without it the recommender
		// (deliberately, since the data-integrity conditions) reads a running pod whose
		// compute series stopped as an exporter gap (MetricsUnavailable
		// NoSamplesWhileRunning) and keeps the written recommendation.
		exp.utilPct.WithLabelValues(labels...).Set(20)
		exp.latency.WithLabelValues(foundationNS).Set(2) // objective 1s: breached
		waitFor(t, 90*time.Second, "memory target to follow the live peak", func() (bool, error) {
			r := recommendation(t, foundationNS, beta)
			cr := r.Status.ContainerRecommendations[0]
			if got := cr.Target.Memory.AsApproximateFloat64(); got < liveMiB*(1<<20)*1.15 {
				return false, fmt.Errorf("memory target %s, MetricsUnavailable %+v", cr.Target.Memory, condition(r, gpufracv1.ConditionMetricsUnavailable))
			}
			return true, nil
		})
		waitFor(t, 60*time.Second, "LatencyGuardrailActive", func() (bool, error) {
			c := condition(recommendation(t, foundationNS, beta), gpufracv1.ConditionLatencyGuardrailActive)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "ObjectiveBreached", nil
		})
		after := recommendation(t, foundationNS, beta).Status.ContainerRecommendations[0]
		if after.Target.Compute.Cmp(*before.Target.Compute) <= 0 {
			t.Errorf("compute %s did not grow under a latency breach (was %s)", after.Target.Compute, before.Target.Compute)
		}
		// Memory drops back: the guardrail (and the recent peak) keep the target up.
		exp.memMiB.Reset()
		high := after.Target.Memory.DeepCopy()
		time.Sleep(15 * time.Second) // three cycles
		if got := recommendation(t, foundationNS, beta).Status.ContainerRecommendations[0].Target.Memory; got.Cmp(high) < 0 {
			t.Errorf("memory target shrank from %s to %s while the guardrail was breached", &high, got)
		}
	})

	t.Run("Prometheus outage keeps the last recommendation and sets MetricsUnavailable", func(t *testing.T) {
		// alpha's running pod has no live samples (only its replaced pods' history was
		// backfilled), so since the data-integrity conditions its MetricsUnavailable is
		// True with reason NoSamplesWhileRunning before the outage (deliberate): recovery
		// is the condition going back to what it was, not to False.
		beforeGFR := recommendation(t, foundationNS, alpha)
		before := beforeGFR.Status.ContainerRecommendations
		pre := condition(beforeGFR, gpufracv1.ConditionMetricsUnavailable)
		if pre == nil || pre.Reason == "PrometheusError" {
			t.Fatalf("MetricsUnavailable before the outage: %+v", pre)
		}
		t.Logf("MetricsUnavailable before the outage: %s %s: %s", pre.Status, pre.Reason, pre.Message)
		if err := testCluster.StopPrometheus(); err != nil {
			t.Fatal(err)
		}
		restarted := false
		defer func() {
			if !restarted {
				_ = testCluster.StartPrometheus(ctx)
			}
		}()
		var c *metav1.Condition
		waitFor(t, 60*time.Second, "MetricsUnavailable", func() (bool, error) {
			c = condition(recommendation(t, foundationNS, alpha), gpufracv1.ConditionMetricsUnavailable)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "PrometheusError", nil
		})
		t.Logf("MetricsUnavailable: %s", c.Message)
		now := recommendation(t, foundationNS, alpha).Status.ContainerRecommendations
		if now[0].Target.Memory.Cmp(*before[0].Target.Memory) != 0 || now[0].Target.Compute.Cmp(*before[0].Target.Compute) != 0 {
			t.Errorf("recommendation changed during the outage: %+v → %+v", before[0].Target, now[0].Target)
		}
		if err := testCluster.StartPrometheus(ctx); err != nil {
			t.Fatal(err)
		}
		restarted = true
		waitFor(t, 120*time.Second, "recovery", func() (bool, error) {
			c := condition(recommendation(t, foundationNS, alpha), gpufracv1.ConditionMetricsUnavailable)
			return c != nil && c.Status == pre.Status && c.Reason == pre.Reason, fmt.Errorf("MetricsUnavailable %+v", c)
		})
	})
}

// seriesValue returns the value of the first gauge of family name whose labels include
// the given name/value pairs, or NaN when there is none.
func seriesValue(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return math.NaN()
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && have[labels[i]] == labels[i+1]
		}
		if ok {
			return m.GetGauge().GetValue()
		}
	}
	return math.NaN()
}

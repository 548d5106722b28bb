package recommender

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// collected is the per-autoscaler metrics as a plain collector, the way they were
// gathered through a registry before Autoscalers built their families once per cycle.
type collected []prometheus.Metric

func (collected) Describe(chan<- *prometheus.Desc) {}

func (c collected) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}

// exposition gathers g and encodes it as Prometheus' text format.
func exposition(t *testing.T, g prometheus.Gatherer) (string, []*dto.MetricFamily) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String(), mfs
}

// The families Autoscalers serves are exactly what a registry gathered from the same
// cycle's metrics: names, help, types, labels, values and order; so are they after a
// second cycle that changed some of them; and beside a registry they add to its
// families without changing them.
func TestAutoscalerFamiliesAsRegistry(t *testing.T) {
	var objs []client.Object
	for i := range 3 {
		name := fmt.Sprintf("wl-%d", i)
		objs = append(objs, deployment("ml", name, 2+i)...)
		g := gfa("ml", name, name)
		if i == 1 {
			g.Spec.LatencyGuardrail = &gpufracv1.LatencyGuardrail{Query: "latency_seconds", Objective: metav1.Duration{Duration: time.Second}}
		}
		objs = append(objs, g)
	}
	objs = append(objs, gfa("ml", "lost", "missing")) // a target that does not exist
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Name[len(p.Name)-1] == '0' {
			p.Annotations = map[string]string{gpufracv1.AnnotationApplied: applied(t, "20Gi", "250m")}
		}
	}
	prom := promFor(objs, 15*gib, 0.2)
	h := newHarness(t, objs, prom)
	h.rec.Config.Policy.GPUMemoryBytes = 80 * gib
	h.rec.exportConsts = true
	for cycle := range 2 {
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		old := prometheus.NewPedanticRegistry()
		old.MustRegister(collected(h.rec.cur.exported.consts))
		want, wantFams := exposition(t, old)
		got, _ := exposition(t, Autoscalers)
		if got != want {
			t.Fatalf("cycle %d: Autoscalers serve\n%s\nwant, as a registry gathered them,\n%s", cycle, got, want)
		}
		names := map[string]bool{}
		for _, mf := range wantFams {
			names[mf.GetName()] = true
		}
		for _, n := range []string{"gpufrac_autoscaler_info", "gpufrac_autoscaler_pod_info", "gpufrac_recommendation_memory_bytes",
			"gpufrac_recommendation_compute_ratio", "gpufrac_autoscaler_condition", "gpufrac_autoscaler_guardrail_objective_seconds",
			"gpufrac_pod_gpu_memory_allocated_bytes", "gpufrac_pod_gpu_compute_allocated_ratio", "gpufrac_autoscaler_gpus_allocated"} {
			if !names[n] {
				t.Errorf("cycle %d: no %s in the fixture's metrics; the comparison does not cover it", cycle, n)
			}
		}
		if n, err := testutil.GatherAndCount(Autoscalers, "gpufrac_autoscaler_pod_info"); err != nil || n != 2+3+4 {
			t.Errorf("cycle %d: %d pod_info series (%v), want 9", cycle, n, err)
		}
		h.now = h.now.Add(time.Minute)
		prom.mem[firstPod(objs)] = 30 * gib // a change for the next cycle
	}

	// Beside a registry: its own families unchanged, the per-autoscaler ones added.
	base := prometheus.NewPedanticRegistry()
	base.MustRegister(cycleDuration)
	alone, _ := exposition(t, base)
	autoscalers, _ := exposition(t, Autoscalers)
	both, mfs := exposition(t, WithAutoscalers(base))
	if len(both) != len(alone)+len(autoscalers) || !bytes.Contains([]byte(both), []byte(alone)) {
		t.Errorf("beside a registry: %d bytes, want the registry's %d and the autoscalers' %d", len(both), len(alone), len(autoscalers))
	}
	for i := 1; i < len(mfs); i++ {
		if mfs[i-1].GetName() >= mfs[i].GetName() {
			t.Errorf("families not sorted by name: %s before %s", mfs[i-1].GetName(), mfs[i].GetName())
		}
	}
}

// A family registered under a per-autoscaler name is an error of Gather, and left out.
func TestWithAutoscalersNameClash(t *testing.T) {
	objs := append(deployment("ml", "sd", 1), gfa("ml", "sd", "sd"))
	h := newHarness(t, objs, promFor(objs, 15*gib, 0.2))
	if err := h.rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpufrac_autoscaler_gpus_held", Help: "a clash"}))
	mfs, err := WithAutoscalers(reg).Gather()
	if err == nil {
		t.Error("no error for a registered family named like a per-autoscaler one")
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpufrac_autoscaler_gpus_held" && mf.GetHelp() == "a clash" {
			t.Error("the registered family was served beside the per-autoscaler one")
		}
	}
}

// A second metric with the same labels in a family is dropped, not served twice.
func TestAutoscalerFamiliesDropDuplicates(t *testing.T) {
	s := &snapshot{}
	s.gauge(descHeld, 2, "ml", "sd")
	s.gauge(descHeld, 3, "ml", "sd")
	s.gauge(descHeld, 1, "ml", "a")
	got, _ := exposition(t, published(s))
	want := `# HELP gpufrac_autoscaler_gpus_held Whole GPUs the workload's live pods hold at one per pod.
# TYPE gpufrac_autoscaler_gpus_held gauge
gpufrac_autoscaler_gpus_held{autoscaler="a",namespace="ml"} 1
gpufrac_autoscaler_gpus_held{autoscaler="sd",namespace="ml"} 2
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Equal label pairs are built once per cycle and shared by the metrics that carry them
// (in different families too), and the snapshot holds nothing once published.
func TestAutoscalerFamiliesShareLabelPairs(t *testing.T) {
	s := &snapshot{}
	s.gauge(descHeld, 2, "ml", "a")
	s.gauge(descConfidence, 0.5, "ml", "a")
	s.gauge(descHeld, 1, "ml", "b")
	a := published(s)
	if s.byDesc != nil || s.pairs != nil {
		t.Error("the snapshot still holds its metrics after they were published")
	}
	mfs, _ := a.Gather()
	shared := map[string]*dto.LabelPair{}
	labels := 0
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, p := range m.Label {
				labels++
				k := p.GetName() + "=" + p.GetValue()
				if q := shared[k]; q != nil && q != p {
					t.Errorf("label pair %s built twice", k)
				}
				shared[k] = p
			}
		}
	}
	if labels != 6 || len(shared) != 3 {
		t.Errorf("%d labels in %d distinct pairs, want 6 in 3 (namespace=ml, autoscaler=a, autoscaler=b)", labels, len(shared))
	}
}

// published is an exporter that published s.
func published(s *snapshot) *autoscalerMetrics {
	a := &autoscalerMetrics{}
	a.set(s)
	return a
}

func firstPod(objs []client.Object) string {
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			return p.Name
		}
	}
	return ""
}

// A pod whose init container peaked at 30000 MiB before its main container's 20000 MiB
// (the init container ends before the main one starts) peaks at 30000 MiB, as its
// memory target adds up (gpufracv1.PodTotal): gpufrac_autoscaler_gpu_memory_peak_bytes
// is pods × 30000 MiB, not pods × 50000 MiB. A native sidecar's peak adds to the main
// container's. A recommendation without an observed peak exports no series.
func TestPeakMemoryAddsUpAsThePod(t *testing.T) {
	mib := func(v int64) *resource.Quantity { return resource.NewQuantity(v<<20, resource.BinarySI) }
	for _, tc := range []struct {
		name string
		recs []gpufracv1.ContainerRecommendation
		want float64 // MiB per pod; 0: no series
	}{
		{"init before main", []gpufracv1.ContainerRecommendation{
			{ContainerName: "fetch", ContainerType: gpufracv1.ContainerTypeInit, ObservedPeakMemory: mib(30000)},
			{ContainerName: "main", ContainerType: gpufracv1.ContainerTypeRegular, ObservedPeakMemory: mib(20000)},
		}, 30000},
		{"sidecar beside main", []gpufracv1.ContainerRecommendation{
			{ContainerName: "proxy", ContainerType: gpufracv1.ContainerTypeSidecar, ObservedPeakMemory: mib(4000)},
			{ContainerName: "main", ContainerType: gpufracv1.ContainerTypeRegular, ObservedPeakMemory: mib(20000)},
		}, 24000},
		{"no peak", []gpufracv1.ContainerRecommendation{{ContainerName: "main"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &snapshot{}
			s.add(gfa("ml", "sd", "sd"), &gpufracv1.GPUFractionRecommendationStatus{ContainerRecommendations: tc.recs}, 3, 0, 80*gib)
			ms := s.byDesc[descPeakMemory]
			switch {
			case tc.want == 0 && len(ms) != 0:
				t.Errorf("peak series %v, want none", ms[0].GetGauge().GetValue())
			case tc.want != 0 && len(ms) != 1:
				t.Errorf("%d peak series, want 1", len(ms))
			case tc.want != 0 && ms[0].GetGauge().GetValue() != 3*tc.want*(1<<20):
				t.Errorf("peak %v MiB, want 3 pods × %v MiB", ms[0].GetGauge().GetValue()/(1<<20), tc.want)
			}
		})
	}
}

package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/trace"
)

// traceProm is a fake Prometheus HTTP API that answers the recommender's queries from a
// trace's raw samples, as Prometheus would from scraped dcgm-exporter series: the memory
// query is the peak of the samples in (t-window, t], the compute query their mean (the
// approach of recommender_test.go's fakeProm, with values from the trace instead of
// constants).
type traceProm struct {
	pods []trace.Pod
}

var windowRE = regexp.MustCompile(`\[(\d+)s\]`)

func (f *traceProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	q := r.Form.Get("query")
	isRange := strings.HasSuffix(r.URL.Path, "query_range")
	var times []int64 // Unix ms
	if isRange {
		start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
		end, _ := strconv.ParseFloat(r.Form.Get("end"), 64)
		step, _ := strconv.ParseFloat(r.Form.Get("step"), 64)
		for i := 0; ; i++ {
			t := start + float64(i)*step
			if t > end+1e-6 {
				break
			}
			times = append(times, int64(math.Round(t*1000)))
		}
	} else {
		ts, _ := strconv.ParseFloat(r.Form.Get("time"), 64)
		times = []int64{int64(math.Round(ts * 1000))}
	}
	var window int64
	if m := windowRE.FindStringSubmatch(q); m != nil {
		s, _ := strconv.ParseInt(m[1], 10, 64)
		window = s * 1000
	}
	var agg func(p *trace.Pod, from, to int64) (float64, bool)
	source := ""
	switch {
	case strings.Contains(q, "kube_pod_owner"), strings.Contains(q, "kube_replicaset_owner"):
		writeProm(w, "vector", []any{})
		return
	case strings.Contains(q, "stddev_over_time") && strings.Contains(q, metrics.DCGMFBUsed):
		// metrics.FlatQuery: 0 where every memory sample of the window is equal.
		agg = func(p *trace.Pod, from, to int64) (float64, bool) {
			lo, hi, ok := math.Inf(1), math.Inf(-1), false
			for _, pt := range p.Memory {
				if ms := pt.T.UnixMilli(); ms > from && ms <= to {
					lo, hi, ok = math.Min(lo, pt.V), math.Max(hi, pt.V), true
				}
			}
			return hi - lo, ok
		}
	case strings.Contains(q, metrics.DCGMFBUsed):
		agg = func(p *trace.Pod, from, to int64) (float64, bool) {
			v, ok := math.Inf(-1), false
			for _, pt := range p.Memory {
				if ms := pt.T.UnixMilli(); ms > from && ms <= to {
					v, ok = math.Max(v, pt.V), true
				}
			}
			return v, ok
		}
	case strings.Contains(q, "label_replace"):
		source = metrics.DCGMGPUUtil
		agg = func(p *trace.Pod, from, to int64) (float64, bool) {
			sum, n := 0.0, 0
			for _, pt := range p.Compute {
				if ms := pt.T.UnixMilli(); ms > from && ms <= to {
					sum += pt.V
					n++
				}
			}
			return sum / float64(n), n > 0
		}
	default:
		writeProm(w, "vector", []any{})
		return
	}
	result := []any{}
	for i := range f.pods {
		p := &f.pods[i]
		metric := map[string]string{"namespace": p.Namespace, "pod": p.Pod, "container": p.Container}
		if source != "" {
			metric[metrics.SourceLabel] = source
		}
		var pts []any
		for _, t := range times {
			if v, ok := agg(p, t-window, t); ok {
				pts = append(pts, []any{float64(t) / 1000, strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		if isRange {
			result = append(result, map[string]any{"metric": metric, "values": pts})
		} else {
			result = append(result, map[string]any{"metric": metric, "value": pts[0]})
		}
	}
	typ := "vector"
	if isRange {
		typ = "matrix"
	}
	writeProm(w, typ, result)
}

func writeProm(w http.ResponseWriter, typ string, result any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": typ, "result": result}})
}

// clusterObjects returns, per workload of the trace, a Deployment, its ReplicaSet, its
// pods (owned through the ReplicaSet) and a GPUFractionAutoscaler with the spec the
// simulator uses.
func clusterObjects(tr *trace.Trace) []client.Object {
	var objs []client.Object
	for _, w := range tr.Workloads() {
		p0 := tr.Pods[w.Pods[0]]
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, UID: types.UID("d-" + w.Name)}}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: p0.ReplicaSet, UID: types.UID("rs-" + w.Name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: w.Name, UID: d.UID, Controller: ptr.To(true)}}}}
		objs = append(objs, d, rs)
		for _, i := range w.Pods {
			p := tr.Pods[i]
			objs = append(objs, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Pod,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
				Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: p.Container}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning},
			})
		}
		gfa := &gpufracv1.GPUFractionAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, UID: types.UID("gfa-" + w.Name), Generation: 1},
			Spec:       AutoscalerSpec(workloadKey(w), nil, ""),
		}
		objs = append(objs, gfa)
	}
	return objs
}

func workloadKey(w trace.Workload) history.WorkloadKey {
	return history.WorkloadKey{Namespace: w.Namespace, Kind: "Deployment", Name: w.Name}
}

// TestSameRecommendationAsRecommender replays a synthetic trace sampled every 57 s (as
// GenTD26) through the simulator's sizer and, cycle by cycle, through the live
// recommender's RunOnce reading a fake Prometheus that serves the same samples; the
// container recommendations must be equal at every cycle: with the recommender running
// from the first sample, and installed 95 minutes in (gpufrac simulate --warm-up), when
// its first cycle bootstraps the history from Prometheus.
//
// With gaps (holes in some pods' samples while the pods run: one pod of a workload
// while its sibling reports, every pod of another workload), the recommender raises
// NoSamplesWhileRunning and keeps its recommendation: the simulator must keep the same
// one, and hold the updater's shrinks (contract.IncompleteData) at the same cycles.
func TestSameRecommendationAsRecommender(t *testing.T) {
	for _, boot := range []int{0, 95} {
		for _, gaps := range []bool{false, true} {
			t.Run(fmt.Sprintf("installed at step %d, gaps %v", boot, gaps), func(t *testing.T) { sameRecommendations(t, boot, gaps, 57*time.Second) })
		}
	}
	// Samples 150 s apart, slower than the cycle: a gap needs 3 sample spacings
	// (recommender.EmptyCyclesFor), not 3 cycles. Installed at step 110 too, after
	// workload 2's memory came back.
	for _, boot := range []int{0, 110} {
		for _, gaps := range []bool{false, true} {
			t.Run(fmt.Sprintf("samples every 150s, installed at step %d, gaps %v", boot, gaps), func(t *testing.T) { sameRecommendations(t, boot, gaps, 150*time.Second) })
		}
	}
}

// TestSameLevelWhateverThePodOrder: two pods of a workload whose memory rises at the same
// minute, 90 minutes in, the first listed in the trace by 7 % (a new level,
// history.LevelNoise: the young margin starts again) and the other by 4 % (not one);
// fed the 4 % first, the 7 % is no new level either. The live recommender feeds its
// series sorted by container ID (metrics.Reader), and a history load's running
// interval after every pod's whole intervals (a query of its own), so the simulator
// must feed in that order, not the trace's. Before, the simulator fed the trace's
// order: 30 minutes after the rise, a young margin of 1 where the live recommender's
// was 1/2 (a memory target a third higher), installed at step 0, and likewise after a
// history load that read the rise in its running interval (installed at step 100);
// installed at step 120 (the rise in a whole interval) is a neighbour.
func TestSameLevelWhateverThePodOrder(t *testing.T) {
	const gb = 1 << 30
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	pod := func(name string, before, after float64) trace.Pod {
		p := trace.Pod{Namespace: "lvl", Workload: "lvl", ReplicaSet: "lvl-5f7c9", Pod: "lvl-5f7c9-" + name, Container: "main"}
		for m := 1; m <= 5*60; m++ {
			at, v := start.Add(time.Duration(m)*time.Minute), before
			if m > 90 {
				v = after
			}
			p.Memory = append(p.Memory, trace.Point{T: at, V: v + float64(m%7)*1e6})
			p.Compute = append(p.Compute, trace.Point{T: at, V: 0.3 + 0.01*float64(m%5)})
		}
		return p
	}
	tr := trace.Trace{Pods: []trace.Pod{pod("zzzzz", 20*gb, 21.4*gb), pod("aaaaa", 19.6*gb, 20.8*gb)}}
	for _, boot := range []int{0, 100, 120} {
		t.Run(fmt.Sprintf("installed at step %d", boot), func(t *testing.T) {
			if held := sameAsRecommender(t, &tr, boot); held > 0 {
				t.Errorf("%d cycles with incomplete data, want none", held)
			}
		})
	}
}

// hole removes pod p's samples in (start + from, start + to] of its samples.
func hole(p *trace.Pod, from, to time.Duration) {
	t0 := p.Memory[0].T
	out := func(pts []trace.Point) []trace.Point {
		var kept []trace.Point
		for _, pt := range pts {
			if d := pt.T.Sub(t0); d <= from || d > to {
				kept = append(kept, pt)
			}
		}
		return kept
	}
	p.Memory, p.Compute = out(p.Memory), out(p.Compute)
}

func sameRecommendations(t *testing.T, boot int, gaps bool, every time.Duration) {
	tr := trace.Synthesize(trace.SynthOptions{Workloads: 3, PodsPerWorkload: 2, Duration: 150 * time.Minute, Step: every,
		Seed: 7, End: time.Date(2026, 3, 1, 2, 30, 0, 0, time.UTC)})
	// Idle stretches with flat memory, which the recommender drops as stale
	// (metrics.StaleMemory): a model held idle across an hour boundary, one idle for a
	// whole hour at a level above its busy samples, and one flat but busy (kept).
	flatten(&tr.Pods[0], 20*time.Minute, 95*time.Minute, 30<<30, true)
	flatten(&tr.Pods[2], 60*time.Minute, 125*time.Minute, 0, true)
	flatten(&tr.Pods[4], 40*time.Minute, 100*time.Minute, 0, false)
	if gaps {
		hole(&tr.Pods[1], 40*time.Minute, 80*time.Minute)   // one pod while its sibling reports
		hole(&tr.Pods[2], 60*time.Minute, 75*time.Minute)   // every pod of workload 1
		hole(&tr.Pods[3], 60*time.Minute, 75*time.Minute)   //
		hole(&tr.Pods[5], 110*time.Minute, 114*time.Minute) // a short one
		for _, i := range []int{4, 5} {
			compute := tr.Pods[i].Compute // workload 2's memory gone while its compute reports
			hole(&tr.Pods[i], 50*time.Minute, 100*time.Minute)
			tr.Pods[i].Compute = compute
		}
	}
	held := sameAsRecommender(t, &tr, boot)
	// Installed after the last long gap (100 minutes in; steps of a minute), none is held.
	if want := gaps && boot < 100; want != (held > 0) {
		t.Errorf("%d workload-cycles with incomplete data, want some only with gaps before the recommender's install", held)
	}
}

// sameAsRecommender replays trace tr, sampled on a minute grid, through the simulator's
// sizer and through the live recommender installed at step boot, and fails at the first
// cycle whose recommendations, or whose incomplete data (contract.IncompleteData), differ.
// It returns how many workload-cycles had incomplete data.
func sameAsRecommender(t *testing.T, tr *trace.Trace, boot int) (held int) {
	t.Helper()
	cfg := recommender.Config{HistoryLength: 48 * time.Hour}

	// The live recommender.
	srv := httptest.NewServer(&traceProm{pods: tr.Pods})
	t.Cleanup(srv.Close)
	pc, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := gpufracv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(clusterObjects(tr)...).
		WithStatusSubresource(&gpufracv1.GPUFractionAutoscaler{}, &gpufracv1.GPUFractionRecommendation{}).Build()
	rec := recommender.New(c, &metrics.Reader{API: promv1.NewAPI(pc), Labels: metrics.DefaultLabels}, metrics.DCGM{}, cfg)
	var now time.Time
	rec.Now = func() time.Time { return now }

	// The simulator's path.
	o, err := Options{GPUMemoryBytes: 80 * gib, HistoryLength: cfg.HistoryLength, Recommender: cfg.Config}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	tl, err := newTimeline(tr, o.Interval, o.Lookback)
	if err != nil {
		t.Fatal(err)
	}
	sz := newGPUFracSizer(tl, o.Recommender, o.HistoryLength, nil, "", o.GPUMemoryBytes, boot)

	ctx := context.Background()
	var alive []int
	compared := 0
	for k := 0; k < tl.steps; k++ {
		alive = alive[:0]
		for i := range tl.runs {
			if tl.runs[i].start <= k && tl.runs[i].end >= k {
				alive = append(alive, i)
			}
		}
		now = tl.stepEnd(k)
		sz.feed(tl, alive, k)
		sz.decide(tl, now)
		if k < boot {
			continue
		}
		if err := rec.RunOnce(ctx); err != nil {
			t.Fatalf("cycle at %s: %v", now, err)
		}
		for w, wl := range tl.workloads {
			var gfr gpufracv1.GPUFractionRecommendation
			if err := c.Get(ctx, types.NamespacedName{Namespace: wl.key.Namespace, Name: wl.key.Name}, &gfr); err != nil {
				t.Fatal(err)
			}
			live, sim := gfr.Status.ContainerRecommendations, sz.prev[w]
			if !equality.Semantic.DeepEqual(live, sim) {
				t.Fatalf("step %d (%s), workload %s: recommendations differ\nlive:      %s\nsimulator: %s", k, now, wl.key, show(live), show(sim))
			}
			if live, sim := contract.IncompleteData(&gfr), sz.incompleteData(w); (live == "") != (sim == "") {
				t.Fatalf("step %d (%s), workload %s: incomplete data differ\nlive:      %q\nsimulator: %q", k, now, wl.key, live, sim)
			}
			if sz.incompleteData(w) != "" {
				held++
			}
			if len(sim) > 0 {
				compared++
			}
		}
	}
	if compared < len(tl.workloads)*(tl.steps-boot-2) {
		t.Errorf("compared %d recommendations, want about %d", compared, len(tl.workloads)*(tl.steps-boot))
	}
	return held
}

// flatten holds pod p's memory flat over (start + from, start + to] of its samples: at
// level bytes (0: the last sample before the stretch), with compute 0 when idle.
func flatten(p *trace.Pod, from, to time.Duration, level float64, idle bool) {
	t0 := p.Memory[0].T
	for i, pt := range p.Memory {
		if d := pt.T.Sub(t0); d > from && d <= to {
			if level == 0 {
				level = p.Memory[i-1].V
			}
			p.Memory[i].V = level
		}
	}
	for i, pt := range p.Compute {
		if d := pt.T.Sub(t0); d > from && d <= to && idle {
			p.Compute[i].V = 0
		}
	}
}

func show(recs []gpufracv1.ContainerRecommendation) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "[%s target %v/%v lower %v/%v upper %v/%v conf %d mode %s] ", r.ContainerName,
			r.Target.Memory, r.Target.Compute, r.LowerBound.Memory, r.LowerBound.Compute, r.UpperBound.Memory, r.UpperBound.Compute,
			r.ConfidencePercent, r.SharingMode)
	}
	return b.String()
}

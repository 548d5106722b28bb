package recommender

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
	promapi "github.com/gpufrac/gpufrac/prom"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
	"github.com/gpufrac/gpufrac/workload"
)

// The recommender tests' fixtures: a fake Prometheus of constant per-pod values
// (fakeProm, harness) and the real PromQL engine over published series (promtest,
// engineHarness), the fake API server, builders of workloads and autoscalers, and
// condition checks.

// gib is one GiB in bytes.
const gib = float64(1 << 30)

// fakeProm answers the recommender's queries from per-pod constant values: memory bytes
// and compute ratio for every pod it knows, at every requested timestamp.
type fakeProm struct {
	mu      sync.Mutex
	pods    []metrics.ContainerID
	mem     map[string]float64 // by pod
	cpu     map[string]float64
	latency *float64 // guardrail query result, seconds
	fail    atomic.Bool
	queries atomic.Int64
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.queries.Add(1)
	if f.fail.Load() {
		http.Error(w, `{"status":"error","errorType":"internal","error":"injected failure"}`, http.StatusInternalServerError)
		return
	}
	_ = r.ParseForm()
	q := r.Form.Get("query")
	var times []float64
	isRange := strings.HasSuffix(r.URL.Path, "query_range")
	if isRange {
		var start, end, step float64
		fmt.Sscan(r.Form.Get("start"), &start)
		fmt.Sscan(r.Form.Get("end"), &end)
		fmt.Sscan(r.Form.Get("step"), &step)
		for t := start; t <= end+1e-9; t += step {
			times = append(times, t)
		}
	} else {
		var ts float64
		fmt.Sscan(r.Form.Get("time"), &ts)
		times = []float64{ts}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasPrefix(q, "max(label_replace(timestamp(") { // metrics.NewestSampleQuery
		// Its values are there at every timestamp: the newest sample is at the
		// evaluation time.
		writeResult(w, "vector", []any{map[string]any{"metric": map[string]string{}, "value": []any{times[0], fmt.Sprint(times[0])}}})
		return
	}
	var values map[string]float64
	source := ""
	switch {
	case strings.Contains(q, "kube_pod_owner"), strings.Contains(q, "kube_replicaset_owner"), strings.HasPrefix(q, "count("),
		strings.Contains(q, "kube_pod_created"), strings.Contains(q, "kube_pod_completion_time"),
		strings.Contains(q, "changes((timestamp("),                     // impossible-sample counts: none here
		strings.HasPrefix(q, "sum(label_replace(sum(count_over_time("): // samples without a pod label: none here
		values = nil
	case strings.Contains(q, metrics.DCGMFBUsed):
		values = f.mem
	case strings.Contains(q, "label_replace"):
		values, source = f.cpu, metrics.DCGMGPUUtil
	default:
		if f.latency == nil {
			writeResult(w, "vector", []any{})
			return
		}
		writeResult(w, "scalar", []any{times[0], fmt.Sprint(*f.latency)})
		return
	}
	// Like Prometheus, answer only for the namespaces the query selects.
	var nsRe *regexp.Regexp
	if i := strings.Index(q, `namespace=~"`); i >= 0 {
		if re, err := strconv.QuotedPrefix(q[i+len(`namespace=~`):]); err == nil {
			if re, err = strconv.Unquote(re); err == nil {
				nsRe = regexp.MustCompile("^(?:" + re + ")$")
			}
		}
	}
	var result []any
	for _, id := range f.pods {
		v, ok := values[id.Pod]
		if !ok || (nsRe != nil && !nsRe.MatchString(id.Namespace)) {
			continue
		}
		metric := map[string]string{"namespace": id.Namespace, "pod": id.Pod, "container": id.Container}
		if source != "" {
			metric[metrics.SourceLabel] = source
		}
		if isRange {
			var pts []any
			for _, t := range times {
				pts = append(pts, []any{t, fmt.Sprint(v)})
			}
			result = append(result, map[string]any{"metric": metric, "values": pts})
		} else {
			result = append(result, map[string]any{"metric": metric, "value": []any{times[0], fmt.Sprint(v)}})
		}
	}
	if result == nil {
		result = []any{}
	}
	typ := "vector"
	if isRange {
		typ = "matrix"
	}
	writeResult(w, typ, result)
}

// promFor returns a fake Prometheus reporting every pod of objs at constant memory
// (bytes) and compute (ratio).
func promFor(objs []client.Object, memBytes, compute float64) *fakeProm {
	prom := &fakeProm{mem: map[string]float64{}, cpu: map[string]float64{}}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			prom.pods = append(prom.pods, metrics.ContainerID{Namespace: p.Namespace, Pod: p.Name, Container: "main"})
			prom.mem[p.Name], prom.cpu[p.Name] = memBytes, compute
		}
	}
	return prom
}

func writeResult(w http.ResponseWriter, typ string, result any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": typ, "result": result}})
}

// deployment returns a Deployment, its ReplicaSet and n pods owned through it.
func deployment(ns, name string, n int) []client.Object {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-7d9f8b6c5", UID: types.UID(ns + "-" + name + "-rs"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: d.UID, Controller: ptr.To(true)}}}}
	objs := []client.Object{d, rs}
	for i := 0; i < n; i++ {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%s-%05d", rs.Name, "x", i),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	return objs
}

func gfa(ns, name, target string) *gpufracv1.GPUFractionAutoscaler {
	return &gpufracv1.GPUFractionAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("gfa-" + ns + "-" + name), Generation: 1},
		Spec:       gpufracv1.GPUFractionAutoscalerSpec{TargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target}},
	}
}

// singlePodWorkloads returns, for each name, a Deployment with one pod and an autoscaler
// of the same name that targets it: every Deployment's objects first, then the
// autoscalers, in the order of names.
func singlePodWorkloads(ns string, names ...string) []client.Object {
	var objs []client.Object
	for _, n := range names {
		objs = append(objs, deployment(ns, n, 1)...)
	}
	for _, n := range names {
		objs = append(objs, gfa(ns, n, n))
	}
	return objs
}

type harness struct {
	rec  *Recommender
	c    client.Client
	prom *fakeProm
	now  time.Time
}

// promReader serves prom over HTTP for the test's duration and returns a Reader of it
// with the default labels.
func promReader(t testing.TB, prom http.Handler) *metrics.Reader {
	srv := httptest.NewServer(prom)
	t.Cleanup(srv.Close)
	pc, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return &metrics.Reader{API: promapi.NewAPI(pc, nil), Labels: metrics.DefaultLabels}
}

func newHarness(t testing.TB, objs []client.Object, prom *fakeProm) *harness {
	c := fakeClient(objs, slimPods)
	h := &harness{c: c, prom: prom, now: time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)}
	h.rec = New(c, promReader(t, prom), metrics.DCGM{}, Config{HistoryLength: 48 * time.Hour})
	h.rec.Now = func() time.Time { return h.now }
	return h
}

func (h *harness) gfr(t testing.TB, ns, name string) *gpufracv1.GPUFractionRecommendation {
	var r gpufracv1.GPUFractionRecommendation
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &r); err != nil {
		t.Fatalf("get gfr %s/%s: %v", ns, name, err)
	}
	return &r
}

func create(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeClient is the recommender tests' API server: it holds objs, serves the
// autoscaler and recommendation status subresources, and calls funcs (slimPods, or a
// test's failure injection) around its methods.
func fakeClient(objs []client.Object, funcs interceptor.Funcs) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme.MustNew()).WithObjects(objs...).
		WithStatusSubresource(&gpufracv1.GPUFractionAutoscaler{}, &gpufracv1.GPUFractionRecommendation{}).
		WithInterceptorFuncs(funcs).Build()
}

// slimPods makes the test clients list pods as the recommender's cache holds them,
// through workload.SlimPod (cmd/recommender), so every test that lists pods also
// checks that the transform keeps what the recommender reads.
var slimPods = interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.List(ctx, list, opts...); err != nil {
		return err
	}
	if pods, ok := list.(*corev1.PodList); ok {
		for i := range pods.Items {
			slim, _ := workload.SlimPod(&pods.Items[i])
			pods.Items[i] = *slim.(*corev1.Pod)
		}
	}
	return nil
}}

// engineHarness runs the recommender against the real PromQL engine (promtest) over
// samples written with the exporters' published names, labels and units.
type engineHarness struct {
	rec  *Recommender
	c    client.Client
	prom *promtest.Server
	now  time.Time
}

// productAPI is the API the recommender binary reads prom with (prom.NewAPI: one-pass
// decoding, raw samples through the remote read API).
func productAPI(t testing.TB, prom *promtest.Server) promv1.API {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	return promapi.NewAPI(c, nil)
}

func newEngineHarness(t testing.TB, objs []client.Object, src metrics.Source) *engineHarness {
	prom := promtest.New(t)
	c := fakeClient(objs, slimPods)
	h := &engineHarness{c: c, prom: prom, now: time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)}
	h.rec = New(c, &metrics.Reader{API: productAPI(t, prom), Labels: metrics.DefaultLabels}, src, Config{HistoryLength: 48 * time.Hour})
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

// condition returns the condition typ of st, nil when st has none.
func condition(st gpufracv1.GPUFractionRecommendationStatus, typ string) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, typ)
}

// isTrue reports whether c is present with status True.
func isTrue(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }

// isFalse reports whether c is present with status False.
func isFalse(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionFalse }

// dropped is gpufrac_recommender_samples_dropped_total of signal and reason.
func dropped(signal metrics.Signal, reason string) float64 {
	return testutil.ToFloat64(metrics.SamplesDropped.WithLabelValues(string(signal), reason))
}

// clamped is the count of signal's samples clamped as a MIG instance's overshoot.
func clamped(signal metrics.Signal) float64 {
	return testutil.ToFloat64(metrics.SamplesClamped.WithLabelValues(string(signal), metrics.ClampMIGOvershoot))
}

// incomplete is the count of incomplete answers for reason.
func incomplete(reason string) float64 {
	return testutil.ToFloat64(metrics.Incomplete.WithLabelValues(reason))
}

// addAgent writes n samples every 30 s ending at end of gpufrac's agent for pod on the
// GPU uuid: memory in bytes and SM utilisation as a ratio, per process.
func addAgent(t testing.TB, prom *promtest.Server, p *corev1.Pod, uuid string, end time.Time, n int, memMiB, sm float64) {
	start := end.Add(-time.Duration(n-1) * 30 * time.Second)
	lbl := func(metric string) map[string]string {
		return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "container": "main",
			"UUID": uuid, "gpu": "0", "node": "node-1", "instance": "10.0.0.9:9400"}
	}
	prom.Add(t, lbl(metrics.Agent.Fields(metrics.SignalMemory)[0].Metric), start, 30*time.Second, promtest.Repeat(memMiB*(1<<20), n)...)
	prom.Add(t, lbl(metrics.Agent.Fields(metrics.SignalCompute)[0].Metric), start, 30*time.Second, promtest.Repeat(sm, n)...)
}

// addAgentDevice writes the agent's device series of a GPU it watches: n samples every
// 30s from start.
func addAgentDevice(t testing.TB, prom *promtest.Server, uuid string, start time.Time, n int) {
	prom.Add(t, map[string]string{"__name__": metrics.AgentDeviceMemory, "UUID": uuid, "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3",
		"instance": "10.0.0.7:9410", "job": "gpufrac-agent"}, start, 30*time.Second, promtest.Repeat(20*gib, n)...)
}

// newEngineRecommender returns a recommender with --metric-source auto over prom, and
// its own API objects.
func newEngineRecommender(t testing.TB, objs []client.Object, prom *promtest.Server, cfg Config) (*Recommender, client.Client) {
	var copies []client.Object
	for _, o := range objs {
		copies = append(copies, o.DeepCopyObject().(client.Object))
	}
	h := newEngineHarness(t, copies, nil)
	r := New(h.c, &metrics.Reader{API: productAPI(t, prom), Labels: metrics.DefaultLabels}, nil, cfg)
	return r, h.c
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"gonum.org/v1/gonum/stat"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
	promapi "github.com/gpufrac/gpufrac/prom"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/trace"
)

// bootstrapRun is one history bootstrap of the recommender against the real Prometheus.
type bootstrapRun struct {
	wall, promCPU, selfCPU float64 // seconds
	queries                float64
	targets                map[string]float64 // memory target (bytes) per autoscaler/container
	// compute and computeReq: the compute target and the computeRequest (share of one
	// GPU) per autoscaler/container, where set.
	compute, computeReq map[string]float64
	// byKind is the recommender's wait on each kind of query (queryKind): count and
	// seconds, from its side (all chunks, Prometheus' queueing included).
	byKind map[string]*kindTime
}

// kindTime is the queries of one kind and the seconds the recommender waited on them.
type kindTime struct {
	n       int
	seconds float64
}

// timedAPI is a Prometheus API client that adds up the time of each kind of query.
type timedAPI struct {
	promv1.API
	mu     sync.Mutex
	byKind map[string]*kindTime
}

func (a *timedAPI) add(query string, began time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.byKind[queryKind(query)]
	if k == nil {
		k = &kindTime{}
		a.byKind[queryKind(query)] = k
	}
	k.n++
	k.seconds += time.Since(began).Seconds()
}

func (a *timedAPI) Query(ctx context.Context, query string, ts time.Time, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	defer a.add(query, time.Now())
	return a.API.Query(ctx, query, ts, opts...)
}

func (a *timedAPI) QueryRange(ctx context.Context, query string, r promv1.Range, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	defer a.add(query, time.Now())
	return a.API.QueryRange(ctx, query, r, opts...)
}

// Series times the series API's requests (metrics.Reader.SharedDevices) as
// seriesKind.
func (a *timedAPI) Series(ctx context.Context, matches []string, start, end time.Time, opts ...promv1.Option) ([]model.LabelSet, promv1.Warnings, promv1.Infos, error) {
	defer a.add(seriesKind, time.Now())
	return a.API.Series(ctx, matches, start, end, opts...)
}

// ReadRaw is the API's metrics.RawReader (Prometheus' remote read), timed as
// remoteReadKind; with -remote-read=false it answers promapi.ErrRemoteReadUnsupported,
// so the recommender reads the same samples through the query API.
func (a *timedAPI) ReadRaw(ctx context.Context, selector string, from, to time.Time) (model.Matrix, error) {
	rr, ok := a.API.(metrics.RawReader)
	if !ok || !remoteRead {
		return nil, promapi.ErrRemoteReadUnsupported
	}
	kind := remoteReadKind
	if strings.HasPrefix(selector, metrics.DCGMFBUsed+"{") {
		kind = remoteReadMemoryKind
	}
	defer a.add(kind, time.Now())
	return rr.ReadRaw(ctx, selector, from, to)
}

// remoteReadKind and remoteReadMemoryKind are the kinds of the reads through
// Prometheus' remote read API.
const (
	remoteReadKind       = "compute, raw (remote read)"
	remoteReadMemoryKind = "memory peaks, raw samples (remote read)"
	seriesKind           = "devices shared by pods (series index)"
)

// queryKinds name the recommender's queries by a text each holds (or, for prefix,
// starts with), the first that matches (the dcgm source's).
var queryKinds = []struct {
	kind, text string
	prefix     bool
}{
	{kind: "recorded compute (deciles, counts)", text: "gpufrac:pod_device_gpu_compute:"},
	{kind: "recorded memory (peaks, flatness, whole hours, phase)", text: "gpufrac:"},
	{kind: "ownership (kube-state-metrics)", text: "kube_pod_owner"},
	{kind: "ownership (kube-state-metrics)", text: "kube_replicaset_owner"},
	{kind: "pod lives (kube-state-metrics)", text: "kube_pod_created"},
	{kind: "pod lives (kube-state-metrics)", text: "kube_pod_completion_time"},
	{kind: "shared-device copies", text: "count_values"},
	{kind: "impossible-sample counts (last hour)", text: "changes((timestamp("},
	{kind: "samples without a pod label (last hour)", text: `{pod=""`},
	{kind: "namespaces with impossible samples", text: "max by (namespace) (count by (namespace)", prefix: true},
	{kind: "devices shared by pods", text: "(count by (namespace, pod"},
	{kind: "memory flatness, raw", text: "stddev_over_time("},
	{kind: remoteReadKind, text: remoteReadKind},
	{kind: seriesKind, text: seriesKind},
	{kind: remoteReadMemoryKind, text: remoteReadMemoryKind},
	{kind: "memory peaks, raw samples", text: metrics.DCGMFBUsed + "{", prefix: true}, // from raw samples through the query API
	{kind: "compute, raw", text: "avg_over_time("},
	{kind: "compute, raw", text: metrics.DCGMGPUUtil + "{", prefix: true}, // from raw samples (metrics.Reader.RangeFromSamples)
	{kind: "memory peaks, raw", text: "max_over_time("},
}

// remoteRead is -remote-read: the raw-sample reads go through Prometheus' remote read
// API (metrics.RawReader) where true, through the query API where false.
var remoteRead = true

// cpuProfile is the file -cpuprofile names ("" for none): a CPU profile of this process
// over the last bootstrap from the recordings, or from the raw series where
// profileRaw (-cpuprofile-raw).
var (
	cpuProfile string
	profileRaw bool
)

// queryKind names a query's kind (queryKinds), "other" for none.
func queryKind(q string) string {
	for _, k := range queryKinds {
		if (k.prefix && strings.HasPrefix(q, k.text)) || (!k.prefix && strings.Contains(q, k.text)) {
			return k.kind
		}
	}
	return "other"
}

// bootstrap runs the recommender's first cycle (the history bootstrap of every
// autoscaler of the trace's manifests, in a fake API server) against Prometheus at base
// (process promPID), reading the raw series and then the recordings
// (--history-from-recordings), alternately repeats times each, and returns a row per
// mode (the fastest run's wall time, with the Prometheus and recommender CPU of that
// run) and one comparing their memory targets, compute targets and computeRequests.
func bootstrap(ctx context.Context, base string, promPID int, t trace.Trace, end time.Time, history time.Duration, repeats int) ([]row, error) {
	objs, err := manifestObjects(t)
	if err != nil {
		return nil, err
	}
	c, err := api.NewClient(api.Config{Address: base})
	if err != nil {
		return nil, err
	}
	best := map[bool]*bootstrapRun{}
	for i := range repeats {
		for _, recorded := range []bool{false, true} {
			profiled := recorded != profileRaw && i == repeats-1 && cpuProfile != ""
			if profiled {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return nil, err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return nil, err
				}
			}
			r, err := bootstrapOnce(ctx, promapi.NewAPI(c, nil), promPID, objs, end, history, recorded)
			if profiled {
				pprof.StopCPUProfile()
			}
			if err != nil {
				return nil, fmt.Errorf("bootstrap (recordings %v): %w", recorded, err)
			}
			logf("bootstrap %d, recordings %v: %.1f s wall, Prometheus CPU %.1f s, recommender CPU %.1f s, %.0f queries, %d targets",
				i+1, recorded, r.wall, r.promCPU, r.selfCPU, r.queries, len(r.targets))
			if b := best[recorded]; b == nil || r.wall < b.wall {
				best[recorded] = r
			}
		}
	}
	var rows []row
	for _, recorded := range []bool{false, true} {
		b := best[recorded]
		name := "history bootstrap, raw series (wall; Prometheus CPU, recommender CPU, queries)"
		if recorded {
			name = "history bootstrap, --history-from-recordings (wall; Prometheus CPU, recommender CPU, queries)"
		}
		rows = append(rows, row{name: name, evalS: b.wall, samples: fmt.Sprintf("%.1f s, %.1f s, %.0f", b.promCPU, b.selfCPU, b.queries),
			points: thousands(int64(len(b.targets)))})
	}
	rows[1].equal = strings.Join([]string{
		compareTargets("memory targets", best[false].targets, best[true].targets),
		compareTargets("compute targets", best[false].compute, best[true].compute),
		compareTargets("computeRequests", best[false].computeReq, best[true].computeReq),
	}, "; ")
	kinds := map[string]bool{}
	for _, b := range best {
		for k := range b.byKind {
			kinds[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		r := row{name: "… " + k + " (queries; seconds waited, raw → recordings)"}
		var n [2]int
		var sec [2]float64
		for i, recorded := range []bool{false, true} {
			if t := best[recorded].byKind[k]; t != nil {
				n[i], sec[i] = t.n, t.seconds
			}
		}
		r.samples = fmt.Sprintf("%d → %d", n[0], n[1])
		r.points = fmt.Sprintf("%.2f s → %.2f s", sec[0], sec[1])
		rows = append(rows, r)
	}
	return rows, nil
}

// bootstrapOnce runs one history bootstrap with a new recommender and API server.
func bootstrapOnce(ctx context.Context, papi promv1.API, promPID int, objs []client.Object, end time.Time, history time.Duration, recorded bool) (*bootstrapRun, error) {
	cl := fake.NewClientBuilder().WithScheme(scheme.MustNew()).WithObjects(objs...).
		WithStatusSubresource(&gpufracv1.GPUFractionAutoscaler{}, &gpufracv1.GPUFractionRecommendation{}).Build()
	timed := &timedAPI{API: papi, byKind: map[string]*kindTime{}}
	rec := recommender.New(cl, &metrics.Reader{API: timed, Labels: metrics.DefaultLabels}, metrics.DCGM{},
		recommender.Config{HistoryLength: history, HistoryFromRecordings: recorded, HistoryComputeFromRecordings: recorded})
	rec.Now = func() time.Time { return end }
	q0 := counterSum(metrics.Queries)
	p0, err := processCPU(promPID)
	if err != nil {
		return nil, err
	}
	s0 := selfCPU()
	began := time.Now()
	if err := rec.RunOnce(ctx); err != nil {
		return nil, err
	}
	r := &bootstrapRun{wall: time.Since(began).Seconds(), selfCPU: selfCPU() - s0, queries: counterSum(metrics.Queries) - q0, targets: map[string]float64{},
		compute: map[string]float64{}, computeReq: map[string]float64{}, byKind: timed.byKind}
	p1, err := processCPU(promPID)
	if err != nil {
		return nil, err
	}
	r.promCPU = p1 - p0
	var gfrs gpufracv1.GPUFractionRecommendationList
	if err := cl.List(ctx, &gfrs); err != nil {
		return nil, err
	}
	for _, g := range gfrs.Items {
		for _, cr := range g.Status.ContainerRecommendations {
			key := g.Namespace + "/" + g.Name + "/" + cr.ContainerName
			if m := cr.Target.Memory; m != nil {
				r.targets[key] = m.AsApproximateFloat64()
			}
			if c := cr.Target.Compute; c != nil {
				r.compute[key] = c.AsApproximateFloat64()
			}
			if c := cr.ComputeRequest; c != nil {
				r.computeReq[key] = c.AsApproximateFloat64()
			}
		}
	}
	if len(r.targets) == 0 {
		return nil, errors.New("no memory target recommended")
	}
	return r, nil
}

// manifestObjects returns the Deployments and autoscalers of the trace (trace.WriteManifests),
// typed.
func manifestObjects(t trace.Trace) ([]client.Object, error) {
	var buf bytes.Buffer
	if err := trace.WriteManifests(&buf, t, trace.ManifestOptions{}); err != nil {
		return nil, err
	}
	sch := scheme.MustNew()
	var out []client.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(&buf, 1<<16)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		o, err := sch.New(u.GroupVersionKind())
		if err != nil {
			return nil, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
			return nil, err
		}
		out = append(out, o.(client.Object))
	}
}

// compareTargets says whether the targets of one kind (what) of the recorded bootstrap
// are the raw one's (compareWith), how many are higher and lower, how far apart at most
// (relative, and as a value), and the distribution of the differences recorded − raw
// (in the targets' unit) over the keys both have: their 50th, 90th and 99th percentiles
// (stat.Empirical) and their extremes.
func compareTargets(what string, raw, rec map[string]float64) string {
	worst, worstAbs, higher, lower := 0.0, 0.0, 0, 0
	var diffs []float64
	eq := compareWith(raw, rec, func(w, g float64) bool {
		worst, worstAbs = math.Max(worst, math.Abs(g-w)/w), math.Max(worstAbs, math.Abs(g-w))
		diffs = append(diffs, g-w)
		switch {
		case g > w:
			higher++
		case g < w:
			lower++
		}
		return w == g
	})
	out := fmt.Sprintf("%s %s (%d higher, %d lower; at most %.2f %% or %.4g apart)", what, eq, higher, lower, 100*worst, worstAbs)
	if len(diffs) > 0 {
		slices.Sort(diffs)
		out += fmt.Sprintf(" [recorded − raw: min %.4g, p50 %.4g, p90 %.4g, p99 %.4g, max %.4g]", diffs[0],
			stat.Quantile(0.5, stat.Empirical, diffs, nil), stat.Quantile(0.9, stat.Empirical, diffs, nil),
			stat.Quantile(0.99, stat.Empirical, diffs, nil), diffs[len(diffs)-1])
	}
	return out
}

// counterSum returns the sum of every series of a counter vector.
func counterSum(c *prometheus.CounterVec) float64 {
	reg := prometheus.NewRegistry()
	if reg.Register(c) != nil {
		return 0
	}
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// processCPU returns the user and system CPU seconds of a process (/proc/<pid>/stat).
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	k, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (u + k) / 100, nil // USER_HZ, 100 on Linux
}

// selfCPU returns this process' user and system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

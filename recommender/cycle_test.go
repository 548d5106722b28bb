package recommender

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// stepCounts returns how many times each step of a cycle has been observed in
// gpufrac_recommender_cycle_step_duration_seconds.
func stepCounts(t *testing.T, r *Recommender) map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range r.steps() {
		var m dto.Metric
		if err := cycleStepDuration.WithLabelValues(s.name).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		out[s.name] = m.GetHistogram().GetSampleCount()
	}
	return out
}

// Each step of a cycle is timed once per cycle that reaches it: all of them when the
// cycle completes (Prometheus failing included: the cycle goes on and keeps the
// recommendations), only those up to the failing one when a listing fails; only a
// cycle that reached every step counts as ran (the status Lease's renewal).
func TestCycleStepsTimed(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	prom := promFor(objs, 20*gib, 0.3)
	h := newHarness(t, objs, prom)
	ctx := context.Background()
	podsFail := false
	h.rec.Client = fakeClient(objs, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*corev1.PodList); ok && podsFail {
			return errors.New("injected pod list failure")
		}
		return c.List(ctx, list, opts...)
	}})
	h.rec.owners.Reader = h.rec.Client

	for _, tc := range []struct {
		name        string
		promFails   bool
		podsFail    bool
		wantErr     bool
		wantStepsTo string // the last step observed
	}{
		{name: "complete", wantStepsTo: "export_metrics"},
		{name: "prometheus failing", promFails: true, wantErr: true, wantStepsTo: "export_metrics"},
		{name: "pods not listed", podsFail: true, wantErr: true, wantStepsTo: "load_pods"},
	} {
		prom.fail.Store(tc.promFails)
		podsFail = tc.podsFail
		before := stepCounts(t, h.rec)
		err := h.rec.RunOnce(ctx)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: error %v, want one: %v", tc.name, err, tc.wantErr)
		}
		// A cycle that ran every step renews the status Lease (renewStatusLease), a
		// failed read included; one that stopped at a listing does not.
		if ran, want := h.rec.cur.ran, tc.wantStepsTo == "export_metrics"; ran != want {
			t.Errorf("%s: cycle ran %v, want %v", tc.name, ran, want)
		}
		after := stepCounts(t, h.rec)
		reached := true
		for _, s := range h.rec.steps() {
			want := uint64(0)
			if reached {
				want = 1
			}
			if got := after[s.name] - before[s.name]; got != want {
				t.Errorf("%s: step %s observed %d times, want %d", tc.name, s.name, got, want)
			}
			if s.name == tc.wantStepsTo {
				reached = false
			}
		}
	}
}

// docs/recommender.md names every step label of the cycle-step histogram.
func TestCycleStepsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/recommender.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range New(nil, nil, nil, Config{}).steps() {
		if !strings.Contains(string(doc), "`"+s.name+"`") {
			t.Errorf("step %s is not in docs/recommender.md", s.name)
		}
	}
	if !strings.Contains(string(doc), "`gpufrac_recommender_cycle_step_duration_seconds`") {
		t.Error("gpufrac_recommender_cycle_step_duration_seconds is not in docs/recommender.md")
	}
}

// A cycle asks which scrape targets are down once, also when it loads a new workload's
// history besides the tracked workloads' new samples (two loads), and detects the
// sources once.
func TestCycleQueriesDownTargetsOnce(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	prom := promFor(objs, 20*gib, 0.3)
	h := newHarness(t, objs, prom)
	var down, detect atomic.Int64
	h.rec.Reader = promReader(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.Form.Get("query") == metrics.DownTargetsQuery {
			down.Add(1)
		}
		// Source detection's label-values call (metrics.DetectSources), not a long
		// load's presence calls (metrics.Reader.Presence, one field each).
		if strings.HasPrefix(r.URL.Path, "/api/v1/label/") && strings.HasPrefix(r.Form.Get("match[]"), "{__name__=~") {
			detect.Add(1)
		}
		prom.ServeHTTP(w, r)
	}))
	ctx := context.Background()

	for cycle, add := range [][]client.Object{
		nil, // the first workload's history
		append(deployment("batch", "train", 1), gfa("batch", "train", "train")), // new samples of ml, history of batch
		nil, // new samples of both
	} {
		create(t, h.c, add...)
		for _, o := range add {
			if p, ok := o.(*corev1.Pod); ok {
				prom.mu.Lock()
				prom.pods = append(prom.pods, metrics.ContainerID{Namespace: p.Namespace, Pod: p.Name, Container: "main"})
				prom.mem[p.Name], prom.cpu[p.Name] = 10*gib, 0.2
				prom.mu.Unlock()
			}
		}
		down.Store(0)
		detect.Store(0)
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		if down.Load() != 1 || detect.Load() != 1 {
			t.Errorf("cycle %d: %d down-targets queries and %d detection calls, want 1 each", cycle, down.Load(), detect.Load())
		}
		h.now = h.now.Add(time.Minute)
	}
	if gfr := h.gfr(t, "batch", "train"); len(gfr.Status.ContainerRecommendations) == 0 {
		t.Errorf("batch/train got no recommendation: %+v", gfr.Status.Conditions)
	}
}

package recommender

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// isComputeRead matches the compute data query (not its copies companion, not a count).
func isComputeRead(q string) bool {
	return strings.Contains(q, "avg_over_time(DCGM_FI_PROF_SM_ACTIVE") && !strings.Contains(q, "count_values")
}

// Issue 17: history is fed to the model one slice at a time, and a load that fails part
// way never shrinks a recommendation. A recommender restarts over a workload whose
// written recommendation came from 48 hours of history (a quiet first day, a busy
// second one) and loads it in one-hour slices; the tenth slice's compute read fails, after
// nine quiet hours were fed. The cycle fails and every written target stays (the nine
// quiet hours alone would shrink them), with MetricsUnavailable. The next cycle resumes
// after the last slice fed (fewer compute reads than a whole load) and writes what a
// recommender that read the whole history at once writes.
func TestHistoryStreamFailureMidway(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	for i, p := range podsOf(objs) {
		uuid := "GPU-" + string(rune('a'+i))
		quiet := h.now.Add(-24 * time.Hour)
		addDCGM(t, h.prom, p, uuid, quiet, 24*120, 10000, 0.2)
		addDCGM(t, h.prom, p, uuid, h.now.Add(2*time.Minute), 24*120+4, 30000, 0.7)
	}
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil { // the recommender before the restart
		t.Fatal(err)
	}
	written := h.gfr(t, "ml", "sd").Status.ContainerRecommendations
	if len(written) != 1 {
		t.Fatalf("no recommendation before the restart: %+v", h.gfr(t, "ml", "sd").Status.Conditions)
	}

	// The restarted recommender: two series, so one-hour slices of 60 compute points.
	restarted := New(h.c, &metrics.Reader{API: h.prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{},
		Config{HistoryLength: 48 * time.Hour, HistorySliceSamples: 120})
	now := h.now.Add(time.Minute)
	restarted.Now = func() time.Time { return now }
	var mu sync.Mutex
	reads := 0
	h.prom.SetFailureIf(func(q string) bool {
		mu.Lock()
		defer mu.Unlock()
		if isComputeRead(q) {
			reads++
			return reads == 10
		}
		return false
	}, errors.New("query timed out in expression evaluation"))
	if err := restarted.RunOnce(ctx); err == nil {
		t.Fatal("a cycle whose history load failed must fail")
	}
	st := h.gfr(t, "ml", "sd").Status
	got := st.ContainerRecommendations
	if len(got) != 1 || !sameBounds(got[0], written[0]) {
		t.Fatalf("a history load that failed after nine slices changed the recommendation:\n%s\nwas\n%s", bounds(got), bounds(written))
	}
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isTrue(c) {
		t.Errorf("want MetricsUnavailable=True after a failed history load, got %+v", c)
	}
	if reads != 10 {
		t.Fatalf("the load went on after its failed slice: %d compute reads, want 10", reads)
	}

	h.prom.SetFailureIf(nil, nil)
	now = now.Add(time.Minute)
	before := len(h.prom.Queries())
	if err := restarted.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	resumed := 0
	for _, q := range h.prom.Queries()[before:] {
		if isComputeRead(q) {
			resumed++
		}
	}
	if resumed >= 48-5 {
		t.Errorf("the resumed load read compute %d times: it started again instead of after the 9 slices fed", resumed)
	}
	whole, _ := newEngineRecommender(t, objs, h.prom, Config{HistoryLength: 48 * time.Hour})
	whole.Source = metrics.DCGM{}
	whole.Now = func() time.Time { return now }
	if err := whole.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ref := (&harness{c: whole.Client}).gfr(t, "ml", "sd")
	st = h.gfr(t, "ml", "sd").Status
	if len(st.ContainerRecommendations) != 1 || len(ref.Status.ContainerRecommendations) != 1 ||
		!sameBounds(st.ContainerRecommendations[0], ref.Status.ContainerRecommendations[0]) {
		t.Errorf("resumed history load:\n%s\nwhole history at once:\n%s", bounds(st.ContainerRecommendations), bounds(ref.Status.ContainerRecommendations))
	}
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable must clear once the history is loaded: %+v", c)
	}
	if got := st.ContainerRecommendations[0].Target.Memory.Value(); got < 30000*metrics.MiB {
		t.Errorf("memory target %d bytes after the whole history, below the busy day's 30000 MiB", got)
	}
}

// sameBounds reports whether two container recommendations have equal targets and
// bounds of memory and compute.
func sameBounds(a, b gpufracv1.ContainerRecommendation) bool {
	for _, p := range [][2]gpufracv1.GPUResources{{a.Target, b.Target}, {a.LowerBound, b.LowerBound}, {a.UpperBound, b.UpperBound}} {
		if p[0].Memory == nil || p[1].Memory == nil || p[0].Compute == nil || p[1].Compute == nil ||
			p[0].Memory.Cmp(*p[1].Memory) != 0 || p[0].Compute.Cmp(*p[1].Compute) != 0 {
			return false
		}
	}
	return true
}

// bounds renders container recommendations' targets and bounds.
func bounds(rs []gpufracv1.ContainerRecommendation) string {
	var b strings.Builder
	for _, r := range rs {
		for _, x := range []struct {
			name string
			v    gpufracv1.GPUResources
		}{{"target", r.Target}, {"lower", r.LowerBound}, {"upper", r.UpperBound}} {
			b.WriteString(x.name + " ")
			if x.v.Memory != nil {
				b.WriteString(x.v.Memory.String() + " ")
			}
			if x.v.Compute != nil {
				b.WriteString(x.v.Compute.String() + "; ")
			}
		}
	}
	return b.String()
}

package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Issue 17: CopiesQuery aggregates the raw samples (no filtering subquery, the cost of a
// bootstrap), so a copy is found wherever the pods' windows are clean, and a window in
// which a co-tenant in another namespace held an impossible sample is not taken for a
// copy: the pod's value there stays its own (compute not split: never lower).
func TestCopiesQueryReadsRawSamples(t *testing.T) {
	s := promtest.New(t)
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := end.Add(-9 * time.Minute) // ten 1-minute windows, two samples each
	lbl := func(ns, pod string) map[string]string {
		return map[string]string{"__name__": DCGMSMActive, "namespace": ns, "pod": pod, "container": "main", "UUID": "GPU-shared"}
	}
	mine, theirs := promtest.Repeat(0.5, 20), promtest.Repeat(0.5, 20)
	theirs[9] = 1.37 // the window ending at minute 5 (samples 8 and 9) holds an impossible value
	s.Add(t, lbl("ml", "a"), start.Add(-30*time.Second), 30*time.Second, mine...)
	s.Add(t, lbl("team-b", "b"), start.Add(-30*time.Second), 30*time.Second, theirs...)

	sel := Selector{Labels: DefaultLabels, Namespaces: []string{"ml"}, Device: DCGM{}.DeviceLabels()}
	copies := CopiesQuery(DCGM{}, sel, SignalCompute, time.Minute)
	if strings.Contains(copies, ":15s]") || strings.Contains(copies, "min_over_time") {
		t.Errorf("CopiesQuery filters samples (a subquery or bounds per step), want raw aggregation:\n%s", copies)
	}
	r := &Reader{API: s.API(t), Labels: DefaultLabels, Device: DCGM{}.DeviceLabels()}
	series, err := r.RangeShared(context.Background(), SignalCompute, DCGM{}.ComputeQuery(sel, time.Minute), copies, start, end, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 1 || len(series[0].Samples) != 10 {
		t.Fatalf("want one series of 10 samples, got %+v", series)
	}
	for _, p := range series[0].Samples {
		want := 0.25 // 0.5 copied to two pods: split
		if p.Time.Equal(start.Add(4 * time.Minute)) {
			want = 0.5 // the co-tenant's window was not clean: not a copy, kept whole
		}
		if p.Value != want {
			t.Errorf("%s: %v, want %v", p.Time.Format("15:04"), p.Value, want)
		}
	}
	if series[0].SharedSamples != 9 {
		t.Errorf("%d shared samples, want 9 (every clean window)", series[0].SharedSamples)
	}
}

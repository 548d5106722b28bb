package recommender

import (
	"context"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// A restart without a usable checkpoint (checkpoints off, another layout version) over a
// Prometheus that keeps less than --history-length (the Prometheus Operator's default
// retention is 24 h): the written recommendation was made from 48 h whose first 12 held
// 30000 MiB peaks; the restarted recommender finds only the last 24 h at 10000 MiB. It
// must not shrink the memory target to a third from the partial history: the written
// recommendation is kept, MetricsUnavailable=True (HistoryIncomplete) holds the
// updater's shrinks (contract.IncompleteData), and the counter moves. A restart over a
// Prometheus that holds the whole window is no gap, and once the missing span has left
// the history window the recommendation is made from what is read, as a recommender
// that had run through would forget it.
func TestRestartOverShorterRetentionKeepsTheRecommendation(t *testing.T) {
	objs := singlePodWorkloads("ml", "ret")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	const step = 30 * time.Second
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * step)
	mem := promtest.Repeat(10000, n)
	for i := range 12 * 120 {
		mem[i] = 30000
	}
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-a"), start, step, mem...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-a"), start, step, promtest.Repeat(0.3, n)...)
	h.runCycles(t, 1, nil)
	before := h.gfr(t, "ml", "ret").Status.ContainerRecommendations
	if len(before) != 1 || before[0].Target.Memory.Value() < 30000*metrics.MiB {
		t.Fatalf("first recommendation %+v, want the 30000 MiB peaks covered", before)
	}

	// restart runs one cycle of a new recommender (no checkpoint) over prom, a minute on.
	restart := func(prom *promtest.Server) (*Recommender, gpufracv1.GPUFractionRecommendationStatus) {
		t.Helper()
		r := New(h.c, &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{}, Config{HistoryLength: 48 * time.Hour})
		r.Now = func() time.Time { return h.now }
		h.now = h.now.Add(time.Minute)
		if err := r.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		return r, h.gfr(t, "ml", "ret").Status
	}
	if _, st := restart(h.prom); !isFalse(condition(st, gpufracv1.ConditionMetricsUnavailable)) {
		t.Fatalf("restart over the whole history: %+v", condition(st, gpufracv1.ConditionMetricsUnavailable))
	}

	// Prometheus keeps the last 24 h only.
	short := promtest.New(t)
	keep := 24 * 120
	from := h.now.Add(-time.Duration(keep-1) * step)
	addShort := func(from time.Time, k int) {
		short.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-a"), from, step, promtest.Repeat(10000, k)...)
		short.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-a"), from, step, promtest.Repeat(0.3, k)...)
	}
	addShort(from, keep)
	held := incomplete(metrics.IncompleteHistory)
	r, st := restart(short)
	c := condition(st, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != gpufracv1.ReasonHistoryIncomplete {
		t.Errorf("MetricsUnavailable %+v, want True HistoryIncomplete", c)
	}
	if got := st.ContainerRecommendations; len(got) != 1 || got[0].Target.Memory.Cmp(*before[0].Target.Memory) != 0 || got[0].Target.Compute.Cmp(*before[0].Target.Compute) != 0 {
		t.Errorf("after a restart over 24 h of a 48 h history: %+v, want the written %v/%v kept", got, before[0].Target.Memory, before[0].Target.Compute)
	}
	if d := incomplete(metrics.IncompleteHistory) - held; d != 1 {
		t.Errorf("incomplete_data_total{history_incomplete} += %v, want 1", d)
	}
	gfr := h.gfr(t, "ml", "ret")
	if contract.IncompleteData(gfr) == "" {
		t.Errorf("the updater would shrink on it: %+v", gfr.Status.Conditions)
	}

	// The same process 23 h on (the missing span has left the 48 h window): made from
	// what is read, the condition cleared.
	last := h.now
	h.now = h.now.Add(23 * time.Hour)
	addShort(last.Add(step), int(h.now.Sub(last)/step))
	if err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = h.gfr(t, "ml", "ret").Status
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("after the missing span left the window: %+v", c)
	}
	if got := st.ContainerRecommendations[0].Target.Memory.Value(); got >= 30000*metrics.MiB {
		t.Errorf("memory target %d MiB after the 30000 MiB peaks left the window", got/metrics.MiB)
	}
}

// The workload's own gap is no missing history: a workload that ran 8 h, stopped for
// 40 h and ran again for the last 10 h has a recommendation made (by a recommender that
// ran through) from its first 8 h, 58 h ago; a restart over a Prometheus that holds the
// whole 48 h window reads it only from 10 h ago, later than the written history's
// start, but Prometheus holds other GPU samples then, so nothing is held.
func TestRestartAfterTheWorkloadsOwnGapIsNoIncompleteHistory(t *testing.T) {
	objs := singlePodWorkloads("ml", "bursty", "steady")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	const step = 30 * time.Second
	end := h.now.Add(10 * time.Hour)
	from := end.Add(-58 * time.Hour)
	n := int(end.Sub(from)/step) + 1
	mem, sm := make([]float64, n), make([]float64, n)
	for i := range mem {
		at := from.Add(time.Duration(i) * step)
		mem[i], sm[i] = promtest.Gap(), promtest.Gap()
		if at.Before(from.Add(8*time.Hour)) || at.After(end.Add(-10*time.Hour)) {
			mem[i], sm[i] = 10000, 0.3
		}
	}
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[0], "GPU-a"), from, step, mem...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[0], "GPU-a"), from, step, sm...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[1], "GPU-b"), from, step, promtest.Repeat(8000, n)...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[1], "GPU-b"), from, step, promtest.Repeat(0.3, n)...)
	h.runCycles(t, 1, nil) // at end - 10 h: the first 8 h of the window are bursty's
	h.now = end
	h.runCycles(t, 1, nil)
	if got := h.gfr(t, "ml", "bursty").Status.ContainerRecommendations; len(got) != 1 {
		t.Fatalf("bursty before the restart: %+v", got)
	}
	r := New(h.c, &metrics.Reader{API: h.prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{}, Config{HistoryLength: 48 * time.Hour})
	h.now = h.now.Add(time.Minute)
	r.Now = func() time.Time { return h.now }
	if err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := condition(h.gfr(t, "ml", "bursty").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("bursty after a restart over the whole window: %+v", c)
	}
}

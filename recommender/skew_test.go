package recommender

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Samples that reach Prometheus late and irregularly (remote write batches, federation)
// while the cycles run early or late: every compute window is read once, whole. The
// history ends 3 minutes before the first cycle; then eight cycles, 5 to 90 seconds
// apart, find Prometheus holding samples up to 4 minutes behind, sometimes nothing new,
// then a burst, until it has caught up at the last one. Samples every 30 s, 0.1 and 0.9
// in turn, so each one-minute window of the first load's grid holds one of each: the 10
// windows of (first cycle − 3m, last cycle] are fed as 10 means, all 0.5. A window read
// before all its samples are held (a mean of 0.1) or a sample read in two windows is
// another mean; a window never read, fewer means. Before, each load read up to its own
// now, and 1 mean was fed. A load that read compute in the cycles holding no whole
// window since the last load fed means of one sample (the window's own mean then came
// after it and was skipped as already seen). The history never ends after what
// Prometheus holds: a cycle without a whole window feeds nothing.
func TestLateSamplesReadOnce(t *testing.T) {
	objs := singlePodWorkloads("ml", "late")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	const step = 30 * time.Second
	t0 := h.now
	base := t0.Add(-3 * time.Minute)
	// add writes the samples of (from, to], every 30 s on base's grid: 20000 MiB, and
	// compute 0.1 at the first sample of each minute after base, 0.9 at the second.
	add := func(from, to time.Time) {
		var mem, cpu []float64
		first := from.Add(step)
		for at := first; !at.After(to); at = at.Add(step) {
			v := 0.9
			if (at.Sub(base)%time.Minute+time.Minute)%time.Minute == step {
				v = 0.1
			}
			mem, cpu = append(mem, 20000), append(cpu, v)
		}
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-a"), first, step, mem...)
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-a"), first, step, cpu...)
	}
	add(base.Add(-48*time.Hour), base)
	h.runCycles(t, 1, nil)
	st := h.rec.model.Container(history.ContainerKey{WorkloadKey: history.WorkloadKey(h.rec.cur.entries[0].ref), Container: "main"})
	before := st.ComputeSamples
	held := base
	for _, c := range []struct{ at, held time.Duration }{ // after t0: the cycle's now, the newest sample Prometheus holds
		{5 * time.Second, -150 * time.Second},
		{70 * time.Second, -90 * time.Second},
		{140 * time.Second, -90 * time.Second}, // nothing new
		{215 * time.Second, time.Minute},       // a burst
		{250 * time.Second, 90 * time.Second},
		{340 * time.Second, 2 * time.Minute},
		{365 * time.Second, 4 * time.Minute},
		{7 * time.Minute, 7 * time.Minute}, // caught up
	} {
		if to := t0.Add(c.held); to.After(held) {
			add(held, to)
			held = to
		}
		h.now = t0.Add(c.at)
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatalf("cycle at %v: %v", c.at, err)
		}
		// A cycle without a whole window held feeds nothing (memory read up to now and
		// stamped there would be history Prometheus does not hold yet).
		if st.LastSample.After(held) {
			t.Errorf("cycle at %v: history up to %v, after Prometheus' newest sample %v", c.at, st.LastSample.Sub(t0), c.held)
		}
	}
	if got := st.ComputeSamples - before; got != 10 {
		t.Errorf("compute means fed after the first cycle: %d, want 10 (one per minute window of (t0−3m, t0+7m])", got)
	}
	if lo, hi := st.Compute.Percentile(0), st.Compute.Percentile(1); lo != hi {
		t.Errorf("compute means between %.3f and %.3f, want all 0.5 (each window's two samples, 0.1 and 0.9)", lo, hi)
	}
	if c := condition(h.gfr(t, "ml", "late").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable %+v, want False once Prometheus has caught up", c)
	}
}

// The history a first cycle loads does not depend on how long after Prometheus' newest
// sample the cycle runs: 12 hours of samples a minute apart, read 20 seconds or 4
// minutes 20 seconds after the last one, span the same history, and no more than the
// samples cover (719 minutes between the first and last, plus the cycle interval each
// sample stands for). Before, the load ended at the cycle's now and the running hour's
// memory peak was stamped there: 12h0m and 12h3m30s, so a workload with 12 hours of samples
// was young (under 12 h) or not depending on when the recommender started (the main-job
// e2e's syn-002 with a first cycle under a minute after the backfilled history's end).
func TestHistoryLengthDoesNotDependOnTheCyclesTiming(t *testing.T) {
	const n = 12 * 60
	var spans []time.Duration
	for _, delay := range []time.Duration{20 * time.Second, 4*time.Minute + 20*time.Second} {
		objs := singlePodWorkloads("ml", "twelve")
		h := newEngineHarness(t, objs, metrics.DCGM{})
		p := podsOf(objs)[0]
		start := h.now.Add(-delay - (n-1)*time.Minute)
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-a"), start, time.Minute, promtest.Repeat(20000, n)...)
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-a"), start, time.Minute, promtest.Repeat(0.4, n)...)
		h.runCycles(t, 1, nil)
		st := h.rec.model.Container(history.ContainerKey{WorkloadKey: history.WorkloadKey(h.rec.cur.entries[0].ref), Container: "main"})
		if st == nil {
			t.Fatalf("read %v after the last sample: no history", delay)
		}
		if covered := (n-1)*time.Minute + h.rec.Config.Interval; st.Span() > covered {
			t.Errorf("read %v after the last sample: history %v, more than the samples cover (%v)", delay, st.Span(), covered)
		}
		spans = append(spans, st.Span())
	}
	if spans[0] != spans[1] {
		t.Errorf("history %v read 20s after the last sample, %v read 4m20s after it: want the same", spans[0], spans[1])
	}
}

// Samples that reach Prometheus in batches 4 minutes apart (remote write, a federating
// Prometheus that scrapes every 4 minutes), scraped every 30 s: the three cycles between
// two batches hold no whole window (Recommender.dataEnd) and read no compute, by
// design. That is no gap once the process has seen a batch arrive: MetricsUnavailable
// stays False over many batches, where it was raised 3 cycles after each batch and
// cleared at the next (the wait counted the samples' spacing, 30 s, not how far apart
// they arrive). Before the first batch a process cannot tell batches from a stall (an
// exporter restart is named after 3 cycles, TestLiveGapNeverFailsTheCycle), so the
// cycles before it are not checked. A real gap is still raised once the batches stop,
// after EmptyCyclesWhileRunning of their spacing (12 cycles).
func TestBatchedArrivalsAreNoGap(t *testing.T) {
	const batch = 4 * time.Minute
	objs := singlePodWorkloads("ml", "batched")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	held := h.now
	arrive := func(to time.Time) { // the samples of (held, to], every 30 s
		n := int(to.Sub(held) / (30 * time.Second))
		addDCGM(t, h.prom, p, "GPU-a", to, n, 20000, 0.5)
		held = to
	}
	addDCGM(t, h.prom, p, "GPU-a", h.now, 48*120, 20000, 0.5)
	h.runCycles(t, 1, nil)
	t0 := h.now
	status := func() *metav1.Condition {
		return condition(h.gfr(t, "ml", "batched").Status, gpufracv1.ConditionMetricsUnavailable)
	}
	for i := 1; i <= 24; i++ {
		h.now = t0.Add(time.Duration(i) * time.Minute)
		if h.now.Sub(held) >= batch {
			arrive(h.now)
		}
		h.runCycles(t, 1, nil)
		if c := status(); i >= int(batch/time.Minute) && !isFalse(c) {
			t.Fatalf("%v after the first cycle, batches every %v: MetricsUnavailable %+v", h.now.Sub(t0), batch, c)
		}
	}
	// The batches stop: a gap after EmptyCyclesWhileRunning batch intervals.
	last := held
	needed := int(time.Duration(EmptyCyclesWhileRunning) * batch / time.Minute)
	for i := 1; i <= needed; i++ {
		h.now = last.Add(time.Duration(i) * time.Minute)
		h.runCycles(t, 1, nil)
		c := status()
		if gap := isTrue(c) && c.Reason == gpufracv1.ReasonNoSamplesWhileRunning; gap != (i == needed) {
			t.Fatalf("%d cycles after the last batch (a gap after %d): MetricsUnavailable %+v", i, needed, c)
		}
	}
}

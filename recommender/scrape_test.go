package recommender

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// A scrape interval longer than --interval (5 minutes: a federated or remote-written
// Prometheus) leaves four cycles in five without a sample by design. That is not a
// gap: MetricsUnavailable stays False over many scrapes, where it was raised after
// three empty cycles and cleared at the next scrape. A real gap is still raised once
// the samples stop for EmptyCyclesWhileRunning scrape intervals, and not before.
func TestSlowScrapeIsNoGap(t *testing.T) {
	for _, every := range []time.Duration{2 * time.Minute, 5 * time.Minute} {
		t.Run(every.String(), func(t *testing.T) {
			objs := singlePodWorkloads("ml", "sd")
			h := newEngineHarness(t, objs, metrics.DCGM{})
			p := podsOf(objs)[0]
			scrape := func(at time.Time, n int) {
				start := at.Add(-time.Duration(n-1) * every)
				h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-1"), start, every, promtest.Repeat(20000, n)...)
				h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-1"), start, every, promtest.Repeat(0.5, n)...)
			}
			scrape(h.now, int(48*time.Hour/every))
			h.runCycles(t, 1, nil)
			want := h.gfr(t, "ml", "sd").Status.ContainerRecommendations
			if len(want) != 1 {
				t.Fatalf("no recommendation after the history load: %+v", want)
			}
			last := h.now
			for i := 1; i <= 30; i++ {
				h.now = h.now.Add(time.Minute)
				if h.now.Sub(last) >= every {
					scrape(h.now, 1)
					last = h.now
				}
				h.runCycles(t, 1, nil)
				if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); isTrue(c) {
					t.Fatalf("cycle %d of a %s scrape: %+v", i, every, c)
				}
			}
			// The exporter stops: a gap after EmptyCyclesWhileRunning scrape intervals.
			needed := int(time.Duration(EmptyCyclesWhileRunning) * every / time.Minute)
			want = h.gfr(t, "ml", "sd").Status.ContainerRecommendations
			for i := 1; h.now.Add(time.Minute).Sub(last) <= time.Duration(needed)*time.Minute; i++ {
				h.now = h.now.Add(time.Minute)
				h.runCycles(t, 1, nil)
				st := h.gfr(t, "ml", "sd").Status
				c := condition(st, gpufracv1.ConditionMetricsUnavailable)
				if gap := isTrue(c) && c.Reason == gpufracv1.ReasonNoSamplesWhileRunning; gap != (h.now.Sub(last) >= time.Duration(needed)*time.Minute) {
					t.Fatalf("%s after the last scrape (every %s): MetricsUnavailable %+v", h.now.Sub(last), every, c)
				}
				if isTrue(c) && !equality.Semantic.DeepEqual(st.ContainerRecommendations, want) {
					t.Fatalf("recommendation changed in the gap: %+v, was %+v", st.ContainerRecommendations, want)
				}
				want = st.ContainerRecommendations
			}
		})
	}
}

// One of a workload's two running pods has never reported (its node's exporter cannot
// map it; the scrape target is up) while the other does: the workload's samples are
// partial, as when a pod that reported stops. After EmptyCyclesWhileRunning cycles the
// autoscaler says NoSamplesWhileRunning naming the pod and keeps its recommendation; it
// clears once the pod reports. A new pod gets Prometheus' lookback (5 min) to report
// before it counts.
func TestPodThatNeverReportsIsAGap(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	addDCGM(t, h.prom, pods[0], "GPU-1", h.now, 48*120, 20000, 0.5)
	report := func(now time.Time) { addDCGM(t, h.prom, pods[0], "GPU-1", now, 2, 20000, 0.5) }
	h.runCycles(t, 1, nil)
	want := h.gfr(t, "ml", "sd").Status.ContainerRecommendations
	if len(want) != 1 {
		t.Fatalf("no recommendation from the pod that reports: %+v", want)
	}
	gapAfter := func(n int, pod string) {
		t.Helper()
		for i := 1; i <= n; i++ {
			h.now = h.now.Add(time.Minute)
			report(h.now)
			h.runCycles(t, 1, nil)
			st := h.gfr(t, "ml", "sd").Status
			c := condition(st, gpufracv1.ConditionMetricsUnavailable)
			gap := isTrue(c) && c.Reason == gpufracv1.ReasonNoSamplesWhileRunning
			if gap != (i == n) {
				t.Fatalf("cycle %d of %d: MetricsUnavailable %+v", i, n, c)
			}
			if gap && !strings.Contains(c.Message, pod) {
				t.Fatalf("gap does not name %s: %s", pod, c.Message)
			}
			if gap && !equality.Semantic.DeepEqual(st.ContainerRecommendations, want) {
				t.Fatalf("recommendation changed while %s was silent: %+v, was %+v", pod, st.ContainerRecommendations, want)
			}
		}
	}
	// The first cycle counted one; the gap comes EmptyCyclesWhileRunning-1 cycles later.
	gapAfter(EmptyCyclesWhileRunning-1, pods[1].Name)
	// It reports: the gap clears.
	h.now = h.now.Add(time.Minute)
	addDCGM(t, h.prom, pods[1], "GPU-2", h.now, 2, 20000, 0.5)
	h.runCycles(t, 1, report)
	if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Fatalf("gap must clear when the pod reports: %+v", c)
	}
	// A new pod (a scale-up) that never reports: nothing for Prometheus' lookback, then
	// the gap after EmptyCyclesWhileRunning more cycles.
	ctx := context.Background()
	fresh := pods[1].DeepCopy()
	fresh.Name, fresh.ResourceVersion, fresh.UID = fresh.Name+"-new", "", ""
	fresh.CreationTimestamp = metav1.NewTime(h.now)
	if err := h.c.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(ctx, pods[1]); err != nil {
		t.Fatal(err)
	}
	gapAfter(int(metrics.AgentCoverage/time.Minute)+EmptyCyclesWhileRunning-1, fresh.Name)
}

// sampleSpacing's median ignores an outage (one long spacing) and forgets ended pods.
func TestSampleSpacing(t *testing.T) {
	var s sampleSpacing
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var samples []metrics.Sample
	for i := range 10 {
		samples = append(samples, metrics.Sample{Time: at.Add(time.Duration(i) * 2 * time.Minute)})
	}
	s.add("a", samples, time.Time{})
	s.add("a", []metrics.Sample{{Time: at.Add(time.Hour)}}, time.Time{}) // after a 42-minute outage
	s.add("b", samples[:3], time.Time{})
	s.add("b", samples[:3], time.Time{}) // read again: no spacing
	if got := s.typical(); got != 2*time.Minute {
		t.Errorf("typical spacing %s, want 2m0s", got)
	}
	// Recorded hours: 40 minute means stamped a minute apart up to the recordings' end,
	// then scraped samples. Only the spacings after the end count.
	var recorded []metrics.Sample
	for i := range 40 {
		recorded = append(recorded, metrics.Sample{Time: at.Add(time.Duration(i) * time.Minute)})
	}
	end := recorded[len(recorded)-1].Time
	s.add("c", append(recorded, metrics.Sample{Time: end.Add(2 * time.Minute)}, metrics.Sample{Time: end.Add(4 * time.Minute)}), end)
	if got := s.typical(); got != 2*time.Minute {
		t.Errorf("typical spacing %s after recorded minutes, want 2m0s", got)
	}
	// Recorded hours alone: 12 minute means in each of their hours imply a 5-minute
	// scrape, 30 in their busiest a 2-minute one.
	for n, want := range map[int]time.Duration{12: 5 * time.Minute, 30: 2 * time.Minute} {
		var r sampleSpacing
		end := at.Add(3 * time.Hour)
		var hours []metrics.Sample
		for h, means := range []int{n / 2, n, n - 4} { // the hours ending 2h, 1h and 0h before end
			hourEnd := end.Add(-time.Duration(2-h) * time.Hour)
			for i := range means { // the last minute ends of the hour, as recorded
				hours = append(hours, metrics.Sample{Time: hourEnd.Add(-time.Duration(i) * time.Minute)})
			}
		}
		slices.SortFunc(hours, func(a, b metrics.Sample) int { return a.Time.Compare(b.Time) })
		r.add("d", hours, end)
		if got := r.typical(); got != want {
			t.Errorf("%d minute means in the busiest recorded hour: typical spacing %s, want %s", n, got, want)
		}
	}
	s.forget(func(pod string) bool { return pod == "a" })
	if _, ok := s.last["b"]; ok || len(s.last) != 1 {
		t.Errorf("pods kept after forget: %v", s.last)
	}
}

// One of a workload's two running pods has never reported while the other is scraped
// every 2 minutes (slower than --interval, 1m): every other cycle reads no compute of
// either pod. The pod that never reports is still a gap, after EmptyCyclesWhileRunning
// scrape intervals (its sample spacing), and stays one. Before, a cycle without the
// others' samples forgot the count, so it was never raised and the recommendation,
// written from the other pod alone, let the updater shrink it; likewise with --interval
// 5s and samples a minute apart, or samples ingested in batches (cycles without a whole
// window held, Recommender.dataEnd).
func TestPodThatNeverReportsIsAGapUnderSlowScrapes(t *testing.T) {
	const every = 2 * time.Minute
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	scrape := func(at time.Time, n int) {
		start := at.Add(-time.Duration(n-1) * every)
		h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[0], "GPU-1"), start, every, promtest.Repeat(20000, n)...)
		h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[0], "GPU-1"), start, every, promtest.Repeat(0.5, n)...)
	}
	scrape(h.now, int(48*time.Hour/every))
	h.runCycles(t, 1, nil)
	want := h.gfr(t, "ml", "sd").Status.ContainerRecommendations
	if len(want) != 1 {
		t.Fatalf("no recommendation from the pod that reports: %+v", want)
	}
	needed := int(time.Duration(EmptyCyclesWhileRunning) * every / time.Minute)
	last := h.now
	for i := 2; i <= 3*needed; i++ {
		h.now = h.now.Add(time.Minute)
		if h.now.Sub(last) >= every {
			scrape(h.now, 1)
			last = h.now
		}
		h.runCycles(t, 1, nil)
		st := h.gfr(t, "ml", "sd").Status
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		gap := isTrue(c) && c.Reason == gpufracv1.ReasonNoSamplesWhileRunning && strings.Contains(c.Message, pods[1].Name)
		if gap != (i >= needed) {
			t.Fatalf("cycle %d (a gap from cycle %d): MetricsUnavailable %+v", i, needed, c)
		}
		if gap && !equality.Semantic.DeepEqual(st.ContainerRecommendations, want) {
			t.Fatalf("recommendation changed while %s never reported: %+v, was %+v", pods[1].Name, st.ContainerRecommendations, want)
		}
		want = st.ContainerRecommendations
	}
}

// A history bootstrapped from the gpufrac-history recordings
// (HistoryComputeFromRecordings) learns the scrape's spacing from the raw samples only:
// the recorded hours stand for their minute means at one-minute stamps whatever the
// scrape, so learning from them took a 2- or 5-minute scrape for a 1-minute one, and
// the slow scrape's empty cycles raised NoSamplesWhileRunning after every third one
// until 31 raw spacings had been seen (about 80 minutes at 5 minutes).
func TestSlowScrapeIsNoGapAfterRecordedBootstrap(t *testing.T) {
	for _, tc := range []struct{ every, into time.Duration }{
		{2 * time.Minute, 0}, {5 * time.Minute, 0}, {5 * time.Minute, 37 * time.Minute}, {3 * time.Minute, 58 * time.Minute},
	} {
		every := tc.every
		t.Run(fmt.Sprintf("every %s, %s into the hour", every, tc.into), func(t *testing.T) {
			objs := singlePodWorkloads("ml", "sd", "fast")
			h := newEngineHarness(t, objs, metrics.DCGM{})
			h.now = h.now.Add(tc.into) // the bootstrap's end: how much of the running hour is read raw
			h.rec.Config.HistoryLength = 12 * time.Hour
			h.rec.Config.HistoryFromRecordings, h.rec.Config.HistoryComputeFromRecordings = true, true
			p, fast := podsOf(objs)[0], podsOf(objs)[1]
			scrape := func(at time.Time, n int) {
				start := at.Add(-time.Duration(n-1) * every)
				h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-1"), start, every, promtest.Repeat(20000, n)...)
				h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-1"), start, every, promtest.Repeat(0.5, n)...)
			}
			scrape(h.now, int(14*time.Hour/every))
			// Another node pool's exporter, scraped every 30 s, makes the source's
			// recorded hours whole (every minute evaluated), so the slow pod's hours are
			// read from the recordings too.
			addDCGM(t, h.prom, fast, "GPU-2", h.now, int(14*time.Hour/(30*time.Second)), 10000, 0.2)
			recordHistory(t, h.prom, metrics.DCGM{}, h.now.Add(-13*time.Hour).Truncate(time.Minute), h.now.Truncate(time.Minute), nil)
			before := len(h.prom.Queries())
			h.runCycles(t, 1, nil)
			if read := strings.Join(h.prom.Queries()[before:], "\n"); !strings.Contains(read, metrics.HistoryComputeQuantile1h) {
				t.Fatalf("the bootstrap read no recorded compute:\n%s", read)
			}
			if len(h.gfr(t, "ml", "sd").Status.ContainerRecommendations) != 1 {
				t.Fatal("no recommendation after the history load")
			}
			last := h.now
			for i := 1; i <= 30; i++ {
				h.now = h.now.Add(time.Minute)
				addDCGM(t, h.prom, fast, "GPU-2", h.now, 2, 10000, 0.2)
				if h.now.Sub(last) >= every {
					scrape(h.now, 1)
					last = h.now
				}
				h.runCycles(t, 1, nil)
				if c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable); isTrue(c) {
					t.Fatalf("cycle %d of a %s scrape after a recorded bootstrap: %+v", i, every, c)
				}
			}
			// The slow pod's exporter stops: a gap after EmptyCyclesWhileRunning scrape
			// intervals, as after a raw bootstrap (TestSlowScrapeIsNoGap).
			needed := time.Duration(EmptyCyclesWhileRunning) * every
			for h.now.Sub(last) < needed {
				h.now = h.now.Add(time.Minute)
				addDCGM(t, h.prom, fast, "GPU-2", h.now, 2, 10000, 0.2)
				h.runCycles(t, 1, nil)
				c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable)
				if gap := isTrue(c) && c.Reason == gpufracv1.ReasonNoSamplesWhileRunning; gap != (h.now.Sub(last) >= needed) {
					t.Fatalf("%s after the last scrape (every %s): MetricsUnavailable %+v", h.now.Sub(last), every, c)
				}
			}
		})
	}
}

// The wait before a gap (EmptyCyclesFor) is learnt, and it can grow while a gap lasts: under
// load the cycles run late and irregularly (30 s to 2 min apart), and the spacing of the
// whole loads (Recommender.arrivals) is learnt as they come. A gap raised under the
// shorter wait stays until the silent pod reports, or the workload's samples come back:
// before, the longer wait cleared it and raised it again cycles later while nothing
// reported (at 10,000 pods, 855 autoscalers a cycle changed MetricsUnavailable).
func TestGapIsEndedBySamplesNotByALongerWait(t *testing.T) {
	steps := []time.Duration{95 * time.Second, 40 * time.Second, 61 * time.Second, 90 * time.Second, 30 * time.Second, 2 * time.Minute}
	for _, tc := range []struct {
		name   string
		silent func(i int) bool // whether the second pod reports nothing at cycle i (the first always reports)
		all    bool             // the first pod stops too (the whole workload's exporter)
	}{
		{name: "one pod never reports", silent: func(int) bool { return true }},
		{name: "one pod stops", silent: func(i int) bool { return i > 2 }},
		{name: "the workload stops", silent: func(i int) bool { return i > 2 }, all: true},
	} {
		for shift := range steps {
			t.Run(fmt.Sprintf("%s, steps from %d", tc.name, shift), func(t *testing.T) {
				objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
				objs = append(objs, singlePodWorkloads("ml", "other")...) // reports throughout: Prometheus' newest sample moves on
				h := newEngineHarness(t, objs, metrics.DCGM{})
				pods := podsOf(objs)
				addDCGM(t, h.prom, pods[2], "GPU-3", h.now, 48*120, 20000, 0.5)
				addDCGM(t, h.prom, pods[0], "GPU-1", h.now, 48*120, 20000, 0.5)
				if !tc.silent(0) {
					addDCGM(t, h.prom, pods[1], "GPU-2", h.now, 48*120, 20000, 0.5)
				}
				h.runCycles(t, 1, nil)
				raised, back, cleared := -1, 40, -1
				for i := 1; i <= 40; i++ {
					step := steps[(i+shift)%len(steps)]
					n := int(step / (30 * time.Second))
					h.now = h.now.Add(step)
					addDCGM(t, h.prom, pods[2], "GPU-3", h.now, n, 20000, 0.5)
					if !tc.all || !tc.silent(i) || i >= back {
						addDCGM(t, h.prom, pods[0], "GPU-1", h.now, n, 20000, 0.5)
					}
					if !tc.silent(i) || i >= back {
						addDCGM(t, h.prom, pods[1], "GPU-2", h.now, n, 20000, 0.5)
					}
					h.runCycles(t, 1, nil)
					c := condition(h.gfr(t, "ml", "sd").Status, gpufracv1.ConditionMetricsUnavailable)
					gap := isTrue(c) && c.Reason == gpufracv1.ReasonNoSamplesWhileRunning
					switch {
					case gap && raised < 0:
						raised, back = i, i+6 // the pods report again 6 cycles later
					case !gap && raised >= 0 && i < back:
						t.Fatalf("cycle %d: the gap raised at cycle %d was cleared while nothing reported: %+v", i, raised, c)
					case !gap && i >= back && cleared < 0:
						cleared = i
					case gap && cleared >= 0:
						t.Fatalf("cycle %d: the gap came back after it cleared at cycle %d, the pods reporting since cycle %d", i, cleared, back)
					}
				}
				// Cleared by the first cycle that reads a whole compute window after the
				// pods report again (one with a 30-second step may read none).
				if raised < 0 || cleared < 0 || cleared > back+2 {
					t.Fatalf("gap raised at cycle %d, the pods reporting again at cycle %d, cleared at cycle %d", raised, back, cleared)
				}
			})
		}
	}
}

package recommender

import (
	"context"
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
	s.add("a", samples)
	s.add("a", []metrics.Sample{{Time: at.Add(time.Hour)}}) // after a 42-minute outage
	s.add("b", samples[:3])
	s.add("b", samples[:3]) // read again: no spacing
	if got := s.typical(); got != 2*time.Minute {
		t.Errorf("typical spacing %s, want 2m0s", got)
	}
	s.forget(map[string]bool{"a": true})
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

package recommender

import (
	"slices"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// GapCheck alone, as gpufrac simulate feeds it: after a cycle with samples of both pods,
// the workload's pods stop reporting (or one pod does, while its sibling reports) for
// some cycles; the gap is raised after EmptyCyclesFor cycles (3, or 3 sample spacings
// where samples come less often than the cycle), stays raised when the wait grows
// (arrivals learnt late) and ends with the next samples. A pod new for less than
// Prometheus' lookback is no gap, nor is a pod that is not running.
func TestGapCheckRules(t *testing.T) {
	const interval = time.Minute
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		every time.Duration // sample spacing of the cycle with samples (learnt)
		// silent: which pods report nothing in the empty cycles ("a", "b"; the others
		// report every c.every); running: whether pod a runs then; young: pod a started
		// just before.
		silent           []string
		running, young   bool
		wantAfter        int      // empty cycles before the finding; 0: none
		wantSilent       []string // pods named by the finding; nil: the whole workload
		longerWaitAtRise bool     // arrivals grow to 5 minutes once raised
	}{
		{name: "workload silent", every: time.Minute, silent: []string{"a", "b"}, running: true, wantAfter: 3},
		{name: "workload silent, scraped every 2m", every: 2 * time.Minute, silent: []string{"a", "b"}, running: true, wantAfter: 6},
		{name: "workload silent, longer wait once raised", every: time.Minute, silent: []string{"a", "b"}, running: true, wantAfter: 3, longerWaitAtRise: true},
		{name: "one pod silent", every: time.Minute, silent: []string{"a"}, running: true, wantAfter: 3, wantSilent: []string{"a"}},
		{name: "one pod silent, longer wait once raised", every: time.Minute, silent: []string{"a"}, running: true, wantAfter: 3, wantSilent: []string{"a"}, longerWaitAtRise: true},
		{name: "one pod silent, scraped every 5m", every: 5 * time.Minute, silent: []string{"a"}, running: true, wantAfter: 15, wantSilent: []string{"a"}},
		{name: "one pod not running", every: time.Minute, silent: []string{"a"}},
		{name: "one new pod yet to report", every: time.Minute, silent: []string{"a"}, running: true, young: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var g GapCheck
			now := t0
			// pods: the pods with their compute samples; memory, read every cycle (the
			// running interval's peak), for each pod that is not silent.
			silent := false
			pods := func(compute map[string]int) []GapPod {
				mem := map[string]int{"a": 1, "b": 1}
				if silent {
					for _, pod := range c.silent {
						mem[pod] = 0
					}
				}
				a := GapPod{Name: "a", Running: true, Created: t0.Add(-time.Hour), RunningFor: now.Sub(t0.Add(-time.Hour)), Compute: compute["a"], Memory: mem["a"]}
				if c.young {
					a.Created, a.RunningFor = now.Add(-time.Minute), time.Minute
				}
				return []GapPod{a, {Name: "b", Running: true, Created: t0.Add(-time.Hour), RunningFor: time.Hour, Compute: compute["b"], Memory: mem["b"]}}
			}
			// The cycles with samples: two per pod, c.every apart.
			for _, pod := range []string{"a", "b"} {
				g.Samples(pod, samplesAt(now.Add(-c.every), now), time.Time{})
			}
			if f := g.Cycle(GapCycle{Pods: pods(map[string]int{"a": 2, "b": 2}), Compute: 4, Memory: 2, Interval: interval}); f.Raised || len(f.Silent) > 0 {
				t.Fatalf("gap with samples: %+v", f)
			}
			arrivals := time.Duration(0)
			silent = true
			for n := 1; n <= 20; n++ {
				now = now.Add(interval)
				compute := map[string]int{}
				if n%int(c.every/interval) == 0 { // a scrape
					compute["a"], compute["b"] = 1, 1
				}
				for _, pod := range c.silent {
					compute[pod] = 0
				}
				cyc := GapCycle{Pods: pods(compute), Compute: compute["a"] + compute["b"], Memory: 2 - len(c.silent), Interval: interval, Arrivals: arrivals}
				if !c.running {
					cyc.Pods[0].Running = false
				}
				for pod, k := range compute {
					if k > 0 {
						g.Samples(pod, samplesAt(now), time.Time{})
					}
				}
				f := g.Cycle(cyc)
				found := f.Raised || len(f.Silent) > 0
				if want := c.wantAfter > 0 && n >= c.wantAfter; found != want {
					t.Fatalf("empty cycle %d: finding %+v, want one: %v", n, f, want)
				}
				if found && c.wantSilent == nil && (!f.Raised || f.Empty != n) {
					t.Fatalf("empty cycle %d: %+v, want the workload raised for %d cycles", n, f, n)
				}
				if found && c.wantSilent != nil && (f.Raised || !slices.Equal(f.Silent, c.wantSilent)) {
					t.Fatalf("empty cycle %d: %+v, want pods %v silent", n, f, c.wantSilent)
				}
				if found && c.longerWaitAtRise {
					arrivals = MaxScrapeSpacing
				}
			}
			// Samples end it.
			silent = false
			now = now.Add(interval)
			for _, pod := range []string{"a", "b"} {
				g.Samples(pod, samplesAt(now), time.Time{})
			}
			if f := g.Cycle(GapCycle{Pods: pods(map[string]int{"a": 1, "b": 1}), Compute: 2, Memory: 2, Interval: interval, Arrivals: arrivals}); f.Raised || len(f.Silent) > 0 {
				t.Errorf("gap after samples: %+v", f)
			}
		})
	}
}

func samplesAt(times ...time.Time) []metrics.Sample {
	out := make([]metrics.Sample, len(times))
	for i, at := range times {
		out[i].Time = at
	}
	return out
}

// A running pod whose compute samples are read but whose memory series are lost (one
// node's exporter without the memory field, a relabeling that drops it), while its
// siblings' memory is read: coverage is per pod and per signal, so it is found silent
// (for memory) after EmptyCyclesFor cycles, as a pod without any sample is. Neither a
// pod whose memory was set aside (another finding names it), nor a cycle that reads no
// memory of any pod (the workload's own memory gap), nor a pod that stops running is.
func TestGapCheckPodWithoutMemory(t *testing.T) {
	const interval = time.Minute
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		aside     bool // pod a's memory is set aside
		noMemory  bool // no pod's memory is read
		stops     bool // pod a stops running
		wantAfter int  // cycles before the finding; 0: none
	}{
		{name: "memory lost", wantAfter: 3},
		{name: "memory set aside", aside: true},
		{name: "no memory read at all", noMemory: true},
		{name: "pod not running", stops: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var g GapCheck
			now := t0
			cycle := func(memA int) GapFinding {
				g.Samples("a", samplesAt(now), time.Time{})
				g.Samples("b", samplesAt(now), time.Time{})
				memB := 1
				if c.noMemory && memA == 0 {
					memB = 0
				}
				a := GapPod{Name: "a", Running: !c.stops || memA > 0, Created: t0.Add(-time.Hour), RunningFor: time.Hour, Compute: 1, Memory: memA, MemorySetAside: c.aside && memA == 0}
				b := GapPod{Name: "b", Running: true, Created: t0.Add(-time.Hour), RunningFor: time.Hour, Compute: 1, Memory: memB}
				f := g.Cycle(GapCycle{Pods: []GapPod{a, b}, Compute: 2, Memory: memA + memB, Interval: interval})
				now = now.Add(interval)
				return f
			}
			if f := cycle(1); f.Raised || len(f.Silent) > 0 {
				t.Fatalf("gap with samples: %+v", f)
			}
			for n := 1; n <= 10; n++ {
				f := cycle(0)
				want := c.wantAfter > 0 && n >= c.wantAfter
				if got := slices.Equal(f.Silent, []string{"a"}) && slices.Equal(f.SilentMemory, []string{"a"}); got != want || !want && len(f.Silent) > 0 {
					t.Fatalf("cycle %d without a's memory: %+v, want a silent for memory: %v", n, f, want)
				}
			}
			if f := cycle(1); len(f.Silent) > 0 {
				t.Errorf("gap after a's memory came back: %+v", f)
			}
		})
	}
}

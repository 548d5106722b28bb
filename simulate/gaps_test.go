package simulate

import (
	"fmt"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/trace"
)

// replica is pod of its workload's n-th replica: a pod of Deployment workload named
// <workload>-abc-<n>, with one memory (GiB) and compute sample per minute from step 0,
// none over the steps in [from, to).
func replica(workload string, n, steps int, memGiB, cpu float64, from, to int) trace.Pod {
	p := pod(workload, 0, repeat(memGiB, steps), repeat(cpu, steps))
	p.Pod = fmt.Sprintf("%s-abc-%d", workload, n)
	var m, c []trace.Point
	for k := range p.Memory {
		if k < from || k >= to {
			m, c = append(m, p.Memory[k]), append(c, p.Compute[k])
		}
	}
	p.Memory, p.Compute = m, c
	return p
}

// TestGapHoldsShrinks: pods of 20 GiB start on whole GPUs, and at minute 60 the
// recommendation is confident enough to shrink them (TestColdStartThenShrink), or, with
// a minimum lifetime of 90 minutes, at minute 90. Where pods stop reporting for 10 to 90
// minutes (one pod while its siblings report, every pod of the workload, one pod of each
// of two workloads as a node's exporter does), the recommender raises
// NoSamplesWhileRunning after recommender.EmptyCyclesWhileRunning silent cycles and keeps
// its recommendation, and the updater shrinks no pod of a workload with a silent pod
// until it reports again: from minute 50 the kept recommendation is not yet confident;
// from minute 80 it is, and only the updater's hold (contract.IncompleteData) keeps the
// pods whole. A workload whose pods all report shrinks on time. The silent pods run
// through the gap: every pod-minute is charged.
func TestGapHoldsShrinks(t *testing.T) {
	const steps = 240
	for _, timing := range []struct{ from, minLife, onTime int }{{50, 60, 60}, {80, 90, 90}} {
		for _, gap := range []int{10, 30, 60, 90} {
			from := timing.from
			to := from + gap
			cases := []struct {
				name string
				// silent says whether replica n of workload w is silent over the gap.
				silent func(w, n int) bool
			}{
				{"one pod while its siblings report", func(w, n int) bool { return w == 0 && n == 1 }},
				{"every pod of the workload", func(w, n int) bool { return w == 0 }},
				{"one pod of each workload (a node's exporter)", func(w, n int) bool { return n == 0 }},
			}
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s from minute %d for %dm", c.name, from, gap), func(t *testing.T) {
					var tr trace.Trace
					for w := range 2 {
						for n := range 3 {
							f, e := 0, 0
							if c.silent(w, n) {
								f, e = from, to
							}
							tr.Pods = append(tr.Pods, replica(fmt.Sprintf("w%d", w), n, steps, 20, 0.2, f, e))
						}
					}
					if err := tr.Validate(); err != nil {
						t.Fatal(err)
					}
					o := gpufracOptions()
					o.Updater.MinLifetime = time.Duration(timing.minLife) * time.Minute
					res, err := Run(&tr, o)
					if err != nil {
						t.Fatal(err)
					}
					if res.Trace.Pods != 6 || res.Policies[0].PodMinutes != 6*steps {
						t.Fatalf("%d pods, %v pod-minutes; want 6 running through the gap, %d", res.Trace.Pods, res.Policies[0].PodMinutes, 6*steps)
					}
					d := res.detail
					for i, ch := range d.changes[0] {
						r := &res.detail.runs[i]
						w := tr.Pods[i].Workload
						held := false
						for n := range 3 {
							held = held || c.silent(int(w[1]-'0'), n)
						}
						if len(ch) != 2 {
							t.Errorf("%s: %d allocations, want a whole GPU then one shrink", r.name, len(ch))
							continue
						}
						at := ch[1].step
						switch {
						case held && at < to:
							t.Errorf("%s shrunk at minute %d while its workload had a pod silent from minute %d (held from %d) to %d",
								r.name, at, from, from+recommender.EmptyCyclesWhileRunning-1, to)
						case !held && (at < timing.onTime || at > timing.onTime+2):
							// One of the workload's 3 pods a cycle: the disruption budget's
							// max(1, ⌊3 × --max-in-flight 0.5⌋).
							t.Errorf("%s shrunk at minute %d, want %d–%d: its workload's pods all report", r.name, at, timing.onTime, timing.onTime+2)
						}
					}
				})
			}
		}
	}
}

// TestGapHoldsConsolidation: the updater moves no pod of a workload whose data are
// incomplete to empty a GPU (updater.movablePods). Five single-pod workloads of 30 GiB
// and a second pod of w1 share 80 GiB GPUs after their shrink at minute 60, two a GPU
// in the updater's order (w1's pods in the same cycles: --max-in-flight 1): w0 with
// w1's first pod, w1's second with w2, w3 with w4. w0 and w3 end at minutes 100 and
// 140, and at 141 consolidation empties a GPU. w1's second pod is silent from minute
// 130 to 250: w1's first pod may not be the one moved, so w4's is.
func TestGapHoldsConsolidation(t *testing.T) {
	const from, to = 130, 250
	var tr trace.Trace
	for w := range 5 {
		steps := map[int]int{0: 100, 3: 140}[w]
		if steps == 0 {
			steps = 300
		}
		tr.Pods = append(tr.Pods, replica(fmt.Sprintf("w%d", w), 0, steps, 30, 0.2, 0, 0))
	}
	tr.Pods = append(tr.Pods, replica("w1", 1, 300, 30, 0.2, from, to))
	o := gpufracOptions()
	o.Backend = gpufracv1.BackendKAINVFractions
	o.Updater.Consolidate = true
	o.Updater.MinLifetime = 30 * time.Minute
	o.Updater.MaxInFlight = 1
	res, err := Run(&tr, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Policies[0].Consolidations == 0 {
		t.Fatalf("no consolidation: the fixture no longer leaves a GPU to empty")
	}
	for i, ch := range res.detail.changes[0] {
		if tr.Pods[i].Workload != "w1" {
			continue
		}
		for _, c := range ch {
			if c.step >= from+recommender.EmptyCyclesWhileRunning-1 && c.step < to {
				t.Errorf("%s moved at minute %d while its workload had a pod silent from %d to %d", res.detail.runs[i].name, c.step, from, to)
			}
		}
	}
}

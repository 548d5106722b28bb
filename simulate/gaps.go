package simulate

import (
	"fmt"
	"math"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// gapCheck feeds the recommender's own check for running pods without GPU samples
// (recommender.GapCheck, recommender/gaps.go: an exporter or scrape gap) with the
// replayed trace, cycle by cycle, one GapCheck per workload, as the live recommender
// feeds it with its Prometheus loads (dataGap). A raised gap sets the workload's
// MetricsUnavailable=True, reason NoSamplesWhileRunning: the recommender then keeps its
// written recommendation, and the updater (contract.IncompleteData) shrinks no pod of
// the workload. In a trace a pod runs from its first sample to its last, so a hole in
// its samples is such a gap. Pods are never pending here, never set aside, samples
// arrive at every cycle (no arrival spacing) and no scrape target is down.
type gapCheck struct {
	step   time.Duration
	checks []recommender.GapCheck
	// Per run, this cycle: its compute samples and memory reads kept, and whether its
	// memory was set aside as stale.
	runCPU, runMem []int
	runStale       []bool
	// Per workload, this cycle: compute samples, memory reads kept and set aside as
	// stale; and the incomplete-data message the updater reads now ("" when complete).
	cpu, mem, stale []int
	incomplete      []string
	// runs, pods and byName are end's buffers: the live runs per workload, the live
	// pods of one, and their index by name (the runs of one pod's containers are one
	// pod, as the recommender reads them).
	runs   [][]int
	pods   []recommender.GapPod
	byName map[string]int
	buf    [1]metrics.Sample
}

func newGapCheck(tl *timeline) *gapCheck {
	n, w := len(tl.runs), len(tl.workloads)
	return &gapCheck{step: tl.step, checks: make([]recommender.GapCheck, w), runCPU: make([]int, n), runMem: make([]int, n), runStale: make([]bool, n),
		cpu: make([]int, w), mem: make([]int, w), stale: make([]int, w), incomplete: make([]string, w), byName: map[string]int{}}
}

// begin starts a cycle's counts.
func (g *gapCheck) begin() {
	clear(g.cpu)
	clear(g.mem)
	clear(g.stale)
}

// compute records run i's compute samples read this cycle, n of them (0: none), the
// newest at step k.
func (g *gapCheck) compute(tl *timeline, i, k, n int) {
	if n == 0 {
		return
	}
	r := &tl.runs[i]
	g.runCPU[i] += n
	g.cpu[r.workload] += n
	g.buf[0].Time = tl.stepEnd(k)
	g.checks[r.workload].Samples(r.id.Pod, g.buf[:], time.Time{})
}

// memory records run i's memory read this cycle: kept, set aside as stale, or none.
func (g *gapCheck) memory(tl *timeline, i int, kept, stale bool) {
	w := tl.runs[i].workload
	if kept {
		g.mem[w]++
		g.runMem[i]++
	}
	if stale {
		g.stale[w]++
		g.runStale[i] = true
	}
}

// end closes the cycle at step k, whose live pods are alive: it runs each workload's
// GapCheck and sets its incomplete-data message as the recommender's condition and
// contract.IncompleteData give it to the updater.
func (g *gapCheck) end(tl *timeline, alive []int, k int) {
	now := tl.stepEnd(k)
	if g.runs == nil {
		g.runs = make([][]int, len(tl.workloads))
	}
	for w := range g.runs {
		g.runs[w] = g.runs[w][:0]
	}
	for _, i := range alive {
		if tl.runs[i].end >= k {
			g.runs[tl.runs[i].workload] = append(g.runs[tl.runs[i].workload], i)
		}
	}
	for w, runs := range g.runs {
		g.pods = g.pods[:0]
		clear(g.byName)
		for _, i := range runs {
			r := &tl.runs[i]
			started := tl.stepEnd(r.start - 1)
			if j, ok := g.byName[r.id.Pod]; ok {
				p := &g.pods[j]
				p.Compute += g.runCPU[i]
				p.Memory += g.runMem[i]
				p.MemorySetAside = p.MemorySetAside || g.runStale[i]
				if started.Before(p.Created) {
					p.Created, p.RunningFor = started, now.Sub(started)
				}
				continue
			}
			g.byName[r.id.Pod] = len(g.pods)
			g.pods = append(g.pods, recommender.GapPod{Name: r.id.Pod, Running: true, Created: started, RunningFor: now.Sub(started),
				Compute: g.runCPU[i], Memory: g.runMem[i], MemorySetAside: g.runStale[i]})
		}
		f := g.checks[w].Cycle(recommender.GapCycle{Pods: g.pods, Compute: g.cpu[w], Memory: g.mem[w], StaleMemory: g.stale[w] > 0, Interval: g.step})
		switch {
		case f.Raised:
			g.incomplete[w] = incompleteData(gpufracv1.ReasonNoSamplesWhileRunning,
				fmt.Sprintf("%d running pods but no GPU sample for %d cycles; last recommendation kept", len(g.pods), f.Empty))
		case len(f.Silent) > 0:
			g.incomplete[w] = incompleteData(gpufracv1.ReasonNoSamplesWhileRunning,
				fmt.Sprintf("running pod(s) %s have had no usable GPU sample for %d cycles or more; last recommendation kept", strings.Join(f.Silent, ", "), f.Needed))
		default:
			g.incomplete[w] = ""
		}
	}
	for _, i := range alive {
		g.runCPU[i], g.runMem[i], g.runStale[i] = 0, 0, false
	}
}

// incompleteData is what the updater reads (contract.IncompleteData) from a
// recommendation whose MetricsUnavailable condition is True for reason.
func incompleteData(reason, msg string) string {
	gfr := &gpufracv1.GPUFractionRecommendation{}
	gfr.Status.Conditions = []metav1.Condition{{Type: gpufracv1.ConditionMetricsUnavailable, Status: metav1.ConditionTrue, Reason: reason, Message: msg}}
	return contract.IncompleteData(gfr)
}

// bootstrap records the compute samples of the history load of the recommender's first
// cycle at step b, of every run started by then, run after run in order (every run
// once). The caller records the memory reads and ends the cycle.
func (g *gapCheck) bootstrap(tl *timeline, b int, order []int) {
	g.begin()
	for _, i := range order {
		r := &tl.runs[i]
		if r.start > b {
			continue
		}
		for k := r.start; k <= min(r.end, b); k++ {
			if !math.IsNaN(r.cpuRaw[k-r.start]) {
				g.compute(tl, i, k, 1)
			}
		}
	}
}

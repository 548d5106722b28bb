package simulate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// gapCheck is the recommender's check, cycle by cycle, for running pods without GPU
// samples (recommender's dataGap and silentPods, docs/metric-sources.md): a workload
// whose pods run with no compute sample (or, once memory was seen, no memory sample
// while compute is read) for recommender.EmptyCyclesFor cycles, or one running pod
// without a compute sample for as long while its siblings report, has
// MetricsUnavailable=True, reason NoSamplesWhileRunning. The recommender then keeps its
// written recommendation, and the updater (contract.IncompleteData) shrinks no pod of
// the workload. In a trace a pod runs from its first sample to its last, so a hole in
// its samples is such a gap. Pods are never pending here, and never set aside.
type gapCheck struct {
	step time.Duration
	// Per run: whether it had a compute sample (the recommender's podSeen), how many
	// cycles in a row it had none (podEmpty), the step of its newest compute sample
	// (-1: none), and whether it has one this cycle.
	seen    []bool
	empty   []int
	lastCPU []int
	hasCPU  []bool
	// gap: the run was found silent and stays so until it reports (podGap): a gap is
	// ended by samples, never by a wait that grew meanwhile.
	gap []bool
	// Per workload, this cycle: compute samples, memory reads kept and set aside as
	// stale.
	cpu, mem, stale []int
	// Per workload: cycles in a row without samples (dataGaps.empty), whether compute
	// and memory were ever read, the compute sample spacings (sampleSpacing), and the
	// incomplete-data message the updater reads now ("" when complete).
	wEmpty                  []int
	raised                  []bool // the workload's empty gap (emptyRaised)
	seenCompute, seenMemory []bool
	spacing                 []spacings
	incomplete              []string
	// pods is end's buffer: the live runs per workload.
	pods [][]int
}

// spacings keeps the last spacingKept compute sample spacings of a workload, as the
// recommender's sampleSpacing does.
type spacings struct {
	gaps        []time.Duration
	next, count int
}

// spacingKept is the recommender's: the median of the last 31 spacings.
const spacingKept = 31

func (s *spacings) add(d time.Duration) {
	if s.gaps == nil {
		s.gaps = make([]time.Duration, spacingKept)
	}
	s.gaps[s.next] = d
	s.next = (s.next + 1) % spacingKept
	s.count = min(s.count+1, spacingKept)
}

// typical is the median spacing, 0 before any.
func (s *spacings) typical() time.Duration {
	if s.count == 0 {
		return 0
	}
	var buf [spacingKept]time.Duration
	g := buf[:s.count]
	copy(g, s.gaps[:s.count])
	slices.Sort(g)
	return g[len(g)/2]
}

func newGapCheck(tl *timeline) *gapCheck {
	n, w := len(tl.runs), len(tl.workloads)
	g := &gapCheck{step: tl.step, seen: make([]bool, n), empty: make([]int, n), lastCPU: make([]int, n), hasCPU: make([]bool, n), gap: make([]bool, n),
		cpu: make([]int, w), mem: make([]int, w), stale: make([]int, w), wEmpty: make([]int, w), raised: make([]bool, w),
		seenCompute: make([]bool, w), seenMemory: make([]bool, w), spacing: make([]spacings, w), incomplete: make([]string, w)}
	for i := range g.lastCPU {
		g.lastCPU[i] = -1
	}
	return g
}

// begin starts a cycle's counts.
func (g *gapCheck) begin() {
	clear(g.cpu)
	clear(g.mem)
	clear(g.stale)
}

// compute records run i's compute samples read this cycle, the newest at step k
// (n: how many; 0: none).
func (g *gapCheck) compute(tl *timeline, i, k, n int) {
	w := tl.runs[i].workload
	g.hasCPU[i] = n > 0
	if n == 0 {
		return
	}
	g.cpu[w] += n
	if g.lastCPU[i] >= 0 && k > g.lastCPU[i] {
		g.spacing[w].add(time.Duration(k-g.lastCPU[i]) * g.step)
	}
	g.lastCPU[i] = k
}

// memory records run i's memory read this cycle: kept, set aside as stale, or none.
func (g *gapCheck) memory(tl *timeline, i int, kept, stale bool) {
	w := tl.runs[i].workload
	if kept {
		g.mem[w]++
	}
	if stale {
		g.stale[w]++
	}
}

// end closes the cycle at step k, whose live pods are alive: it sets each workload's
// incomplete-data message as the recommender's condition and contract.IncompleteData
// give it to the updater.
func (g *gapCheck) end(tl *timeline, alive []int, k int) {
	now := tl.stepEnd(k)
	if g.pods == nil {
		g.pods = make([][]int, len(tl.workloads))
	}
	pods := g.pods
	for w := range pods {
		pods[w] = pods[w][:0]
	}
	for _, i := range alive {
		if tl.runs[i].end >= k {
			pods[tl.runs[i].workload] = append(pods[tl.runs[i].workload], i)
		}
	}
	for w, runs := range pods {
		g.incomplete[w] = ""
		if len(runs) == 0 {
			g.wEmpty[w], g.raised[w] = 0, false
			continue
		}
		needed := recommender.EmptyCyclesFor(g.spacing[w].typical(), g.step)
		others := g.cpu[w] > 0 || g.seenCompute[w]
		var silent []string
		for _, i := range runs {
			r := &tl.runs[i]
			switch {
			case g.hasCPU[i]:
				g.empty[i], g.gap[i] = 0, false
			case !g.seen[i] && (!others || now.Sub(tl.stepEnd(r.start-1)) < metrics.AgentCoverage):
				g.empty[i], g.gap[i] = 0, false
			default:
				if g.empty[i]++; g.empty[i] >= needed || g.gap[i] {
					silent = append(silent, r.id.Pod)
					g.gap[i] = true
				}
			}
			g.seen[i] = g.seen[i] || g.hasCPU[i]
			g.hasCPU[i] = false
		}
		g.seenCompute[w] = g.seenCompute[w] || g.cpu[w] > 0
		g.seenMemory[w] = g.seenMemory[w] || g.mem[w] > 0
		none := g.cpu[w] == 0 && (g.seenCompute[w] || g.mem[w] == 0)
		if !none && g.seenMemory[w] && g.mem[w] == 0 && g.stale[w] == 0 {
			none = true
		}
		if none {
			g.wEmpty[w]++
		} else {
			g.wEmpty[w] = 0
		}
		g.raised[w] = g.wEmpty[w] > 0 && (g.raised[w] || g.wEmpty[w] >= needed)
		var msg string
		switch {
		case g.raised[w]:
			msg = fmt.Sprintf("%d running pods but no GPU sample for %d cycles; last recommendation kept", len(runs), g.wEmpty[w])
		case len(silent) > 0:
			slices.Sort(silent)
			msg = fmt.Sprintf("running pod(s) %s have had no usable GPU sample for %d cycles or more; last recommendation kept", strings.Join(silent, ", "), needed)
		default:
			continue
		}
		g.incomplete[w] = incompleteData(gpufracv1.ReasonNoSamplesWhileRunning, msg)
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
// cycle at step b, of every run started by then: their spacings, and which runs had one.
// The caller records the memory reads and ends the cycle.
func (g *gapCheck) bootstrap(tl *timeline, b int) {
	g.begin()
	for i := range tl.runs {
		r := &tl.runs[i]
		if r.start > b {
			continue
		}
		had := false
		for k := r.start; k <= min(r.end, b); k++ {
			if !math.IsNaN(r.cpuRaw[k-r.start]) {
				g.compute(tl, i, k, 1)
				had = true
			}
		}
		g.hasCPU[i] = had
	}
}

package simulate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/trace"
)

// A trace pod is one pod from its first sample to its last: Kubernetes never gives a
// new pod of a Deployment an old pod's name, so a pod whose samples stop and resume ran,
// and held its GPU, through the gap; what it used then is unknown (an exporter or scrape
// gap), which the recommender reads as such (recommender.GapCheck) and the evaluator
// fills with the last sample, never 0. Options.Lookback, when set, ends a pod at a longer gap instead,
// for traces that give one name to successive pods.

// run is one pod lifetime of the trace on the simulation's step grid. Step k covers
// (origin + k·step, origin + (k+1)·step]; its values are stamped at the end of the step,
// when the recommender's cycle reads them.
type run struct {
	// name is namespace/pod, with "#n" appended for the n-th lifetime of one trace pod.
	name string
	// tracePod is the index into trace.Trace.Pods.
	tracePod int
	// workload indexes timeline.workloads; wc indexes timeline.containers.
	workload, wc int
	id           metrics.ContainerID
	// start and end are the first and last step of the lifetime, inclusive.
	start, end int
	// memRaw and cpuRaw hold what the recommender reads for each step of the lifetime:
	// the peak memory (bytes) and the mean activity (ratio) of the samples in the step,
	// NaN where the step has no sample (Prometheus returns nothing then). memLow is the
	// lowest memory sample of the step (bytes, NaN where none): a window is flat where its
	// lowest and highest samples are equal (metrics.FlatQuery's standard deviation 0).
	memRaw, memLow, cpuRaw []float64
	// mem and cpu hold the actual usage the evaluator charges for each step: memRaw and
	// cpuRaw with gaps filled by the last sample (no data is not zero: the pod ran, and
	// held its memory, through the gap).
	mem, cpu []float64
	// peakMem (bytes) and peakCPU (ratio) are the highest values of mem and cpu.
	peakMem, peakCPU float64
}

// at returns the actual memory (bytes) and compute (ratio) of the run at step k.
func (r *run) at(k int) (float64, float64) { return r.mem[k-r.start], r.cpu[k-r.start] }

// workloadInfo is one workload of the trace, as the recommender keys it.
type workloadInfo struct {
	key history.WorkloadKey
	// hkey is key.String(): the updater's hysteresis key (workload.Ref.String()).
	hkey string
	runs []int
}

// containerInfo is one (workload, container) pair: the unit a recommendation is for.
type containerInfo struct {
	workload  int
	container string
}

// timeline is a trace cut into runs on a step grid.
type timeline struct {
	origin     time.Time
	step       time.Duration
	steps      int
	runs       []run
	workloads  []workloadInfo
	containers []containerInfo
	// arrivals[k] lists the runs whose first step is k, in trace order.
	arrivals [][]int
}

// stepEnd returns the time at which step k ends: origin + (k+1)·step.
func (tl *timeline) stepEnd(k int) time.Time { return tl.origin.Add(time.Duration(k+1) * tl.step) }

// newTimeline cuts every trace pod into lifetimes separated by gaps longer than lookback
// (memory and compute samples together; lookback 0: never, one lifetime per trace pod)
// and aggregates samples per step. It returns an
// error when the trace has no memory or compute sample.
func newTimeline(tr *trace.Trace, step, lookback time.Duration) (*timeline, error) {
	if step <= 0 {
		return nil, fmt.Errorf("step %s: must be positive", step)
	}
	first := firstSample(tr)
	if first.IsZero() {
		return nil, fmt.Errorf("trace has no GPU memory or compute samples")
	}
	tl := &timeline{origin: first.Add(-time.Nanosecond).Truncate(step).UTC(), step: step}
	ix := timelineIndex{workloads: map[[2]string]int{}, containers: map[containerInfo]int{}}
	for pi := range tr.Pods {
		p := &tr.Pods[pi]
		w, c := ix.add(tl, p)
		bounds := lifetimes(p, lookback)
		for n, b := range bounds {
			r := tl.newRun(p, b)
			r.tracePod, r.workload, r.wc = pi, w, c
			if len(bounds) > 1 {
				r.name += fmt.Sprintf("#%d", n+1)
			}
			tl.workloads[w].runs = append(tl.workloads[w].runs, len(tl.runs))
			tl.runs = append(tl.runs, r)
			tl.steps = max(tl.steps, r.end+1)
		}
	}
	tl.arrivals = make([][]int, tl.steps)
	for i := range tl.runs {
		s := tl.runs[i].start
		tl.arrivals[s] = append(tl.arrivals[s], i)
	}
	return tl, nil
}

// span returns the time from the trace's first memory or compute sample to its last: the
// figures count whole steps of the grid, which rounds each lifetime out to it, so a step
// longer than the trace would count more time than the trace holds.
func (tl *timeline) span(tr *trace.Trace) time.Duration {
	var last time.Time
	for _, p := range tr.Pods {
		for _, s := range [][]trace.Point{p.Memory, p.Compute} {
			if n := len(s); n > 0 && s[n-1].T.After(last) {
				last = s[n-1].T
			}
		}
	}
	return last.Sub(firstSample(tr))
}

// firstSample returns the time of the trace's earliest memory or compute sample, or the
// zero time when it has none.
func firstSample(tr *trace.Trace) time.Time {
	var first time.Time
	for _, p := range tr.Pods {
		for _, s := range [][]trace.Point{p.Memory, p.Compute} {
			if len(s) > 0 && (first.IsZero() || s[0].T.Before(first)) {
				first = s[0].T
			}
		}
	}
	return first
}

// stepOf returns the step whose interval (origin + k·step, origin + (k+1)·step] holds t.
func (tl *timeline) stepOf(t time.Time) int {
	d := t.Sub(tl.origin)
	return int((d+tl.step-1)/tl.step) - 1
}

// timelineIndex numbers the workloads and containers of a timeline in trace order.
type timelineIndex struct {
	workloads  map[[2]string]int
	containers map[containerInfo]int
}

// add returns the indexes of the pod's workload and container in tl, appending them to
// tl.workloads and tl.containers the first time they are seen.
func (ix timelineIndex) add(tl *timeline, p *trace.Pod) (workload, container int) {
	wk := [2]string{p.Namespace, p.Workload}
	w, ok := ix.workloads[wk]
	if !ok {
		w = len(tl.workloads)
		ix.workloads[wk] = w
		key := history.WorkloadKey{Namespace: p.Namespace, Kind: "Deployment", Name: p.Workload}
		tl.workloads = append(tl.workloads, workloadInfo{key: key, hkey: key.String()})
	}
	ci := containerInfo{workload: w, container: p.Container}
	c, ok := ix.containers[ci]
	if !ok {
		c = len(tl.containers)
		ix.containers[ci] = c
		tl.containers = append(tl.containers, ci)
	}
	return w, c
}

// minHole is the shortest hole CheckHole refuses: an outage of the whole exporter for up
// to a day is data to replay.
const minHole = 24 * time.Hour

// CheckHole returns an error when no pod has a memory or compute sample for longer than
// minHole and than all the rest of the trace's span together: a sample time out of place
// (a timestamp of 0 among 2026's, one in milliseconds, another year) or two traces in
// one. Replayed, its pods would hold GPUs through the hole (a gap is an exporter gap)
// over a grid of as many steps: a stray 1970 row made a 3-hour trace 29 million steps.
func CheckHole(tr *trace.Trace) error {
	type at struct {
		t   time.Time
		pod int
	}
	var ts []at
	for i := range tr.Pods {
		for _, s := range [][]trace.Point{tr.Pods[i].Memory, tr.Pods[i].Compute} {
			for _, pt := range s {
				ts = append(ts, at{pt.T, i})
			}
		}
	}
	if len(ts) < 2 {
		return nil
	}
	slices.SortFunc(ts, func(a, b at) int { return a.t.Compare(b.t) })
	span, k := ts[len(ts)-1].t.Sub(ts[0].t), 0
	for i := 1; i < len(ts); i++ {
		if ts[i].t.Sub(ts[i-1].t) > ts[k+1].t.Sub(ts[k].t) {
			k = i - 1
		}
	}
	hole := ts[k+1].t.Sub(ts[k].t)
	if hole <= minHole || hole <= span-hole {
		return nil
	}
	name := func(a at) string {
		p := &tr.Pods[a.pod]
		return fmt.Sprintf("%s (%s/%s container %s)", a.t.UTC().Format(time.RFC3339), p.Namespace, p.Pod, p.Container)
	}
	return fmt.Errorf("no sample for %s, between %s and %s: longer than all the rest of the trace (%s); a timestamp out of place, or two traces in one: drop the stray samples or replay the parts apart",
		hole, name(ts[k]), name(ts[k+1]), span-hole)
}

// medianSpacing returns the median time between consecutive sample times (memory and
// compute together) of one trace pod, over every pod; 0 when no pod has two. A gap that
// ends a pod (Options.Lookback) is far longer than it; a lookback shorter would end
// every pod at each sample.
func medianSpacing(tr *trace.Trace) time.Duration {
	var gaps []time.Duration
	var times []int64
	for _, p := range tr.Pods {
		times = times[:0]
		for _, s := range [][]trace.Point{p.Memory, p.Compute} {
			for _, pt := range s {
				times = append(times, pt.T.UnixNano())
			}
		}
		slices.Sort(times)
		for i := 1; i < len(times); i++ {
			if d := times[i] - times[i-1]; d > 0 {
				gaps = append(gaps, time.Duration(d))
			}
		}
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// lifetimes splits the union of the pod's memory and compute sample times at gaps longer
// than lookback (0: none) and returns the first and last sample time of each part, in order; none
// when the pod has no sample.
func lifetimes(p *trace.Pod, lookback time.Duration) [][2]time.Time {
	var times []time.Time
	for _, s := range [][]trace.Point{p.Memory, p.Compute} {
		for _, pt := range s {
			times = append(times, pt.T)
		}
	}
	if len(times) == 0 {
		return nil
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	var bounds [][2]time.Time
	from := times[0]
	for i := 1; i < len(times); i++ {
		if lookback > 0 && times[i].Sub(times[i-1]) > lookback {
			bounds = append(bounds, [2]time.Time{from, times[i-1]})
			from = times[i]
		}
	}
	return append(bounds, [2]time.Time{from, times[len(times)-1]})
}

// newRun returns the run of pod p between the sample times b[0] and b[1] (inclusive):
// per step the peak memory and the mean compute of its samples, and both filled with
// the last sample over steps without one. The caller sets tracePod, workload and wc.
func (tl *timeline) newRun(p *trace.Pod, b [2]time.Time) run {
	r := run{
		name:  p.Namespace + "/" + p.Pod,
		id:    metrics.ContainerID{Namespace: p.Namespace, Pod: p.Pod, Container: p.Container},
		start: tl.stepOf(b[0]),
		end:   tl.stepOf(b[1]),
	}
	n := r.end - r.start + 1
	r.memRaw, r.memLow, r.cpuRaw = nanSlice(n), nanSlice(n), nanSlice(n)
	cpuN := make([]int, n)
	for _, pt := range p.Memory {
		if pt.T.Before(b[0]) || pt.T.After(b[1]) {
			continue
		}
		i := tl.stepOf(pt.T) - r.start
		if math.IsNaN(r.memRaw[i]) || pt.V > r.memRaw[i] {
			r.memRaw[i] = pt.V
		}
		if math.IsNaN(r.memLow[i]) || pt.V < r.memLow[i] {
			r.memLow[i] = pt.V
		}
	}
	for _, pt := range p.Compute {
		if pt.T.Before(b[0]) || pt.T.After(b[1]) {
			continue
		}
		i := tl.stepOf(pt.T) - r.start
		if cpuN[i] == 0 {
			r.cpuRaw[i] = 0
		}
		r.cpuRaw[i] += pt.V
		cpuN[i]++
	}
	for i := range cpuN {
		if cpuN[i] > 0 {
			r.cpuRaw[i] /= float64(cpuN[i])
		}
	}
	r.mem, r.peakMem = fill(r.memRaw)
	r.cpu, r.peakCPU = fill(r.cpuRaw)
	return r
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// fill replaces NaN with the last value seen (a run's first step always has a sample of
// one signal; the other is 0 until its first sample) and returns the filled copy and its
// maximum.
func fill(raw []float64) ([]float64, float64) {
	out := make([]float64, len(raw))
	last, peak := 0.0, 0.0
	for i, v := range raw {
		if !math.IsNaN(v) {
			last = v
		}
		out[i] = last
		peak = math.Max(peak, out[i])
	}
	return out, peak
}

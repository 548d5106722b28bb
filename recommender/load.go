package recommender

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// kube-state-metrics ownership series.
const (
	ksmPodOwner        = "kube_pod_owner"
	ksmPodCreated      = "kube_pod_created"
	ksmPodCompletion   = "kube_pod_completion_time"
	ksmReplicaSetOwner = "kube_replicaset_owner"
)

// load reads the samples of (from, to] for the given namespaces and feeds them to the
// model, in slices (sliceEnd) so that what is held at once is bounded however long the
// window: a history bootstrap of days is read (readSlice) and fed (applySlice) one
// slice at a time, the next slice read while one is fed. A query error ends the load:
// the slices before it stay fed (each one all-or-nothing), the workloads stay
// un-bootstrapped so every recommendation is kept
// (the cycle fails), and the next cycle resumes after the last slice fed
// (tracking.fedTo; the model skips samples it has, history.Model.Add).
//
// Only samples of workloads whose bootstrapped state equals bootstrapped are fed: a
// live load must not feed a workload whose history load is still to come (its
// samples would then count as already seen), and a history load must not feed
// workloads that already have their history. A load that is not whole (Recommender.dataEnd:
// no whole compute window is held since the last load) reads memory alone, for what the
// cycle checks (dataGap and the conditions it feeds), and feeds nothing to the model: the
// next whole load reads it again, with the compute its stale memory is judged by.
func (r *Recommender) load(ctx context.Context, namespaces []string, from, to time.Time, down []metrics.Target, attr *workload.Attributor, bootstrapped, whole bool) error {
	sel := metrics.Selector{Labels: r.Reader.Labels, Namespaces: namespaces, Direct: r.Config.LabelMode == "direct"}
	// Impossible samples are filtered inside PromQL and counted by companion queries. A
	// history load counts only its last MaxDropCountWindow: counting costs about three
	// times the data queries over the same window (measured: 48 h of 50 pods, 8 s
	// against 3 s). Samples of series without a pod label are counted once per window
	// however many loads a cycle makes (they belong to no namespace).
	dropFrom := from
	if to.Sub(from) > MaxDropCountWindow {
		dropFrom = to.Add(-MaxDropCountWindow)
	}
	missFrom := dropFrom
	if missFrom.Before(r.missingCounted) {
		missFrom = r.missingCounted
	}
	recs := r.recordedLoads(ctx, sel, from, to, bootstrapped)
	series := r.livePodsIn(namespaces)
	var unshared map[string]bool
	var owners *ksmOwners
	if r.sliceEnd(from, to, series).Before(to) {
		unshared = r.unsharedSources(ctx, sel, from, to)
		owners = r.loadOwners(ctx, sel, from, to)
	}
	// readFrom reads the slice that starts at a, sized for about series series.
	readFrom := func(a time.Time, first bool, series int) *sliceRead {
		b := r.sliceEnd(a, to, series)
		var cpu computeSpan
		if whole {
			cpu = computePoints(from, to, a, b, r.Config.Interval)
		}
		sr := &sliceRead{to: b, first: first}
		sr.data, sr.err = r.readSlice(ctx, sel, a, b, cpu, b.Equal(to), dropFrom, missFrom, down, recs, unshared, owners)
		return sr
	}
	cur := readFrom(from, true, series)
	for {
		if cur.err != nil {
			return cur.err
		}
		// The next slice's queries run while this one is fed: Prometheus answers (and
		// the remote read is decoded) on one core while the model is fed on the other.
		// Reads change no state and use only what a cycle sets before its loads (the
		// live pods, the sources, the configuration), so the overlap changes nothing
		// fed; it holds two slices' samples at once (HistorySliceSamples).
		var next chan *sliceRead
		if !cur.to.Equal(to) {
			next = make(chan *sliceRead, 1)
			go func(a time.Time, series int) { next <- readFrom(a, false, series) }(cur.to, max(cur.data.series, 1))
		}
		r.applySlice(cur.data, namespaces, cur.to, whole, cur.first, attr, bootstrapped)
		if next == nil {
			return nil
		}
		cur = <-next
	}
}

// sliceRead is one slice of a load, read (readSlice) and waiting to be fed: its end,
// whether it is the load's first, and its data or the error that ends the load.
type sliceRead struct {
	to    time.Time
	first bool
	data  *sliceData
	err   error
}

// sliceData is what readSlice read of one slice, before any state changes.
type sliceData struct {
	own  *workload.Ownership
	data []*sourceData
	// series counts the series the sources read (each source's memory or compute
	// series, the more): the next slice is sized for it.
	series int
}

// DefaultHistorySliceSamples is the default Config.HistorySliceSamples: 1,000,000
// compute samples, about 32 MB as decoded samples (metrics.Sample), against 3.7 GB for
// 8 days of 10,000 pods read at once.
const DefaultHistorySliceSamples = 1_000_000

// DefaultHistorySliceAlignment is the default Config.HistorySliceAlignment: 2 hours,
// Prometheus' TSDB block range (--storage.tsdb.min-block-duration's default; Mimir's and
// Cortex' blocks too). Blocks start on its multiples and no chunk crosses a block, so a
// slice that ends on one cuts no chunk: the remote read sends the chunks as stored. One
// that ends inside a chunk (per-minute samples fill one chunk per block) makes Prometheus
// decode the chunk and encode the part in range anew for each of the two slices it
// spans: 41 s of Prometheus' 147 s of CPU in the first 240 s of a bootstrap of 8 days
// of 10,000 pods in hourly slices (docs/benchmarks.md).
const DefaultHistorySliceAlignment = 2 * time.Hour

// sliceEnd returns the end of the slice of a load of (a, to] that starts at a, for
// about series series: Config.HistorySliceSamples ÷ series cycle intervals, on a
// boundary of both the memory aggregation interval (so no memory window is split
// between slices) and Config.HistorySliceAlignment (sliceAlignment), at least one
// such step after a, and to for the last.
func (r *Recommender) sliceEnd(a, to time.Time, series int) time.Time {
	step := r.sliceAlignment()
	points := max(1, r.Config.HistorySliceSamples/max(series, 1))
	b := a.Add(time.Duration(points) * r.Config.Interval).Truncate(step)
	if !b.After(a) {
		b = a.Truncate(step).Add(step)
	}
	if !b.Before(to) {
		return to
	}
	return b
}

// sliceAlignment is the span slices end on multiples of: the least common multiple of
// the memory aggregation interval and Config.HistorySliceAlignment, or the aggregation
// interval alone where the alignment is negative or the multiple is over a day (an
// aggregation interval that shares no whole span with the blocks').
func (r *Recommender) sliceAlignment() time.Duration {
	agg, align := r.model.Options().MemoryAggregationInterval, r.Config.HistorySliceAlignment
	if align <= 0 || agg <= 0 {
		return agg
	}
	a, b := agg, align
	for b != 0 {
		a, b = b, a%b
	}
	if lcm := agg / a * align; lcm <= 24*time.Hour {
		return lcm
	}
	return agg
}

// computeSpan is the compute points one slice of a load reads (computePoints): from
// first to last, one cycle interval apart, each the mean over the interval that ends
// at it. ok is false when the slice reads none.
type computeSpan struct {
	first, last time.Time
	ok          bool
}

// computePoints returns the compute points of the slice (a, b] of a load of (from, to]
// at step (the cycle interval). The points of every slice lie on the one grid that ends
// at to (to, to − step, …), each within (from, to] with the step before it, and each
// belongs to the slice whose (a, b] holds it, so the slices of a load read every window
// once: a slice boundary off the grid (slices end on aggregation boundaries, the load at
// the cycle's now) neither skips the seconds after it nor reads a window twice. A load
// of (from, to] reads ⌊(to − from) ÷ step⌋ points ending at to, one (at to, with its
// last slice) when shorter than a step: the first (to − from) mod step after from are
// not read. Live loads end on one grid of steps (Recommender.dataEnd), so (to − from)
// is a whole number of steps and nothing is left out.
func computePoints(from, to, a, b time.Time, step time.Duration) computeSpan {
	if to.Sub(from) < step {
		return computeSpan{first: to, last: to, ok: b.Equal(to)}
	}
	ceil := func(d time.Duration) int64 { return int64((d + step - 1) / step) }
	kMin := ceil(to.Sub(b))                                    // the last point at or before b
	kMax := min(ceil(to.Sub(a))-1, int64(to.Sub(from)/step)-1) // the first after a, its window within the load
	if kMax < kMin {
		return computeSpan{}
	}
	return computeSpan{first: to.Add(-time.Duration(kMax) * step), last: to.Add(-time.Duration(kMin) * step), ok: true}
}

// livePodsIn counts the live pods in the namespaces (at least 1): the first slice's
// guess at the series a load reads.
func (r *Recommender) livePodsIn(namespaces []string) int {
	n := 0
	for k := range r.cur.livePods {
		if slices.Contains(namespaces, k[0]) {
			n++
		}
	}
	return max(n, 1)
}

// readSlice reads the samples of (from, to], one slice of a load, without changing any
// state (applySlice feeds them). For each source read this cycle (order) it issues a
// fixed set of queries whatever the number of pods (read); before them, the two
// kube-state-metrics ownership series and, unless every source read is the agent, the
// GPUs the agent saw each pod on (metrics.AllocationQuery; with the backends'
// annotations, the authority that series naming another GPU contradict). Any query
// error aborts the slice before the model changes. down are the scrape targets down at
// to, read once per cycle. last: the load's last slice (the diagnostic counts of
// (dropFrom, to] and (missFrom, to] run with it). cpu: the slice's compute points
// (computePoints). recs: the sources whose hourly memory the load reads from their
// recordings (recordedLoads). unshared: the sources no device of which had several pods
// over the whole load (unsharedSources), whose slices need not ask. owners: the
// controller owners read over the whole load (loadOwners; nil: the slice reads its own).
func (r *Recommender) readSlice(ctx context.Context, sel metrics.Selector, from, to time.Time, cpu computeSpan, last bool,
	dropFrom, missFrom time.Time, down []metrics.Target, recs map[string]*recordedLoad, unshared map[string]bool, owners *ksmOwners) (*sliceData, error) {
	// Ownership first: it decides attribution of the samples below.
	own, err := r.loadOwnership(ctx, sel, to.Sub(from), to, owners)
	if err != nil {
		return nil, err
	}
	// The GPUs each pod was seen on by an authority other than the source: series that
	// name another GPU are not used (issue 13 kind 10), and the agent's own replace them.
	alloc, err := r.allocation(ctx, sel, from, to)
	if err != nil {
		return nil, err
	}
	sd := &sliceData{own: own}
	for _, src := range r.order() {
		d, err := r.read(ctx, src, sel, from, to, cpu, last, dropFrom, missFrom, down, alloc, recs[src.Name()], unshared[src.Name()])
		if err != nil {
			return nil, err
		}
		sd.data = append(sd.data, d)
		sd.series += max(len(d.memory), len(d.compute))
	}
	return sd, nil
}

// applySlice changes state with a slice of (…, to] that readSlice read in full (each
// slice is all-or-nothing): the missing and dropped samples, ownership, the sources
// observed, and the samples, each pod's from the source chosen for it (sources.go), fed
// to the model (with model; else only counted for the cycle's checks). first: the
// load's first slice (what the load lacked is collected from it on, dataGaps).
func (r *Recommender) applySlice(sd *sliceData, namespaces []string, to time.Time, model, first bool, attr *workload.Attributor, bootstrapped bool) {
	data, own := sd.data, sd.own
	countFailed := r.countMissing(data)
	r.startGaps(namespaces, to, first, countFailed, bootstrapped)
	for _, d := range data {
		r.countDrops(metrics.SignalMemory, d.memDrops, attr, bootstrapped)
		r.countDrops(metrics.SignalCompute, d.cpuDrops, attr, bootstrapped)
	}
	for k, o := range own.Pods {
		r.ownership.Pods[k] = o
	}
	for k, o := range own.ReplicaSets {
		r.ownership.ReplicaSets[k] = o
	}
	for k, lives := range own.Lives {
		for uid, l := range lives {
			r.ownership.AddLife(k, uid, l)
		}
	}
	r.observe(data, attr, bootstrapped)
	// Least precise first: a pod's samples of each source cover one span of time, the
	// less precise ones earlier, and the model takes each pod's samples in time order.
	for i := len(data) - 1; i >= 0; i-- {
		d := data[i]
		r.downTargets(d, attr, bootstrapped)
		memory := r.dropStale(d.src, d.memory, d.flat, d.contradicted, d.compute, attr, bootstrapped)
		r.feed(metrics.SignalMemory, r.choose(d.src, metrics.SignalMemory, memory), attr, bootstrapped, model, time.Time{})
		r.feed(metrics.SignalCompute, r.choose(d.src, metrics.SignalCompute, d.compute), attr, bootstrapped, model, d.recordedUntil)
	}
}

// countMissing records the slice's dropped samples per source and counts the samples
// without pod labels up to the sources' count window, unless a source's count failed,
// which holds the window back for all. It reports whether a source's drop count failed.
func (r *Recommender) countMissing(data []*sourceData) (countFailed bool) {
	var missing [2]float64
	var missTo time.Time
	missFailed := false
	for _, d := range data {
		d.memDrops.Record(metrics.SignalMemory)
		d.cpuDrops.Record(metrics.SignalCompute)
		missing[0], missing[1], missTo = missing[0]+d.missing[0], missing[1]+d.missing[1], d.missTo
		countFailed, missFailed = countFailed || d.countFailed, missFailed || d.missFailed
	}
	if !missFailed && missTo.After(r.missingCounted) {
		metrics.SamplesDropped.WithLabelValues(string(metrics.SignalMemory), metrics.DropNoLabels).Add(missing[0])
		metrics.SamplesDropped.WithLabelValues(string(metrics.SignalCompute), metrics.DropNoLabels).Add(missing[1])
		r.missingCounted = missTo
	}
	return countFailed
}

// startGaps prepares the tracked workloads of namespaces in this load (bootstrapped or
// not) for the slice ending at to: a new workload is fed up to to, and on the load's
// first slice what the load lacked (dataGaps) starts empty.
func (r *Recommender) startGaps(namespaces []string, to time.Time, first, countFailed, bootstrapped bool) {
	inNS := map[string]bool{}
	for _, ns := range namespaces {
		inNS[ns] = true
	}
	for w, t := range r.tracked {
		if !inNS[w.Namespace] || t.bootstrapped != bootstrapped {
			continue
		}
		if !bootstrapped {
			t.fedTo = to
		}
		if first {
			t.gaps.kept, t.gaps.dropped = map[metrics.Signal]int{}, map[metrics.Signal]float64{}
			t.gaps.droppedPods = map[string][]metrics.Signal{}
			t.gaps.unattributed = map[string]string{}
			t.gaps.stale = map[string]string{}
			t.gaps.zeroBusy = map[string]string{}
			t.gaps.down = map[string]string{}
			t.gaps.wrongDevice = map[string]string{}
			t.gaps.podCompute = map[string]int{}
			t.gaps.podMemory = map[string]int{}
			t.gaps.countFailed = false
			t.gaps.loaded = true
		}
		t.gaps.countFailed = t.gaps.countFailed || countFailed
	}
}

// sourceData is what one source's queries returned in one load.
type sourceData struct {
	src metrics.Source
	// memory: peaks; flat: their standard deviation (FlatQuery); contradicted: 1 where
	// the agent contradicts them (ContradictedQuery); compute: means.
	memory, flat, contradicted, compute []metrics.Series
	// recordedUntil is the end of the last run of hours whose compute was read from the
	// recordings (readCompute); zero when none was. Those hours' minute means are
	// stamped a minute apart whatever the scrape, so the scrape's spacing is learnt only
	// from the samples after it (sampleSpacing.add).
	recordedUntil      time.Time
	memDrops, cpuDrops metrics.PodDrops
	missing            [2]float64 // samples without a pod label: memory, compute
	missTo             time.Time  // end of the window missing counts
	// countFailed: a diagnostic query failed (diagnose); the drop counts are unknown.
	// missFailed: the count of samples without a pod label failed (missing is 0).
	countFailed, missFailed bool
	onDown                  []metrics.PodTarget
}

// read runs one source's queries for a slice (from, to] of a load: its data queries
// (readData; compute at the points cpu), for a source other than the agent with alloc checked (and, where the agent
// is not read as a source too, the agent's own data for the pods whose series named a
// GPU it did not see them on: agentWins); and with the load's last slice the impossible
// samples and those without a pod label (counted, not fed) and, when scrape targets
// are down, which pods they served. rec, when set, reads the whole hours' memory from
// the source's recordings (readData). It returns the first query error.
func (r *Recommender) read(ctx context.Context, src metrics.Source, sel metrics.Selector, from, to time.Time, cpu computeSpan, last bool, dropFrom, missFrom time.Time,
	down []metrics.Target, alloc metrics.Allocation, rec *recordedLoad, unshared bool) (*sourceData, error) {
	rd := *r.Reader
	rd.Device = src.DeviceLabels()
	sel.Device = src.DeviceLabels()
	if !metrics.PerProcess(src.MemoryMetric()) {
		rd.Allocation = alloc
	}
	d, err := r.readData(ctx, &rd, src, sel, from, to, cpu, rec, unshared)
	if err != nil {
		return nil, err
	}
	if rd.Allocation != nil && !r.reads(metrics.Agent) {
		if d.memory, d.flat, d.compute, err = r.agentWins(ctx, alloc, sel, from, to, cpu, d.memory, d.flat, d.compute); err != nil {
			return nil, err
		}
	}
	if last {
		r.diagnose(ctx, d, &rd, sel, from, to, dropFrom, missFrom, down)
	}
	return d, ctx.Err()
}

// diagnose runs one source's diagnostic queries for a load: the impossible samples
// (d.memDrops, d.cpuDrops) and those without a pod label (d.missing, d.missTo), and,
// when scrape targets are down, which pods they served (d.onDown). They only explain
// the data: the data queries filter impossible samples inside PromQL and every other
// query succeeded. So a failed diagnostic (a count over 10,000 pods that times out)
// never fails the load: it is logged, counted in
// gpufrac_recommender_incomplete_data_total{reason="count_failed"}, its counts stay
// unknown (d.countFailed: no workload of the load is told AllSamplesFiltered from it),
// and the window of unlabelled samples counted is not advanced (d.missFailed: another
// load of the cycle may count it).
func (r *Recommender) diagnose(ctx context.Context, d *sourceData, rd *metrics.Reader, sel metrics.Selector, from, to, dropFrom, missFrom time.Time, down []metrics.Target) {
	failed := func(what string, err error) {
		d.countFailed = true
		metrics.Incomplete.WithLabelValues(metrics.IncompleteCountFailed).Inc()
		klog.FromContext(ctx).Error(err, "Diagnostic query failed; the cycle goes on without it", "query", what, "source", d.src.Name(),
			"from", from, "to", to)
	}
	var err error
	if d.memDrops, err = rd.CountDropped(ctx, metrics.SignalMemory, sel, d.src.Fields(metrics.SignalMemory), dropFrom, to); err != nil {
		failed("impossible memory samples", err)
	}
	if d.cpuDrops, err = rd.CountDropped(ctx, metrics.SignalCompute, sel, d.src.Fields(metrics.SignalCompute), dropFrom, to); err != nil {
		failed("impossible compute samples", err)
	}
	for i, sig := range []metrics.Signal{metrics.SignalMemory, metrics.SignalCompute} {
		if d.missing[i], d.missTo, err = rd.CountMissingLabels(ctx, sel, d.src.Fields(sig), missFrom, to); err != nil {
			failed("samples without a pod label", err)
			d.missing, d.missFailed = [2]float64{}, true
			break
		}
	}
	if d.onDown, err = rd.PodsOnTargets(ctx, d.src, sel, down, r.Config.HistoryLength, to); err != nil {
		failed("pods on down scrape targets", err)
	}
}

// readData runs the data queries of one source for the load (from, to] with rd: memory
// peaks of whole aggregation intervals (range; with rec, from the source's recordings
// where they hold the hour, readRecorded) and of the running one (instant), each with its
// companions (readMemory), and compute at the cycle interval (range) at the points cpu
// (none when !cpu.ok) with its copies companion (metrics.CopiesQuery; with rec reading compute, whole
// hours from the source's recorded quantiles, readCompute). It returns the first query
// error.
func (r *Recommender) readData(ctx context.Context, rd *metrics.Reader, src metrics.Source, sel metrics.Selector, from, to time.Time, cpu computeSpan, rec *recordedLoad, unshared bool) (*sourceData, error) {
	d := &sourceData{src: src}
	agg := r.model.Options().MemoryAggregationInterval
	// The first whole interval ending after from: a window ending at from is before the
	// load (from is the end of the last one, or of the previous slice).
	firstBoundary, lastBoundary := from.Truncate(agg).Add(agg), to.Truncate(agg)
	plan := r.plan(ctx, rd, src, sel, from, to, rec == nil, unshared)
	sel.Present = plan.present
	if !lastBoundary.Before(firstBoundary) {
		var err error
		if rec != nil {
			err = d.readRecorded(ctx, rd, sel, plan, rec, firstBoundary, lastBoundary, r.agentSeen())
		} else {
			err = d.readMemory(ctx, rd, sel, plan, rawMemory{src, plan.memDirty, plan.memSamples}, agg, firstBoundary, lastBoundary, r.agentSeen())
		}
		if err != nil {
			return nil, err
		}
	}
	if partial := to.Sub(lastBoundary); partial >= time.Second {
		if err := d.readMemory(ctx, rd, sel, plan, rawMemory{src, plan.memDirty, plan.memSamples}, partial, to, to, r.agentSeen()); err != nil {
			return nil, err
		}
	}
	if !cpu.ok {
		return d, nil
	}
	if err := d.readCompute(ctx, rd, sel, plan, rec, cpu, r.Config.Interval); err != nil {
		return nil, err
	}
	return d, nil
}

// SplitMinWindow is the shortest load whose reads are planned (plan): one memory
// aggregation interval. A live cycle's reads would not repay the extra queries, so they
// are unchanged.
const SplitMinWindow = time.Hour

// readPlan is what a load learns before its data queries: which namespaces hold an
// impossible raw sample (metrics.SplitQuery; nil: read all with the robust form) and
// whether a device value copied to several pods is possible (metrics.SharedDevices).
type readPlan struct {
	memDirty, cpuDirty map[string]bool
	copies             bool
	// cpuSamples and memSamples, when not nil, read compute and the memory peaks from
	// raw samples (metrics.Reader.RangeFromSamples), which drops impossible samples
	// itself: cpuDirty and memDirty are then not looked for.
	cpuSamples, memSamples *metrics.SampleRead
	// present says which branches of the data queries have series in the load's
	// windows (metrics.Reader.Presence); nil: every branch is read.
	present *metrics.Presence
}

// plan returns, for a load of (from, to] of at least SplitMinWindow, the namespaces
// whose raw memory and compute samples in the windows it reads (from one memory
// aggregation interval before from) hold an impossible value
// (metrics.Reader.DirtyNamespaces), and whether any device had two or more pods there;
// for a shorter load, every namespace robust and copies looked for. It first finds
// which fields and label forms have series there (metrics.Reader.Presence), so that the
// plan's own check and the load's data queries leave out the branches that match
// nothing (the selector it returns carries it); a failure reads every branch. Where no
// device had several pods and the compute query is one series selector
// (metrics.ComputeSamples), compute is read from raw samples (readPlan.cpuSamples) and
// its namespaces are not looked at. Without memory
// (the hourly memory is read from recordings, readRecorded) the memory namespaces are not
// looked at: memDirty stays nil (robust) for the running interval's instant read. A query
// that fails leaves its part at the always-right answer (robust, copies looked for),
// logged.
func (r *Recommender) plan(ctx context.Context, rd *metrics.Reader, src metrics.Source, sel metrics.Selector, from, to time.Time, memory, unshared bool) readPlan {
	p := readPlan{copies: true}
	if to.Sub(from) < SplitMinWindow {
		return p
	}
	from = from.Add(-r.model.Options().MemoryAggregationInterval)
	log := klog.FromContext(ctx).V(2)
	fields := slices.Concat(src.Fields(metrics.SignalMemory), src.Fields(metrics.SignalCompute))
	present, err := rd.Presence(ctx, sel, fields, from, to)
	if err != nil {
		log.Info("Finding which fields have series failed; reading every query branch", "source", src.Name(), "err", err)
	}
	p.present, sel.Present = present, present
	find := func(sig metrics.Signal) map[string]bool {
		d, err := rd.DirtyNamespaces(ctx, sel, src.Fields(sig), from, to)
		if err != nil {
			log.Info("Finding namespaces with impossible samples failed; reading them all with the robust queries", "signal", sig, "source", src.Name(), "err", err)
		}
		return d
	}
	if !unshared {
		shared, err := rd.SharedDevices(ctx, src, sel, from, to)
		if err != nil {
			log.Info("Finding devices shared by several pods failed; looking for copied values on all", "source", src.Name(), "err", err)
		}
		p.copies = shared || err != nil
	} else {
		p.copies = false
	}
	// Raw samples where no copy is to be matched (the copies companion's values are
	// Prometheus' own means and peaks) and the data query is one series selector.
	if memory {
		if sr, ok := metrics.MemorySamples(src, sel); ok && !p.copies {
			p.memSamples = &sr
		} else {
			p.memDirty = find(metrics.SignalMemory)
		}
	}
	if sr, ok := metrics.ComputeSamples(src, sel); ok && !p.copies {
		p.cpuSamples = &sr
	} else {
		p.cpuDirty = find(metrics.SignalCompute)
	}
	return p
}

// unsharedSources returns the sources read (order) no device of which had two or more
// pods over the whole load (from, to], with the memory aggregation interval before it
// that plan's slices look at too (metrics.Reader.SharedDevices): no slice of the load can
// have one (a slice's series are among the load's), so its slices need not ask. One
// series request per source for the load, where each slice asked one: at 10,000 pods
// each answer is 20,000 label sets, whose decoding was 12 % of the recommender's CPU in a
// bootstrap of 8 days (docs/benchmarks.md). A source whose question fails, or where a
// device had several pods, is asked again per slice.
func (r *Recommender) unsharedSources(ctx context.Context, sel metrics.Selector, from, to time.Time) map[string]bool {
	if to.Sub(from) < SplitMinWindow {
		return nil
	}
	from = from.Add(-r.model.Options().MemoryAggregationInterval)
	out := map[string]bool{}
	for _, src := range r.order() {
		s := sel
		s.Device = src.DeviceLabels()
		shared, err := r.Reader.SharedDevices(ctx, src, s, from, to)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Finding devices shared by several pods over the load failed; asking per slice", "source", src.Name(), "err", err)
		}
		out[src.Name()] = err == nil && !shared
	}
	return out
}

// copiesQuery is metrics.CopiesQuery, or "" where the plan says no copy is possible.
func (p readPlan) copiesQuery(src metrics.Source, sel metrics.Selector, signal metrics.Signal, window time.Duration) string {
	if !p.copies {
		return ""
	}
	return metrics.CopiesQuery(src, sel, signal, window)
}

// memoryQueries writes a load's memory reads of one source: the peaks (bytes) of the
// windows ending at each step, and their flatness (0 where a window was flat). One
// implementation per way of reading: rawMemory (the exporters' series) and
// recordedMemory (the gpufrac-history recordings, recorded.go).
type memoryQueries interface {
	peaks(sel metrics.Selector, window time.Duration) string
	flat(sel metrics.Selector, window time.Duration) string
	// samples, when not nil, reads the peaks from raw samples instead
	// (metrics.Reader.RangeFromSamples), peaks only where the backend refuses them.
	samples() *metrics.SampleRead
}

// rawMemory reads the source's raw series: from raw samples where the plan says so
// (sr), else split by the namespaces holding an impossible sample (dirty,
// metrics.SplitQuery; nil: all robust).
type rawMemory struct {
	src   metrics.Source
	dirty map[string]bool
	sr    *metrics.SampleRead
}

func (q rawMemory) samples() *metrics.SampleRead { return q.sr }

func (q rawMemory) peaks(sel metrics.Selector, window time.Duration) string {
	return metrics.SplitQuery(sel, q.dirty, func(s metrics.Selector) string { return q.src.MemoryPeakQuery(s, window) })
}

func (q rawMemory) flat(sel metrics.Selector, window time.Duration) string {
	return metrics.SplitQuery(sel, q.dirty, func(s metrics.Selector) string { return metrics.FlatQuery(q.src, s, window) })
}

// readMemory reads the source's memory peaks of the windows ending at each step of
// [from, to] (one window: an instant query at to when from equals to) with mq, with their
// copies, flatness (only where the source's memory may go stale,
// metrics.MemoryMayGoStale) and, with contradict, contradiction companions (copies only
// where the plan says they are possible; copies and contradictions always from the raw
// series). It returns the first error.
func (d *sourceData) readMemory(ctx context.Context, rd *metrics.Reader, sel metrics.Selector, plan readPlan, mq memoryQueries, window time.Duration, from, to time.Time, contradict bool) error {
	read := func(q, copies string) ([]metrics.Series, error) {
		if from.Equal(to) {
			return rd.InstantShared(ctx, metrics.SignalMemory, q, copies, to, window)
		}
		return rd.RangeShared(ctx, metrics.SignalMemory, q, copies, from, to, window)
	}
	query := func(mq memoryQueries) func() ([]metrics.Series, error) {
		return func() ([]metrics.Series, error) {
			return read(mq.peaks(sel, window), plan.copiesQuery(d.src, sel, metrics.SignalMemory, window))
		}
	}
	var s []metrics.Series
	var err error
	if sr := mq.samples(); sr != nil {
		// Refused as too large: the query, every namespace robust.
		s, err = rd.RangeFromSamplesOr(ctx, metrics.SignalMemory, *sr, from, to, window, query(rawMemory{src: d.src}))
	} else {
		s, err = query(mq)()
	}
	if err != nil {
		return err
	}
	d.memory = append(d.memory, withWindow(s, window)...)
	// Flatness only tells stale memory, which a source whose memory drops when the
	// process exits (DCGM's framebuffer memory, the agent's) never holds: dropStale
	// reads it for the others only.
	if metrics.MemoryMayGoStale(d.src) {
		f, err := read(mq.flat(sel, window), "")
		if err != nil {
			return err
		}
		d.flat = append(d.flat, f...)
	}
	if q := metrics.ContradictedQuery(d.src, sel, window); q != "" && contradict {
		c, err := read(q, "")
		if err != nil {
			return err
		}
		d.contradicted = append(d.contradicted, c...)
	}
	return nil
}

// dropStale removes stale memory samples: a value left behind by a process that exited
// (HAMi's hami_vgpu_memory_used_bytes stays at the last value while its utilisation
// reads 0), used neither as a live peak nor as a lower bound. A sample is stale when
//   - the gpufrac agent contradicts it (contradicted, metrics.ContradictedQuery: the
//     agent watched the GPU through the sample's window and saw no process of the pod
//     on it), or
//   - the source's memory may go stale (metrics.MemoryMayGoStale: HAMi, KAI; not DCGM's
//     framebuffer memory nor the agent's, which drop when the process exits), the series
//     stayed flat over the sample's window (flat, metrics.FlatQuery: standard deviation
//     0), the value is above 0, and every compute sample of the same container whose
//     own window lies inside it reads 0 (at least one, for a window of metrics.StaleMinWindow or
//     more; a shorter window only where it repeats the value last judged stale).
//
// Each is counted (samples_dropped_total{reason="stale"}) and its pod named in the
// workload's MetricsUnavailable=True (reason StaleSeries) condition.
//
// It also removes, where the source's memory does not go stale, samples of 0 bytes
// whose window holds compute above 0 (metrics.ZeroWhileBusy: memory the exporter failed
// to see), counted as samples_dropped_total{reason="zero_while_busy"} and named in the
// MetricsUnavailable=True (reason ZeroMemoryWhileBusy) condition: no data, not zero.
func (r *Recommender) dropStale(src metrics.Source, memory, flat, contradicted, compute []metrics.Series, attr *workload.Attributor, bootstrapped bool) []metrics.Series {
	mayGoStale := metrics.MemoryMayGoStale(src)
	if r.staleMem == nil {
		r.staleMem = metrics.StaleMemory{}
	}
	flatAt, againstAt := valuesAt(flat), valuesAt(contradicted)
	cpu := containerCompute{}
	for _, c := range compute {
		cpu.add(c)
	}
	out := memory[:0:0]
	for _, s := range memory {
		kept := s.Samples[:0:0]
		stale, against, zero := 0, 0, 0
		for _, p := range s.Samples {
			if _, ok := againstAt[s.ID][p.Time]; ok {
				against++
				continue
			}
			sd, ok := flatAt[s.ID][p.Time]
			n, busy, ran := cpu.activity(s.ID, p.Time.Add(-s.Window), p.Time)
			if !mayGoStale && metrics.ZeroWhileBusy(p.Value, ran) {
				zero++
				continue
			}
			if r.staleMem.Judge(s.ID, s.Window, p.Value, mayGoStale && ok && sd == 0, n, busy) {
				stale++
				continue
			}
			kept = append(kept, p)
		}
		if stale+against > 0 {
			r.noteStale(s, stale, against, attr, bootstrapped)
		}
		if zero > 0 {
			r.noteZeroWhileBusy(s, zero, attr, bootstrapped)
		}
		s.Samples = kept
		out = append(out, s)
	}
	return out
}

// noteStale counts the stale samples of memory series s (stale flat ones, against
// contradicted by the agent) and names its pod in the workload's StaleSeries condition.
func (r *Recommender) noteStale(s metrics.Series, stale, against int, attr *workload.Attributor, bootstrapped bool) {
	metrics.SamplesDropped.WithLabelValues(string(metrics.SignalMemory), metrics.DropStale).Add(float64(stale + against))
	why := fmt.Sprintf("stayed flat at %.0f MiB while its GPU activity read 0", kept0(s.Samples)/metrics.MiB)
	if against > 0 {
		why = "was contradicted by the gpufrac agent, which watched the GPU and saw no process of the pod on it"
	}
	if w, ok := r.fedBy(attr, s.ID, bootstrapped); ok && r.tracked[w].gaps.stale != nil {
		r.tracked[w].gaps.stale[s.ID.Pod] = fmt.Sprintf("%s of pod %s container %s %s, in %d windows: a value left by an exited process (stale series), used neither as a peak nor as a lower bound",
			s.Source, s.ID.Pod, s.ID.Container, why, stale+against)
	}
}

// noteZeroWhileBusy counts the samples of memory series s that read 0 while the
// container was busy (metrics.ZeroWhileBusy) and names its pod in the workload's
// ZeroMemoryWhileBusy condition.
func (r *Recommender) noteZeroWhileBusy(s metrics.Series, n int, attr *workload.Attributor, bootstrapped bool) {
	metrics.SamplesDropped.WithLabelValues(string(metrics.SignalMemory), metrics.DropZeroWhileBusy).Add(float64(n))
	if w, ok := r.fedBy(attr, s.ID, bootstrapped); ok && r.tracked[w].gaps.zeroBusy != nil {
		r.tracked[w].gaps.zeroBusy[s.ID.Pod] = fmt.Sprintf("%s of pod %s container %s read 0 MiB while its GPU activity was above 0, in %d windows: a process running kernels holds memory, so the exporter failed to see it (per-process attribution lost); those samples were not used",
			s.Source, s.ID.Pod, s.ID.Container, n)
	}
}

// valuesAt indexes series by container and sample time, the highest value where several
// series of a container meet.
func valuesAt(series []metrics.Series) map[metrics.ContainerID]map[time.Time]float64 {
	out := map[metrics.ContainerID]map[time.Time]float64{}
	for _, f := range series {
		if out[f.ID] == nil {
			out[f.ID] = map[time.Time]float64{}
		}
		for _, p := range f.Samples {
			out[f.ID][p.Time] = max(out[f.ID][p.Time], p.Value)
		}
	}
	return out
}

// containerCompute is the compute series of each container, each with whether its
// samples are in time order (as decoded series are).
type containerCompute map[metrics.ContainerID][]orderedSeries

type orderedSeries struct {
	metrics.Series
	ordered bool
}

// add adds a compute series.
func (cpu containerCompute) add(s metrics.Series) {
	ordered := slices.IsSortedFunc(s.Samples, func(a, b metrics.Sample) int { return a.Time.Compare(b.Time) })
	cpu[s.ID] = append(cpu[s.ID], orderedSeries{s, ordered})
}

// activity returns how many compute samples of the container lie inside (from, to]
// (their whole window) and whether any of them is above 0 (busy), and whether any
// sample above 0 has a window that overlaps (from, to] at all (ran: the container ran
// kernels at some time in it). It is asked for every memory sample: in a series in time
// order, only the samples that can count are looked at, the first found by binary
// search (a scan of every sample of the load for each memory window was 7 % of a
// 2,000-pod bootstrap's CPU profile, docs/benchmarks.md).
func (cpu containerCompute) activity(id metrics.ContainerID, from, to time.Time) (n int, busy, ran bool) {
	for _, c := range cpu[id] {
		samples := c.Samples
		if c.ordered {
			// Samples before from count for neither.
			samples = samples[sort.Search(len(samples), func(i int) bool { return !samples[i].Time.Before(from) }):]
		}
		for _, p := range samples {
			start := p.Time.Add(-c.Window)
			if c.ordered && start.After(to) {
				break // every later sample's window starts after to too
			}
			if !start.Before(from) && !p.Time.After(to) {
				n++
				busy = busy || p.Value > 0
			}
			ran = ran || p.Value > 0 && p.Time.After(from) && start.Before(to)
		}
	}
	return n, busy, ran
}

// downTargets notes, for the running pods of the workloads this load feeds, the scrape
// targets that are down now and served the series of the source the pod is read from
// (or of any source, for a pod none is chosen for yet).
func (r *Recommender) downTargets(d *sourceData, attr *workload.Attributor, bootstrapped bool) {
	for _, p := range d.onDown {
		w, ok := r.fedBy(attr, metrics.ContainerID{Namespace: p.Namespace, Pod: p.Pod}, bootstrapped)
		pod := r.cur.livePods[[2]string{p.Namespace, p.Pod}]
		if !ok || pod == nil || workload.Ended(pod) || r.tracked[w].gaps.down == nil {
			continue
		}
		if ps := r.pods[[2]string{p.Namespace, p.Pod}]; ps != nil && !slices.Contains(ps.current(r.order()), d.src.Name()) {
			continue // the pod is read from another source
		}
		r.tracked[w].gaps.down[p.Pod] = fmt.Sprintf("scrape target %s is down (up == 0): it served %s of running pod %s (%s source)",
			p.Target, p.Metric, p.Pod, d.src.Name())
	}
}

// kept0 is the last sample's value, 0 without samples.
func kept0(samples []metrics.Sample) float64 {
	if len(samples) == 0 {
		return 0
	}
	return samples[len(samples)-1].Value
}

// withWindow records the window each sample of the series aggregates (Series.Window).
func withWindow(series []metrics.Series, window time.Duration) []metrics.Series {
	for i := range series {
		series[i].Window = window
	}
	return series
}

// feed attributes each series to a tracked workload and adds it to the model (with
// model; else it only counts the samples for the workload's gap checks). Series of pods
// that belong to no autoscaler's target are ignored.
func (r *Recommender) feed(signal metrics.Signal, series []metrics.Series, attr *workload.Attributor, bootstrapped, model bool, recordedUntil time.Time) {
	// The samples kept of each series are copied into one buffer, reused from series to
	// series: what they are given to (the model, the gap check) keeps values, never the
	// slice. A copy per series was 7 % of the bytes a bootstrap of 8 days of 10,000
	// pods allocated (docs/benchmarks.md).
	var keptBuf []metrics.Sample
	var keptSrcBuf []string
	for _, s := range series {
		ref, method := attr.Attribute(s.ID.Namespace, s.ID.Pod)
		if method == workload.MethodNone {
			continue
		}
		w := history.WorkloadKey(ref)
		if t := r.tracked[w]; t == nil || t.bootstrapped != bootstrapped {
			continue
		}
		if s.WrongDevice != "" && r.tracked[w].gaps.wrongDevice != nil {
			r.tracked[w].gaps.wrongDevice[s.ID.Pod] = s.WrongDevice
		}
		if len(s.Samples) == 0 {
			continue // only says what was not used (WrongDevice)
		}
		if s.ID.Container == "" {
			// Pod-level usage (KAI's gpu_fractioning_* have no container label): the
			// pod's GPU container, never "".
			name, why := r.gpuContainer(w, s.ID.Namespace, s.ID.Pod)
			if name == "" {
				if g := r.tracked[w].gaps.unattributed; g != nil {
					g[s.ID.Pod] = why
				}
				metrics.SamplesDropped.WithLabelValues(string(signal), metrics.DropNoContainer).Add(float64(len(s.Samples)))
				continue
			}
			s.ID.Container = name
		}
		pod := r.cur.livePods[[2]string{s.ID.Namespace, s.ID.Pod}]
		var lives map[string]workload.Life
		if attr.KSM != nil {
			lives = attr.KSM.Lives[[2]string{s.ID.Namespace, s.ID.Pod}]
		}
		if pod != nil || lives != nil {
			var created time.Time
			if pod != nil {
				created = pod.CreationTimestamp.Time
			}
			kept := slices.Grow(keptBuf[:0], len(s.Samples))
			var keptSrc []string
			if s.Sources != nil {
				keptSrc = slices.Grow(keptSrcBuf[:0], len(s.Sources))
			}
			for i, p := range s.Samples {
				if pod != nil && !p.Time.Before(created) {
					at, ok := workload.StampInLife(pod, s.ID.Container, p.Time, s.Window, p.Value)
					if !ok {
						continue
					}
					kept = append(kept, metrics.Sample{Time: at, Value: p.Value})
				} else if at, ok := workload.StampAfterCompletion(lives, created, p.Time, s.Window); ok {
					// A pod that no longer exists, or an earlier pod of a live pod's
					// name (a StatefulSet replica before it was replaced, by a rollout
					// or by the updater): not the live pod's usage, but the same
					// workload's, attributed to it by the name as any ended pod's
					// samples are. Dropping it lost the replica's history at every
					// history load after a replacement. Only what came under the name
					// after a pod of it completed is no pod's usage.
					kept = append(kept, metrics.Sample{Time: at, Value: p.Value})
				} else {
					continue
				}
				if s.Sources != nil {
					keptSrc = append(keptSrc, s.Sources[i])
				}
			}
			keptBuf = kept
			if keptSrc != nil {
				keptSrcBuf = keptSrc
			}
			s.Sources = keptSrc
			if dropped := len(s.Samples) - len(kept); dropped > 0 {
				metrics.SamplesDropped.WithLabelValues(string(signal), metrics.DropOutsidePodLife).Add(float64(dropped))
			}
			s.Samples = kept
		}
		if pod != nil {
			if s.Devices > 1 && s.MultiDeviceAt.Before(pod.CreationTimestamp.Add(s.Window+handover)) {
				// Two GPUs at once only where a window reached back before the pod
				// was created: the earlier pod of its name on another GPU (a
				// StatefulSet replica moved), not one pod on several GPUs.
				s.Devices = 1
			}
		}
		if t := r.tracked[w]; t.gaps.kept != nil {
			t.gaps.kept[signal] += len(s.Samples)
			if signal == metrics.SignalCompute {
				t.gaps.podCompute[s.ID.Pod] += len(s.Samples)
				t.gaps.check.Samples(s.ID.Pod, s.Samples, recordedUntil)
			} else {
				t.gaps.podMemory[s.ID.Pod] += len(s.Samples)
			}
		}
		if !model {
			continue
		}
		r.model.Add(w, signal, s)
		if method > r.methods[w] {
			r.methods[w] = method
		}
	}
}

// handover is how long after a window that reaches back before a live pod's creation
// two devices under its name can still be an earlier pod of the name: Prometheus'
// default lookback delta (metrics.AgentCoverage), over which a subquery of the robust
// form carries the earlier pod's last sample.
const handover = metrics.AgentCoverage

// gpuContainer names the container that pod-level usage of a pod of workload w is
// attributed to: its GPU container (workload.GPUContainers) from the pod's spec, or,
// for a pod that no longer exists, from a live pod of the same workload (same
// template). It returns "" and why when there is no single one.
func (r *Recommender) gpuContainer(w history.WorkloadKey, namespace, pod string) (string, string) {
	p := r.cur.livePods[[2]string{namespace, pod}]
	if p == nil {
		p = r.cur.templates[w]
	}
	if p == nil {
		return "", fmt.Sprintf("pod %s reports GPU usage without a container label and neither it nor another pod of the workload exists to tell its GPU container", pod)
	}
	names := workload.GPUContainers(p)
	switch len(names) {
	case 1:
		return names[0], ""
	case 0:
		return "", fmt.Sprintf("pod %s reports GPU usage without a container label and no container requests a %s* resource", pod, workload.GPUResourcePrefix)
	}
	return "", fmt.Sprintf("pod %s reports GPU usage without a container label and has %d GPU containers (%s): the usage cannot be split between them", pod, len(names), strings.Join(names, ", "))
}

// MaxDropCountWindow bounds the window over which one load counts impossible samples
// (the whole window of live loads, the last hour of history loads).
const MaxDropCountWindow = time.Hour

// dataGaps is what one workload's loads of the current cycle lacked.
type dataGaps struct {
	loaded  bool                       // a load covered the workload this cycle
	kept    map[metrics.Signal]int     // samples fed, by signal
	dropped map[metrics.Signal]float64 // impossible samples of its pods, by signal
	// droppedPods: the signals of which each pod had impossible samples dropped.
	droppedPods map[string][]metrics.Signal
	// unattributed: pods whose pod-level usage (no container label) had no single GPU
	// container to go to, with why; their samples were not fed.
	unattributed map[string]string
	// stale: pods whose memory series were stale (dropStale), with why.
	stale map[string]string
	// zeroBusy: pods whose memory read 0 while they were busy (dropStale,
	// metrics.ZeroWhileBusy), with why.
	zeroBusy map[string]string
	// down: running pods whose series' scrape target is down now, with which.
	down map[string]string
	// wrongDevice: pods whose series named a GPU they were not on (ReasonWrongDevice),
	// with why.
	wrongDevice map[string]string
	// countFailed: a diagnostic query of the load failed (diagnose), so dropped is
	// unknown, not 0.
	countFailed bool
	// podCompute, podMemory: compute and memory samples fed this cycle, per pod.
	podCompute, podMemory map[string]int
	// check: the exporter or scrape gap rule, fed each cycle (GapCheck, gaps.go).
	check GapCheck
}

// countDrops adds the impossible samples of each pod to its workload's gaps.
func (r *Recommender) countDrops(signal metrics.Signal, drops metrics.PodDrops, attr *workload.Attributor, bootstrapped bool) {
	for k := range drops {
		ref, method := attr.Attribute(k[0], k[1])
		if method == workload.MethodNone {
			continue
		}
		if t := r.tracked[history.WorkloadKey(ref)]; t != nil && t.bootstrapped == bootstrapped && t.gaps.dropped != nil {
			n := drops.Total(k[0], k[1])
			t.gaps.dropped[signal] += n
			if n > 0 {
				t.gaps.droppedPods[k[1]] = append(t.gaps.droppedPods[k[1]], signal)
			}
		}
	}
}

// EmptyCyclesWhileRunning is how many consecutive cycles without any GPU sample, while
// the workload has running pods, raise MetricsUnavailable (NoSamplesWhileRunning): a
// scrape or exporter gap, not idleness (an idle GPU still reports zeros). Where the
// workload's series are scraped less often than the cycle, it counts scrapes instead
// (EmptyCyclesFor).
const EmptyCyclesWhileRunning = 3

// dataGap returns the MetricsUnavailable reason and message for what this cycle's loads
// lacked for a workload whose live (not finished) pods are podNames, or "" when nothing
// was missing. It counts each finding in gpufrac_recommender_incomplete_data_total. Call
// it once per workload and cycle. The exporter or scrape gap is GapCheck's (gaps.go),
// fed here with the cycle's loads and live pods; where the workload got no sample at all
// and its namespace has GPU series whose workload labels are not read (labelHint), the
// message names those instead of a gap.
func (r *Recommender) dataGap(w history.WorkloadKey, podNames map[string]bool) (reason, msg string) {
	t := r.tracked[w]
	if t == nil || !t.gaps.loaded {
		return "", ""
	}
	g := &t.gaps
	g.loaded = false
	filtered := false
	for _, sig := range []metrics.Signal{metrics.SignalMemory, metrics.SignalCompute} {
		filtered = filtered || g.dropped[sig] > 0 && g.kept[sig] == 0
	}
	f := g.check.Cycle(GapCycle{
		Pods:    r.gapPods(w.Namespace, podNames, g),
		Compute: g.kept[metrics.SignalCompute], Memory: g.kept[metrics.SignalMemory],
		StaleMemory: len(g.stale) > 0 || len(g.zeroBusy) > 0,
		SetAside:    g.dropped[metrics.SignalMemory]+g.dropped[metrics.SignalCompute] != 0 || len(g.unattributed) > 0 || len(g.wrongDevice) > 0,
		Outranked:   filtered || len(g.down) > 0,
		Interval:    r.Config.Interval, Arrivals: r.arrivals.typical(),
	})
	for _, sig := range []metrics.Signal{metrics.SignalMemory, metrics.SignalCompute} {
		if g.dropped[sig] > 0 && g.kept[sig] == 0 {
			metrics.Incomplete.WithLabelValues(metrics.IncompleteAllFiltered).Inc()
			return gpufracv1.ReasonAllSamplesFiltered, fmt.Sprintf("all %.0f %s samples of the workload's pods read this cycle were impossible (out of range, NaN or negative) and dropped; check the exporter's unit: read as %s; last recommendation kept for %s",
				g.dropped[sig], sig, fieldsOf(r.workloadSources(w), sig), sig)
		}
	}
	if msg := firstOfPods(g.down); msg != "" {
		metrics.Incomplete.WithLabelValues(metrics.IncompleteExporterDown).Inc()
		return gpufracv1.ReasonExporterDown, msg + "; last recommendation kept"
	}
	if f.Raised {
		metrics.Incomplete.WithLabelValues(metrics.IncompleteNoSamplesWhileRunning).Inc()
		what := "GPU sample"
		if f.MemoryOnly {
			what = "GPU memory sample (compute samples are read)"
		}
		why := "an exporter or scrape gap"
		if g.countFailed {
			why = "an exporter or scrape gap, or impossible samples (their count failed this cycle)"
		}
		if hint := r.labelHint(w.Namespace); hint != "" && g.kept[metrics.SignalMemory]+g.kept[metrics.SignalCompute] == 0 {
			why = hint
		}
		return gpufracv1.ReasonNoSamplesWhileRunning, fmt.Sprintf("%d running pods but no %s (%s source) for %d cycles: %s; last recommendation kept",
			len(podNames), what, names(r.workloadSources(w)), f.Empty, why)
	}
	if len(f.Silent) > 0 {
		metrics.Incomplete.WithLabelValues(metrics.IncompleteNoSamplesWhileRunning).Inc()
		others, why := " while the workload's other pods report", silentWhy(g, f.Silent)
		if len(f.Silent) == len(podNames) {
			others = ""
			if hint := r.labelHint(w.Namespace); hint != "" && g.kept[metrics.SignalMemory]+g.kept[metrics.SignalCompute] == 0 {
				why = hint
			}
		}
		what, read := "usable GPU sample", ""
		switch {
		case len(f.SilentMemory) == len(f.Silent):
			what, read = "GPU memory sample", "; their compute samples are read"
			why = "a running GPU process holds memory, so their memory series were lost (an exporter without the memory field on their node, a relabeling that drops it)"
			if pod := droppedOf(g, f.SilentMemory, metrics.SignalMemory); pod != "" {
				why = fmt.Sprintf("the memory samples of %s were impossible (out of range, NaN or negative) and dropped; check the unit of the exporter on its node: read as %s", pod, fieldsOf(r.workloadSources(w), metrics.SignalMemory))
			}
		case len(f.SilentMemory) > 0:
			why += fmt.Sprintf("; %s report compute but no GPU memory", strings.Join(f.SilentMemory, ", "))
		}
		return gpufracv1.ReasonNoSamplesWhileRunning, fmt.Sprintf("running pod(s) %s have had no %s (%s source%s) for %d cycles or more%s: %s; last recommendation kept",
			strings.Join(f.Silent, ", "), what, names(r.workloadSources(w)), read, f.Needed, others, why)
	}
	return "", ""
}

// gapPods returns the live pods podNames of a workload in namespace ns as its GapCheck
// reads them, with the compute and memory samples g fed this cycle per pod; a pod whose
// memory g set aside (stale, 0 while busy, or all its samples, below) is named by that
// finding, not as silent for memory. A pod whose
// samples were all set aside (series naming another GPU with no agent to replace them,
// pod-level usage with no single GPU container: dataGaps.wrongDevice, unattributed) has
// none: its usage is as unknown as a silent pod's, and the workload's recommendation,
// written from its siblings alone, would let the updater shrink it (silentWhy says why
// in the condition's message).
func (r *Recommender) gapPods(ns string, podNames map[string]bool, g *dataGaps) []GapPod {
	pods := make([]GapPod, 0, len(podNames))
	for pod := range podNames {
		p := GapPod{Name: pod, Compute: g.podCompute[pod], Memory: g.podMemory[pod]}
		for _, byPod := range []map[string]string{g.stale, g.zeroBusy, g.wrongDevice, g.unattributed} {
			if _, ok := byPod[pod]; ok {
				p.MemorySetAside = true
			}
		}
		if live := r.cur.livePods[[2]string{ns, pod}]; runningNow(live) {
			p.Running, p.Created, p.RunningFor = true, live.CreationTimestamp.Time, r.cur.now.Sub(runningSince(live))
		}
		pods = append(pods, p)
	}
	return pods
}

// droppedOf returns the first of pods whose samples of signal were dropped as impossible
// this cycle (dataGaps.droppedPods), or "".
func droppedOf(g *dataGaps, pods []string, signal metrics.Signal) string {
	for _, pod := range pods {
		if slices.Contains(g.droppedPods[pod], signal) {
			return pod
		}
	}
	return ""
}

// silentWhy says why the silent pods had no usable sample: their samples were set aside
// (the first such pod's reason: dataGaps.wrongDevice, unattributed), or dropped as
// impossible, else an exporter or scrape gap.
func silentWhy(g *dataGaps, silent []string) string {
	for _, pod := range silent {
		if why, ok := g.wrongDevice[pod]; ok {
			return "their samples were set aside (" + ReasonWrongDevice + "): " + why
		}
		if why, ok := g.unattributed[pod]; ok {
			return "their samples were set aside (" + ReasonAmbiguousContainer + "): " + why
		}
	}
	if pod := droppedOf(g, silent, metrics.SignalCompute); pod != "" {
		return "the compute samples of " + pod + " were impossible (out of range, NaN or negative) and dropped; check the unit of the exporter on its node"
	}
	return "an exporter or scrape gap for those pods"
}

// runningSince is when every container of a running pod was last started: the latest
// container start, else the pod's start, else its creation.
func runningSince(p *corev1.Pod) time.Time {
	var at time.Time
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running != nil && st.State.Running.StartedAt.After(at) {
			at = st.State.Running.StartedAt.Time
		}
	}
	switch {
	case !at.IsZero():
		return at
	case p.Status.StartTime != nil:
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// runningNow reports whether a live pod (nil: none) runs with every container running:
// not pending, not being deleted, no container waiting or terminated.
func runningNow(p *corev1.Pod) bool {
	if p == nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running == nil {
			return false
		}
	}
	return true
}

// loadOwnership reads kube-state-metrics ownership series seen in (to-window, to]. An
// empty result is not an error: the cluster may not run kube-state-metrics. Unless
// --label-mode is direct, series scraped without honor_labels are read by their
// exported_* labels, as the GPU series are. owners, when not nil, are the controller
// owners already read for a span holding this one (loadOwners): only the pods' lives
// are read. Errors are Prometheus' (the owners' where both the series index and the
// query failed).
func (r *Recommender) loadOwnership(ctx context.Context, sel metrics.Selector, window time.Duration, to time.Time, owners *ksmOwners) (*workload.Ownership, error) {
	own := workload.NewOwnership()
	if window < r.Config.Interval {
		window = r.Config.Interval
	}
	if owners == nil {
		var err error
		if owners, err = r.ownersOf(ctx, sel, to.Add(-window), to); err != nil {
			// A backend whose series API refuses the request (a limit on the series an
			// answer may hold, as VictoriaMetrics' -search.maxSeries): the query reads
			// the same owners from their samples.
			klog.FromContext(ctx).V(2).Info("Reading the owners from the series index failed; querying them", "err", err)
			if owners, err = r.ownersQueried(ctx, sel, window, to); err != nil {
				return nil, err
			}
		}
	}
	own.Pods, own.ReplicaSets = owners.pods, owners.replicaSets // read only from here on
	ns := sel.Labels.Namespace
	// The lives of the pods of each name, by uid: what came under a completed pod's name
	// is no pod's usage (workload.StampAfterCompletion). Their values are times, so they
	// are queried, not read from the index as the owners are.
	for _, l := range []struct {
		metric    string
		completed bool
	}{{ksmPodCreated, false}, {ksmPodCompletion, true}} {
		v, err := r.Reader.Vector(ctx, ksmQuery(sel, l.metric, "pod", "", "uid", window), to)
		if err != nil {
			return nil, err
		}
		for _, s := range v {
			key := [2]string{string(s.Metric[model.LabelName(ns)]), string(s.Metric["pod"])}
			if key[0] == "" || key[1] == "" || s.Value <= 0 || math.IsNaN(float64(s.Value)) || math.IsInf(float64(s.Value), 0) {
				continue
			}
			at := time.Unix(0, int64(float64(s.Value)*1e9)).UTC()
			life := workload.Life{Created: at}
			if l.completed {
				life = workload.Life{Completed: at}
			}
			own.AddLife(key, string(s.Metric["uid"]), life)
		}
	}
	return own, nil
}

// ksmQuery returns the query of kube-state-metrics' metric over the window ending at
// the query's time, max by the namespace, name (the object's label: pod, replicaset)
// and by, its series limited by match (extra matchers, starting with a comma). Unless
// sel.Direct, series scraped without honor_labels are read by their exported_* labels.
func ksmQuery(sel metrics.Selector, metric, name, match, by string, window time.Duration) string {
	ns := sel.Labels.Namespace
	w, nsRe := int64(window/time.Second)+1, metrics.NamespaceRegex(sel.Namespaces)
	if sel.Direct {
		return fmt.Sprintf(`max by (%s, %s, %s) (max_over_time(%s{%s=~%q%s}[%ds]))`,
			ns, name, by, metric, ns, nsRe, match, w)
	}
	// kube-state-metrics' series always carry their own namespace and pod (or
	// replicaset): where a scrape without honor_labels renamed one to exported_<name>
	// (a target label of that name), the exported one is kube-state-metrics', the
	// plain one the target's, whichever of them the scrape job sets.
	ens, ename := "exported_"+ns, "exported_"+name
	own := func(v string) string {
		return fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.+)")`, v, name, ename)
	}
	plain := own(fmt.Sprintf(`max_over_time(%s{%s=~%q, %s=""%s}[%ds])`, metric, ns, nsRe, ens, match, w))
	exported := own(fmt.Sprintf(`label_replace(max_over_time(%s{%s=~%q%s}[%ds]), %q, "$1", %q, "(.+)")`, metric, ens, nsRe, match, w, ns, ens))
	return fmt.Sprintf(`max by (%s, %s, %s) (%s or %s)`, ns, name, by, plain, exported)
}

// ownersQueried reads the controller owners seen in the window ending at to through the
// query API (ksmQuery), where the series index failed (ownersOf). Errors are the
// queries'.
func (r *Recommender) ownersQueried(ctx context.Context, sel metrics.Selector, window time.Duration, to time.Time) (*ksmOwners, error) {
	o := newKSMOwners()
	const controller, owner = `, owner_is_controller="true"`, "owner_kind, owner_name"
	for _, m := range o.kinds() {
		v, err := r.Reader.Vector(ctx, ksmQuery(sel, m.metric, m.name, controller, owner, window), to)
		if err != nil {
			return nil, err
		}
		for _, s := range v {
			o.put(m.into, [2]string{string(s.Metric[model.LabelName(sel.Labels.Namespace)]), string(s.Metric[model.LabelName(m.name)])}, s.Metric)
		}
	}
	return o, nil
}

// ksmOwners are the controller owners kube-state-metrics reported over a span: of each
// {namespace, pod} (kube_pod_owner) and each {namespace, replicaset}
// (kube_replicaset_owner). conflict: a name had several owners over the span.
type ksmOwners struct {
	pods, replicaSets map[[2]string]workload.Owner
	conflict          bool
}

func newKSMOwners() *ksmOwners {
	return &ksmOwners{pods: map[[2]string]workload.Owner{}, replicaSets: map[[2]string]workload.Owner{}}
}

// ksmOwnerKind is one owner metric of kube-state-metrics, the label naming the owned
// object, and the map its owners go into.
type ksmOwnerKind struct {
	metric, name string
	into         map[[2]string]workload.Owner
}

// kinds returns the owner metrics read into o: kube_pod_owner into pods,
// kube_replicaset_owner into replicaSets.
func (o *ksmOwners) kinds() []ksmOwnerKind {
	return []ksmOwnerKind{{ksmPodOwner, "pod", o.pods}, {ksmReplicaSetOwner, "replicaset", o.replicaSets}}
}

// ownersOf reads the controller owners kube-state-metrics reported in (from, to] from
// Prometheus' series index (metrics.Reader.Series): their values are always 1, so the
// labels are the answer, and no sample is read. The max_over_time of each it replaces read
// every sample of the span: 42 s of Prometheus' query evaluation in a bootstrap of 8 days
// of 10,000 pods, one query per slice (docs/benchmarks.md). The index knows chunks (about
// 2 hours of per-minute samples), so a series that ended shortly before from may be
// listed: a pod then has an owner it had shortly before, which names the same workload
// unless its name moved to another owner (conflict). Errors are the series request's.
func (r *Recommender) ownersOf(ctx context.Context, sel metrics.Selector, from, to time.Time) (*ksmOwners, error) {
	o := newKSMOwners()
	ns, nsRe := sel.Labels.Namespace, metrics.NamespaceRegex(sel.Namespaces)
	for _, m := range o.kinds() {
		// The forms ksmQuery reads: the plain labels, or, unless direct, the exported_*
		// ones kube-state-metrics' own labels were renamed to by a scrape without
		// honor_labels.
		match := []string{fmt.Sprintf(`%s{%s=~%q,owner_is_controller="true"}`, m.metric, ns, nsRe)}
		if !sel.Direct {
			match = []string{
				fmt.Sprintf(`%s{%s=~%q,exported_%s="",owner_is_controller="true"}`, m.metric, ns, nsRe, ns),
				fmt.Sprintf(`%s{exported_%s=~%q,owner_is_controller="true"}`, m.metric, ns, nsRe),
			}
		}
		sets, err := r.Reader.Series(ctx, match, from, to)
		if err != nil {
			return nil, err
		}
		for _, ls := range sets {
			key := [2]string{string(ls[model.LabelName(ns)]), string(ls[model.LabelName(m.name)])}
			if !sel.Direct {
				if v := ls[model.LabelName("exported_"+ns)]; v != "" {
					key[0] = string(v)
				}
				if v := ls[model.LabelName("exported_"+m.name)]; v != "" {
					key[1] = string(v)
				}
			}
			o.put(m.into, key, model.Metric(ls))
		}
	}
	return o, nil
}

// put records the owner that labels (owner_kind, owner_name) name for key, noting a
// conflict where key had another. A key or owner with an empty part, or an owner of kind
// "<none>" (kube-state-metrics' value for a pod without one), is skipped.
func (o *ksmOwners) put(into map[[2]string]workload.Owner, key [2]string, labels model.Metric) {
	kind, owner := string(labels["owner_kind"]), string(labels["owner_name"])
	if key[0] == "" || key[1] == "" || kind == "" || owner == "" || kind == "<none>" {
		return
	}
	w := workload.Owner{Kind: kind, Name: owner}
	if old, ok := into[key]; ok && old != w {
		o.conflict = true
	}
	into[key] = w
}

// loadOwners reads the controller owners over a whole load of (from, to] once
// (ownersOf), for its slices to use instead of one read each: a slice's owners are among
// the load's. Where a name had several owners over the load, or the read fails, it
// returns nil and each slice reads its own, so that a name's owner is the one of its
// slice's time.
func (r *Recommender) loadOwners(ctx context.Context, sel metrics.Selector, from, to time.Time) *ksmOwners {
	o, err := r.ownersOf(ctx, sel, from, to)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Reading the owners over the load failed; reading them per slice", "err", err)
		return nil
	case o.conflict:
		klog.FromContext(ctx).V(2).Info("A pod or ReplicaSet name had several owners over the load; reading the owners per slice")
		return nil
	}
	return o
}

// attributionMethod converts the weakest method used for a workload to the API enum.
func attributionMethod(m workload.Method) gpufracv1.AttributionMethod {
	switch m {
	case workload.MethodKubeStateMetrics:
		return gpufracv1.AttributionKubeStateMetrics
	case workload.MethodNamingConvention:
		return gpufracv1.AttributionPodNamingConvention
	}
	return gpufracv1.AttributionOwnerReferences
}

package simulate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"gonum.org/v1/gonum/floats"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/trace"
	"github.com/gpufrac/gpufrac/updater"
)

// replay is the state of one Run: the trace's timeline, each policy's state, and the
// per-step detail kept for plots.
type replay struct {
	opts     Options
	tl       *timeline
	first    int   // first evaluated step (after the warm-up)
	capacity int64 // memory of one GPU, bytes
	whole    packing.Alloc
	stepMin  float64 // minutes per step
	// windows and rules are the updater's resize windows and per-pod rules.
	windows updater.Windows
	rules   updater.Rules
	states  []*polState // per policy, in Options.Policies order
	sizers  []sizer     // the recommenders the adaptive policies share
	d       *detail
	// alive are the runs alive at the current step (next is the spare buffer);
	// replicas counts the live pods per workload.
	alive, next []int
	replicas    []int
	// budgets are the disruption budgets of the workloads whose pods the cycle being
	// run has met (budget).
	budgets []workloadBudget
	// deviceFlight counts the cycle's replacements from each GPU (packer index) of the
	// policy being updated (deviceAllows).
	deviceFlight map[int]int
}

// Run replays tr through the policies on GPUs of opts.GPUMemoryBytes. It returns an error
// for invalid options, an unknown policy, a trace without samples, an interval longer
// than the trace (its first sample to its last, when they differ), a lookback shorter
// than its sample spacing (medianSpacing), a hole in the trace longer than the rest of
// it (CheckHole), or a warm-up that
// covers the whole trace; errors about an option name its gpufrac simulate flag.
func Run(tr *trace.Trace, opts Options) (*Result, error) {
	rp, err := newReplay(tr, opts)
	if err != nil {
		return nil, err
	}
	for k := 0; k < rp.tl.steps; k++ {
		rp.step(k)
	}
	return rp.result(tr), nil
}

// CheckMemorySamples returns an error naming the trace pods without a memory sample (the
// first by name and, when set, source ID: GenTD26 names are made up by the reader), and
// how many there are: the policies would pack such a pod as needing no memory (the
// clairvoyant bounds by 0 bytes, so every ratio to them would be off), and no data is
// not zero.
func CheckMemorySamples(tr *trace.Trace) error {
	var without []string
	for i := range tr.Pods {
		if p := &tr.Pods[i]; len(p.Memory) == 0 {
			name := p.Namespace + "/" + p.Pod + " container " + p.Container
			if p.ID != "" { // the reader made the names up (GenTD26): say what the input calls it
				name += " from source ID " + p.ID
			}
			without = append(without, name)
		}
	}
	if len(without) == 0 {
		return nil
	}
	first := without[0]
	if len(without) > 1 {
		first += fmt.Sprintf(" and %d more", len(without)-1)
	}
	return fmt.Errorf("%d of %d trace pods have no GPU memory sample (%s): a pod's memory cannot be sized from nothing; drop them from the trace or give their memory", len(without), len(tr.Pods), first)
}

// checkMemorySamples is CheckMemorySamples for the lifetimes a lookback cuts trace pods
// into: a lifetime of compute samples only (a trace pod's memory stops, and after a gap
// longer than lookback only its compute resumes) is a pod without a memory sample.
func (tl *timeline) checkMemorySamples(lookback time.Duration) error {
	var without []string
	for i := range tl.runs {
		r := &tl.runs[i]
		if !slices.ContainsFunc(r.memRaw, func(v float64) bool { return !math.IsNaN(v) }) {
			without = append(without, fmt.Sprintf("%s container %s, %s to %s", r.name, r.id.Container,
				tl.stepEnd(r.start-1).Format(time.RFC3339), tl.stepEnd(r.end).Format(time.RFC3339)))
		}
	}
	if len(without) == 0 {
		return nil
	}
	first := without[0]
	if len(without) > 1 {
		first += fmt.Sprintf(" and %d more", len(without)-1)
	}
	return fmt.Errorf("%d of %d pod lifetimes (trace pods cut at gaps longer than the lookback %s) have no GPU memory sample (%s): a pod's memory cannot be sized from nothing; give their memory, drop their samples or raise the lookback",
		len(without), len(tl.runs), lookback, first)
}

// Check returns the error Run returns for tr and opts before it replays a step (the
// options, the trace, --interval, --lookback, --warm-up), without building the policies
// or replaying: a caller running several GPU sizes or warm-ups refuses a bad one before
// the first run, not after the others ran.
func Check(tr *trace.Trace, opts Options) error {
	_, err := checkReplay(tr, opts)
	return err
}

// checkedReplay is what checkReplay found valid: the options with their defaults, the
// timeline, the first counted step and the resize windows.
type checkedReplay struct {
	opts    Options
	tl      *timeline
	first   int
	windows updater.Windows
}

// newReplay validates opts and builds the timeline, the policies and the detail. Its
// errors are Run's.
func newReplay(tr *trace.Trace, opts Options) (*replay, error) {
	c, err := checkReplay(tr, opts)
	if err != nil {
		return nil, err
	}
	opts, tl, step := c.opts, c.tl, c.opts.Interval
	rp := &replay{
		opts: opts, tl: tl, first: c.first, capacity: opts.GPUMemoryBytes,
		whole:   packing.Alloc{MemoryBytes: opts.GPUMemoryBytes, ComputeMilli: 1000},
		stepMin: step.Minutes(), windows: c.windows,
		// The updater's per-pod rules, as cmd/updater sets them from its flags.
		rules: updater.Rules{Threshold: opts.Updater.ChangeThreshold, MinPodAge: opts.Updater.MinLifetime,
			NearLimit: opts.Updater.NearLimit, UrgentGrowth: *opts.Updater.UrgentGrowth,
			ComputeRequestGrowth: opts.Updater.ComputeRequestGrowth},
		replicas: make([]int, len(tl.workloads)),
	}
	if err := rp.addPolicies(); err != nil {
		return nil, err
	}
	rp.d = rp.newDetail()
	return rp, nil
}

// checkReplay validates opts against tr and builds the timeline; its errors are Run's.
func checkReplay(tr *trace.Trace, opts Options) (*checkedReplay, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	step := opts.Interval
	// The updater's own window code: same cron parsing, time zones and DST handling.
	windows, err := updater.ParseWindows(&gpufracv1.UpdatePolicy{ResizeWindows: opts.Updater.ResizeWindows})
	if err != nil {
		return nil, fmt.Errorf("--resize-window-*: %w", err)
	}
	if err := CheckMemorySamples(tr); err != nil {
		return nil, err
	}
	if err := CheckHole(tr); err != nil {
		return nil, err
	}
	if sp := medianSpacing(tr); opts.Lookback > 0 && opts.Lookback < sp {
		return nil, fmt.Errorf("--lookback %s is shorter than the trace's sample spacing (%s, the median time between one pod's samples): every sample would end its pod and start a new one; give a --lookback of several spacings, or 0", opts.Lookback, sp)
	}
	tl, err := newTimeline(tr, step, opts.Lookback)
	if err != nil {
		return nil, err
	}
	if err := tl.checkMemorySamples(opts.Lookback); err != nil {
		return nil, err
	}
	if span := tl.span(tr); span > 0 && step > span { // a trace of one instant has no length: each sample counts one step
		return nil, fmt.Errorf("--interval %s is longer than the trace (%s from its first sample to its last): every figure counts whole steps, each pod lifetime rounded out to them, so each pod would hold its GPU for %s at least; give an --interval much shorter than the trace (the default, 1m, is the recommender's cycle)", step, span, step)
	}
	first := int((opts.WarmUp + step - 1) / step)
	if first >= tl.steps {
		return nil, fmt.Errorf("--warm-up %s covers the whole trace (%d steps of %s)", opts.WarmUp, tl.steps, step)
	}
	return &checkedReplay{opts: opts, tl: tl, first: first, windows: windows}, nil
}

// addPolicies builds the state of each of opts.Policies (checkPolicies has passed
// them); the adaptive ones share one sizer of each kind. Its error is an unknown policy.
func (rp *replay) addPolicies() error {
	var gf *gpufracSizer
	var vpa *vpaSizer
	for _, name := range rp.opts.Policies {
		spec, err := parsePolicy(name)
		if err != nil {
			return err
		}
		switch name {
		case PolicyGPUFrac:
			if gf == nil {
				gf = newGPUFracSizer(rp.tl, rp.opts.Recommender, rp.opts.HistoryLength, rp.opts.MemoryHeadroomPercent, rp.opts.Backend, rp.capacity, max(0, rp.first-1))
			}
			spec.sizer = gf
		case PolicyVPAMemory:
			if vpa == nil {
				vpa = newVPASizer(rp.tl, rp.opts.Interval, rp.opts.Recommender.LowConfidence, rp.capacity)
			}
			spec.sizer = vpa
		}
		rp.states = append(rp.states, rp.newPolState(name, spec))
		if name == PolicyGPUFrac {
			gf.placed = rp.states[len(rp.states)-1]
		}
	}
	if gf != nil {
		rp.sizers = append(rp.sizers, gf)
	}
	if vpa != nil {
		rp.sizers = append(rp.sizers, vpa)
	}
	return nil
}

// newPolState is the empty state of one policy over the timeline's runs.
func (rp *replay) newPolState(name string, spec policySpec) *polState {
	n := len(rp.tl.runs)
	u := rp.opts.Updater
	ps := &polState{spec: spec, res: &PolicyResult{Policy: name}, pk: packing.New(rp.capacity),
		applied: make([]grant, n), load: make([]uint8, n), on: make([]int, n), placedAt: make([]int, n), cold: make([]bool, n), partial: make([]bool, n), oomAt: make([]int, n),
		hyst: updater.NewHysteresis(u.PersistCycles, u.PersistFor, u.MinReplacementInterval), flaps: newReversals(n, rp.tl.step)}
	ps.outOfDate, ps.lastReplaced = make([]int, n), make([]time.Time, len(rp.tl.workloads))
	// The updater's token bucket starts full (golang.org/x/time/rate): the first
	// refillTokens caps it at the burst.
	ps.tokens = math.Inf(1)
	if name == PolicyGPUFrac {
		// The updater's rollback floor: the product's, whose recommender and webhook
		// read it (the vpa-memory baseline is VPA's sizing, which has none).
		ps.floors, ps.published = make([]*gpufracv1.UpdaterFloor, len(rp.tl.workloads)), make([]*gpufracv1.UpdaterFloor, len(rp.tl.workloads))
	}
	for i := range ps.on {
		ps.on[i], ps.oomAt[i], ps.outOfDate[i] = -1, -1, -1
	}
	return ps
}

// newDetail sizes the per-step detail for the policies and the runs.
func (rp *replay) newDetail() *detail {
	tl := rp.tl
	d := &detail{stepMinutes: rp.stepMin, origin: tl.origin, first: rp.first, binBytes: 256 << 20}
	nbins := int(2*float64(rp.capacity)/d.binBytes) + 2
	for range rp.states {
		d.gpus = append(d.gpus, make([]int32, 0, tl.steps-rp.first))
		d.changes = append(d.changes, make([][]change, len(tl.runs)))
		d.headroom = append(d.headroom, make([]int64, nbins))
		d.overrun = append(d.overrun, make([]int32, len(tl.runs)))
	}
	for i := range tl.runs {
		r := &tl.runs[i]
		d.runs = append(d.runs, runInfo{name: r.name, start: r.start, end: r.end, mem: r.mem, peakMem: r.peakMem})
	}
	return d
}

// step replays step k: pods leave and arrive, arriving pods are placed and every
// policy is charged (from the first evaluated step), the recommenders run at the step's
// end, then the updater.
func (rp *replay) step(k int) {
	arriving := rp.turnover(k)
	if k >= rp.first {
		for pi, ps := range rp.states {
			for _, i := range arriving {
				a, cold, partial := rp.initial(ps, i, k)
				rp.place(pi, i, k, a, cold, partial)
				ps.placedAt[i] = rp.tl.runs[i].start
			}
			evaluate(ps, rp.tl, rp.d, pi, k, rp.capacity)
		}
	}
	// The recommender's cycle at the end of the step.
	now := rp.tl.stepEnd(k)
	for _, s := range rp.sizers {
		s.feed(rp.tl, rp.alive, k)
		s.decide(rp.tl, now)
	}
	if k >= rp.first {
		rp.update(k)
	}
}

// turnover removes the pods that ended with the previous step and adds those starting
// at k; it returns the pods to place at k (at the first evaluated step, every live pod,
// in run order).
func (rp *replay) turnover(k int) []int {
	tl := rp.tl
	rp.next = rp.next[:0]
	for _, i := range rp.alive {
		if tl.runs[i].end >= k {
			rp.next = append(rp.next, i)
			continue
		}
		rp.replicas[tl.runs[i].workload]--
		if k > rp.first {
			for _, ps := range rp.states {
				ps.pk.Remove(i, ps.on[i], ps.applied[i].alloc)
				ps.on[i] = -1
			}
		}
	}
	rp.alive, rp.next = rp.next, rp.alive
	arriving := tl.arrivals[k]
	for _, i := range arriving {
		rp.replicas[tl.runs[i].workload]++
	}
	rp.alive = append(rp.alive, arriving...)
	if k == rp.first {
		arriving = append([]int(nil), rp.alive...)
		sort.Ints(arriving)
	}
	return arriving
}

// update is the updater at step k for each adaptive policy: it replaces the candidates
// (candidates), each within its workload's disruption budget (budget) and while the
// replacement rate allows, from step k+1.
func (rp *replay) update(k int) {
	u := rp.opts.Updater
	for pi, ps := range rp.states {
		if ps.spec.kind != kindAdaptive {
			continue
		}
		ps.refillTokens(u.ReplacementsPerMinute, rp.stepMin)
		rp.budgets = rp.budgets[:0]
		clear(rp.deviceFlight)
		cands := candidates(ps, rp.tl, rp.alive, k, rp.windows, rp.rules, rp.capacity)
		// The updater consolidates before its cycle's replacements, and only in a cycle
		// without other candidates (updater.consolidate).
		if len(cands) == 0 && u.Consolidate && ps.spec.name == PolicyGPUFrac {
			rp.consolidate(pi, k)
		}
		for _, c := range cands {
			b := rp.budget(rp.tl.runs[c.run].workload)
			if reason, _ := b.Allow(); reason != "" {
				continue // the updater's budgetGate, before the rate limit
			}
			if !rp.deviceAllows(ps, c.run) {
				continue // the updater's deviceGate, after the budget
			}
			if !ps.takeToken(u.ReplacementsPerMinute) {
				break
			}
			b.Took()
			rp.tookDevice(ps, c.run)
			i := c.run
			ps.pk.Remove(i, ps.on[i], ps.applied[i].alloc)
			before := ps.applied[i].record
			if c.unchanged {
				rp.place(pi, i, k+1, rp.coldStart(), true, false)
			} else {
				rp.place(pi, i, k+1, rp.written(ps.floored(rp.tl.runs[i].workload, rp.tl.runs[i].id.Container, c.dec, rp.tl.stepEnd(k), rp.capacity)), false, c.partial)
			}
			ps.flaps.replaced(i, k+1, before, ps.applied[i].record)
			ps.placedAt[i] = k + 1
			ps.res.Replacements++
			ps.hyst.Replaced(rp.tl.workloads[rp.tl.runs[i].workload].hkey, rp.tl.stepEnd(k), c.need)
			ps.replaced(rp.tl, rp.tl.runs[i].workload, k)
		}
	}
}

// budget returns workload w's disruption budget in this cycle: the updater's
// (updater.BudgetOf) over its live pods, none in flight at the cycle's start (a
// replacement runs from the next step), taken from as pods are replaced.
func (rp *replay) budget(w int) *updater.Budget {
	for i := range rp.budgets {
		if rp.budgets[i].w == w {
			return &rp.budgets[i].b
		}
	}
	u := rp.opts.Updater
	rp.budgets = append(rp.budgets, workloadBudget{w: w, b: updater.BudgetOf(rp.replicas[w], 0, int32(u.MinReplicas), u.MaxInFlight)})
	return &rp.budgets[len(rp.budgets)-1].b
}

// deviceAllows is the updater's deviceGate for run i of policy ps in this cycle: where
// the backend says which GPU a pod is on (kai-nvfractions: KAI's GPU group), at most
// UpdaterOptions.MaxInFlightPerDevice pods of one GPU are replaced in one cycle
// (updater.DeviceAllows over the cycle's replacements from its GPU, deviceFlight); a
// replacement runs from the next step, so none is in flight at the cycle's start.
func (rp *replay) deviceAllows(ps *polState, i int) bool {
	if rp.opts.Backend != gpufracv1.BackendKAINVFractions {
		return true
	}
	return updater.DeviceAllows(rp.deviceFlight[ps.on[i]], rp.opts.Updater.MaxInFlightPerDevice)
}

// tookDevice counts the replacement of run i of policy ps, about to be made, in flight
// from its GPU for the rest of the cycle (deviceAllows).
func (rp *replay) tookDevice(ps *polState, i int) {
	if rp.deviceFlight == nil {
		rp.deviceFlight = map[int]int{}
	}
	rp.deviceFlight[ps.on[i]]++
}

// workloadBudget is workload w's disruption budget in one cycle.
type workloadBudget struct {
	w int
	b updater.Budget
}

// consolidate is the updater's consolidation at step k for policy pi
// (UpdaterOptions.Consolidate), in a cycle without other candidates:
// packing.Consolidation over the GPUs in use picks the GPU to empty, and its tenants
// are replaced, each with what the webhook writes now, and placed where Consolidation
// put them, from step k+1, each within its workload's disruption budget (budget) and
// while the replacement rate allows, as the updater's candidates. A tenant is movable
// past the minimum lifetime, when it is not a cold start, its recommendation applies
// and it is in date (not out of date at this cycle, held or not: the updater moves no
// pod it lists in status.updater.updates), inside the resize windows.
func (rp *replay) consolidate(pi, k int) {
	ps, u := rp.states[pi], rp.opts.Updater
	if !rp.windows.State(rp.tl.stepEnd(k)).Open {
		return
	}
	gpus := make([]int, 0, ps.pk.Held())
	devs := make([]packing.Device, 0, ps.pk.Held())
	grants := map[int]grant{}
	for g := 0; g < ps.pk.Len(); g++ {
		d := ps.pk.GPU(g)
		if len(d.Tenants) == 0 {
			continue
		}
		dev := packing.Device{MemoryBytes: rp.capacity}
		for _, i := range d.Tenants {
			r := &rp.tl.runs[i]
			a := ps.applied[i]
			dec := ps.spec.sizer.decision(r.wc)
			movable := dec.ok && !ps.cold[i] && r.end > k && ps.spec.sizer.incompleteData(r.workload) == "" &&
				time.Duration(k+1-ps.placedAt[i])*rp.tl.step >= u.MinLifetime && ps.outOfDate[i] != k &&
				(ps.floors == nil || ps.floors[r.workload] == nil)
			if movable {
				a = rp.written(dec)
				grants[i] = a
			}
			dev.Tenants = append(dev.Tenants, packing.Tenant{Alloc: ps.applied[i].alloc, Next: a.alloc, Movable: movable})
		}
		gpus = append(gpus, g)
		devs = append(devs, dev)
	}
	drain, dest, ok := packing.Consolidation(devs, packing.ConsolidationOptions{MaxComputeMilli: u.ConsolidationComputeMilli})
	if !ok {
		return
	}
	tenants := slices.Clone(ps.pk.GPU(gpus[drain]).Tenants)
	for j, i := range tenants {
		b := rp.budget(rp.tl.runs[i].workload)
		if reason, _ := b.Allow(); reason != "" {
			continue
		}
		if !rp.deviceAllows(ps, i) {
			continue
		}
		if !ps.takeToken(u.ReplacementsPerMinute) {
			break
		}
		b.Took()
		rp.tookDevice(ps, i)
		ps.pk.Remove(i, ps.on[i], ps.applied[i].alloc)
		before := ps.applied[i].record
		rp.placeOn(pi, i, k+1, grants[i], false, !ps.spec.sizer.decision(rp.tl.runs[i].wc).full, gpus[dest[j]])
		ps.flaps.replaced(i, k+1, before, ps.applied[i].record)
		ps.placedAt[i] = k + 1
		ps.res.Replacements++
		ps.res.Consolidations++
		ps.replaced(rp.tl, rp.tl.runs[i].workload, k)
	}
}

// peak returns run r's true peak memory (bytes) and compute (milli) over the evaluated
// part of its life.
func (rp *replay) peak(r *run) packing.Alloc {
	var m, c float64
	for k := max(r.start, rp.first); k <= r.end; k++ {
		mm, cc := r.at(k)
		m, c = math.Max(m, mm), math.Max(c, cc)
	}
	return packing.Alloc{MemoryBytes: min(rp.capacity, int64(math.Ceil(m))), ComputeMilli: min(1000, int64(math.Ceil(c*1000-1e-9)))}
}

// seenPeak returns the highest memory (bytes) the pods of workload w showed before step
// k: what a recommender reading the trace up to k has seen. 0 when none. A run that
// ended before k counts with its peak; only a run still alive at k is scanned.
func (rp *replay) seenPeak(w, k int) float64 {
	var m float64
	for _, j := range rp.tl.workloads[w].runs {
		switch r := &rp.tl.runs[j]; {
		case r.end < k:
			m = math.Max(m, r.peakMem)
		case r.start < k:
			m = math.Max(m, floats.Max(r.mem[:k-r.start]))
		}
	}
	return m
}

// initial returns the allocation of run i when it is created at step k, whether it is
// the cold-start allocation, and whether it comes from a partly confident
// recommendation.
func (rp *replay) initial(ps *polState, i, k int) (a grant, cold, partial bool) {
	r := &rp.tl.runs[i]
	switch ps.spec.kind {
	case kindTimeSlicing:
		n := int64(ps.spec.replicas)
		return hardGrant(packing.Alloc{MemoryBytes: rp.capacity / n, ComputeMilli: 1000 / n}), false, false
	case kindClairvoyant:
		return hardGrant(rp.peak(r)), false, false
	case kindClairvoyantMemory, kindClairvoyantSeen:
		a := rp.peak(r)
		a.ComputeMilli = 0
		if ps.spec.kind == kindClairvoyantSeen {
			a.MemoryBytes = max(a.MemoryBytes, min(rp.capacity, int64(math.Ceil(rp.seenPeak(r.workload, k)))))
		}
		return hardGrant(a), false, false
	case kindAdaptive:
		if dec := ps.spec.sizer.decision(r.wc); dec.ok {
			// The webhook, when the pod is created (the end of the step before).
			return rp.written(ps.floored(r.workload, r.id.Container, dec, rp.tl.stepEnd(k-1), rp.capacity)), false, !dec.full
		}
		return rp.coldStart(), true, false
	}
	return hardGrant(rp.whole), false, false
}

// coldStart is a pod the webhook leaves as it is: a whole GPU, with the whole GPU's
// compute only where the backend writes compute (the updater reads none otherwise).
func (rp *replay) coldStart() grant {
	g := hardGrant(rp.whole)
	if rp.opts.Backend == gpufracv1.BackendKAINVFractions {
		g.compute = -1
	}
	return g
}

// written is what the backend writes into a pod for decision dec (dec.ok): with
// kai-nvfractions, the request and limit of backend.NVFractionsConfig.RequestLimit of
// the memoryLimit where above the target, else the target (the simulator adds no memory
// overhead), no compute (NvFractions time-slices compute), and a whole GPU where that
// memory needs one (the webhook leaves such pods unchanged);
// otherwise (the annotations backend) the memoryLimit where above the target, else the
// memory target, rounded up to whole MiB as the limit, packed by the memory request the
// backend writes (backend.ObservedPeakRequestMiB of that limit, as the webhook computes
// it, unless Options.Annotations.MemoryRequest is none: then the limit).
func (rp *replay) written(dec decision) grant {
	var peak int64
	if dec.target.RequestPeakMemory > 0 {
		peak = min(dec.target.RequestPeakMemory, rp.capacity)
	}
	targetMiB := (dec.want.MemoryBytes + backend.MiB - 1) / backend.MiB
	if rp.opts.Backend != gpufracv1.BackendKAINVFractions {
		// The limit is the memoryLimit where above the target (as the webhook writes it).
		limitMiB := max(targetMiB, (dec.target.MemoryLimit+backend.MiB-1)/backend.MiB)
		g := hardGrant(packing.Alloc{MemoryBytes: min(limitMiB*backend.MiB, rp.capacity), ComputeMilli: dec.want.ComputeMilli})
		g.record = dec.want.MemoryBytes
		switch v, request, ok := dec.target.PlacedCompute(); {
		case ok && request:
			// writtenComputeRequest, as the annotations backend writes it: placed by it,
			// with no partition in the record.
			g.request, g.compute = v, -1
		case !ok:
			// No compute written (not controlled, no target, or time-sliced without a
			// request): the record holds none, which the updater reads as no partition.
			g.compute = -1
		}
		if rp.opts.Annotations.MemoryRequest == backend.AnnotationsMemoryRequestObservedPeak {
			g.alloc.MemoryBytes = backend.ObservedPeakRequestMiB(limitMiB*backend.MiB, peak, rp.capacity) * backend.MiB
		}
		return g
	}
	// The memory the webhook hands the backend: the memoryLimit where above the target
	// (contract.WrittenOf's MemoryBytes), which kai-nvfractions writes as the request
	// (target request) and sizes the whole-GPU check and the limit by, as the annotations
	// backend writes it as the limit.
	memory := max(dec.want.MemoryBytes, min(dec.target.MemoryLimit, rp.capacity))
	if (memory+backend.MiB-1)/backend.MiB >= rp.capacity/backend.MiB {
		return rp.coldStart()
	}
	var upper int64
	if dec.target.UpperMemory > 0 {
		upper = min(dec.target.UpperMemory, rp.capacity)
	}
	req, limit := rp.opts.NVFractions.RequestLimit(memory, upper, peak, rp.capacity)
	return grant{alloc: packing.Alloc{MemoryBytes: req * backend.MiB}, limit: limit * backend.MiB, record: dec.want.MemoryBytes, compute: -1}
}

// place gives run i grant a under policy pi from step k, on the GPU the packer picks.
func (rp *replay) place(pi, i, k int, a grant, cold, partial bool) {
	rp.placeOn(pi, i, k, a, cold, partial, -1)
}

// placeOn is place on GPU gpu (held), where consolidation put run i; -1: the packer's
// best fit.
func (rp *replay) placeOn(pi, i, k int, a grant, cold, partial bool, gpu int) {
	ps := rp.states[pi]
	ps.applied[i], ps.cold[i], ps.partial[i] = a, cold, partial
	if gpu < 0 {
		gpu = ps.pk.Place(i, a.alloc)
	} else {
		ps.pk.PlaceOn(i, gpu, a.alloc)
	}
	ps.on[i] = gpu
	rp.d.changes[pi][i] = append(rp.d.changes[pi][i], change{step: k, alloc: a.alloc, limit: a.limit})
}

// result sums the replay of tr into a Result, one PolicyResult per policy.
func (rp *replay) result(tr *trace.Trace) *Result {
	tl := rp.tl
	res := &Result{
		GPUMemoryBytes: rp.capacity,
		Trace: TraceInfo{TracePods: len(tr.Pods), Pods: len(tl.runs), Workloads: len(tl.workloads),
			Start: tl.origin, End: tl.stepEnd(tl.steps - 1), EvaluatedFrom: tl.stepEnd(rp.first - 1), Steps: tl.steps, EvaluatedSteps: tl.steps - rp.first},
		Settings: settings(rp.opts),
		detail:   rp.d,
	}
	for i := range tr.Pods {
		if len(tr.Pods[i].Compute) == 0 {
			res.Trace.PodsWithoutCompute++
		}
	}
	above := map[int]bool{} // trace pods (runs are their lifetimes) above one GPU
	for _, r := range tl.runs {
		if r.peakMem > float64(rp.capacity) {
			above[r.tracePod] = true
		}
	}
	res.Trace.PodsAboveGPU = len(above)
	var clair float64
	for _, ps := range rp.states {
		if ps.spec.kind == kindClairvoyantMemory {
			clair = float64(ps.steps.gpu)
		}
	}
	for pi, ps := range rp.states {
		r := rp.policyResult(pi, ps, clair)
		r.ComputeKnown = res.Trace.PodsWithoutCompute < res.Trace.TracePods
		res.Policies = append(res.Policies, *r)
	}
	return res
}

// policyResult fills policy pi's result from its step counts; clair is the GPU-steps
// of the clairvoyant-memory policy (0 when it did not run).
func (rp *replay) policyResult(pi int, ps *polState, clair float64) *PolicyResult {
	r, s, stepMin := ps.res, ps.steps, rp.stepMin
	r.GPUMinutes = float64(s.gpu) * stepMin
	r.PodMinutes = float64(s.pod) * stepMin
	r.PeakGPUs = ps.pk.Peak()
	r.PodLimitOverrunMinutes = float64(s.podOver) * stepMin
	r.WarmUpOverrunMinutes = float64(s.warmOver) * stepMin
	r.GPUOverrunMinutes = float64(s.gpuOver) * stepMin
	r.GPUOverrunPodMinutes = float64(s.gpuOverPod) * stepMin
	r.WarmUpGPUOverrunPodMinutes = float64(s.warmGPUOverPod) * stepMin
	r.ContentionPodMinutes = float64(s.contention) * stepMin
	r.ColdStartPodMinutes = float64(s.cold) * stepMin
	r.Reversals = ps.flaps.n
	for _, n := range rp.d.overrun[pi] {
		if n > 0 {
			r.PodsWithOverrun++
		}
	}
	if s.pod > 0 {
		r.GPUsPerPod = float64(s.gpu) / float64(s.pod)
		r.ContentionShare = float64(s.contention) / float64(s.pod)
	}
	if s.gpu > 0 {
		r.MemoryUtilisation = ps.memUtil / float64(s.gpu)
		r.ComputeUtilisation = ps.cpuUtil / float64(s.gpu)
	}
	if clair > 0 {
		r.VsClairvoyant = float64(s.gpu) / clair
	}
	return r
}

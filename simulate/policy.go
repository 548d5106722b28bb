package simulate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/policy"
	"github.com/gpufrac/gpufrac/recommender/recommend"
	"github.com/gpufrac/gpufrac/updater"
)

// Policy names accepted in Options.Policies. Time-slicing takes any replica count N ≥ 2
// as "time-slicing-N" (see TimeSlicing).
const (
	// PolicyOnePerPod gives every pod a whole GPU: today's practice.
	PolicyOnePerPod = "one-per-pod"
	// PolicyVPAMemory sizes GPU memory the way VPA sizes container memory: p90 of
	// per-pod daily peaks × 1.15, in VPA's decaying histogram; compute is not
	// partitioned. Pods are resized by the same updater as gpufrac.
	PolicyVPAMemory = "vpa-memory"
	// PolicyGPUFrac is gpufrac's default policy: the recommender's estimate and policy
	// (recommend.Config.Recommend) with the updater's rules.
	PolicyGPUFrac = "gpufrac"
	// PolicyClairvoyant knows each pod's true peak memory and peak compute (per-step
	// mean) over its lifetime and reserves both as hard limits when the pod starts. It
	// forbids compute contention, so it is not a lower bound on GPUs: compare with
	// PolicyClairvoyantMemory.
	PolicyClairvoyant = "clairvoyant-peak"
	// PolicyClairvoyantMemory knows each pod's true peak memory and leaves compute
	// unpartitioned (contention is measured, not forbidden): the fewest GPUs any policy
	// that sizes pods once at start can hold without a memory overrun under this packer.
	// It is the bound PolicyResult.VsClairvoyant divides by.
	PolicyClairvoyantMemory = "clairvoyant-memory"
	// PolicyClairvoyantSeen is PolicyClairvoyantMemory for a policy that never sizes a
	// pod below what its workload has shown: each pod gets the larger of its true peak
	// memory over the evaluated part of its life and the highest memory sample its
	// workload's pods had shown before it was placed (the recommender's history, warm-up
	// included), compute not partitioned. No policy that keeps every observed peak (as
	// gpufrac's target and request do, for the peak window) and sizes pods once at start
	// holds fewer GPU-minutes without a memory overrun; the gap between it and
	// PolicyClairvoyantMemory is what knowing the future, rather than the past, buys.
	PolicyClairvoyantSeen = "clairvoyant-seen-peak"

	timeSlicingPrefix = "time-slicing-"
)

// TimeSlicing returns the name of static time-slicing with n replicas per GPU: the
// device plugin's sharing.timeSlicing replicas, every pod 1/n of memory and compute.
func TimeSlicing(n int) string { return timeSlicingPrefix + strconv.Itoa(n) }

// DefaultPolicies are the policies simulated when Options.Policies is empty, in
// report order.
var DefaultPolicies = []string{
	PolicyOnePerPod, TimeSlicing(2), TimeSlicing(4), PolicyVPAMemory, PolicyGPUFrac,
	PolicyClairvoyant, PolicyClairvoyantMemory, PolicyClairvoyantSeen,
}

// VPA's recommender defaults (kubernetes/autoscaler vertical-pod-autoscaler,
// pkg/recommender/logic and its flags), used by PolicyVPAMemory.
const (
	// VPAMemoryAggregationInterval is --memory-aggregation-interval: one memory peak per
	// pod per day.
	VPAMemoryAggregationInterval = 24 * time.Hour
	// VPAMemoryHalfLife is --memory-histogram-decay-half-life.
	VPAMemoryHalfLife = 24 * time.Hour
	// VPATargetPercentile, VPALowerPercentile and VPAUpperPercentile are the memory
	// percentiles of target, lower and upper bound.
	VPATargetPercentile, VPALowerPercentile, VPAUpperPercentile = 0.9, 0.5, 0.95
	// VPASafetyMargin is --recommendation-margin-fraction, ratio.
	VPASafetyMargin = 0.15
	// VPAMinMemoryBytes is --pod-recommendation-min-memory-mb (250 MiB), bytes.
	VPAMinMemoryBytes = 250 << 20
)

// policyKind classifies how a policy allocates.
type policyKind int

const (
	kindWhole policyKind = iota
	kindTimeSlicing
	kindClairvoyant
	kindClairvoyantMemory
	kindClairvoyantSeen
	kindAdaptive
)

// policySpec is a parsed policy name.
type policySpec struct {
	name     string
	kind     policyKind
	replicas int   // time-slicing
	sizer    sizer // adaptive
}

// IsBound reports whether name is one of the clairvoyant policies, which know each
// pod's future: reference bounds, never baselines a policy could be behind.
func IsBound(name string) bool {
	spec, err := parsePolicy(name)
	return err == nil && (spec.kind == kindClairvoyant || spec.kind == kindClairvoyantMemory || spec.kind == kindClairvoyantSeen)
}

// parsePolicy returns the spec of a policy name, or an error listing the known names.
func parsePolicy(name string) (policySpec, error) {
	switch name {
	case PolicyOnePerPod:
		return policySpec{name: name, kind: kindWhole}, nil
	case PolicyVPAMemory, PolicyGPUFrac:
		return policySpec{name: name, kind: kindAdaptive}, nil
	case PolicyClairvoyant:
		return policySpec{name: name, kind: kindClairvoyant}, nil
	case PolicyClairvoyantMemory:
		return policySpec{name: name, kind: kindClairvoyantMemory}, nil
	case PolicyClairvoyantSeen:
		return policySpec{name: name, kind: kindClairvoyantSeen}, nil
	}
	if rest, ok := strings.CutPrefix(name, timeSlicingPrefix); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 2 && n <= 64 {
			return policySpec{name: name, kind: kindTimeSlicing, replicas: n}, nil
		}
	}
	return policySpec{}, fmt.Errorf("--policies: unknown policy %q (known: %s, %s, %s, %s, %s, %s, %sN with N 2-64)",
		name, PolicyOnePerPod, PolicyVPAMemory, PolicyGPUFrac, PolicyClairvoyant, PolicyClairvoyantMemory, PolicyClairvoyantSeen, timeSlicingPrefix)
}

// checkPolicies returns an error naming --policies for an unknown policy name or one
// given twice.
func checkPolicies(names []string) error {
	seen := map[string]bool{}
	for _, name := range names {
		if _, err := parsePolicy(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("--policies: policy %q given twice", name)
		}
		seen[name] = true
	}
	return nil
}

// decision is what an adaptive policy wants for one (workload, container) now.
type decision struct {
	// ok is false while the policy has no confident recommendation: pods then get (and
	// keep) the cold-start allocation, a whole GPU.
	ok bool
	// want is the allocation the admission webhook writes into a pod when it is created
	// or replaced.
	want packing.Alloc
	// target is the recommendation in the updater's units, as updater.Evaluate compares
	// it with a running pod's allocation.
	target contract.Target
	// full: the recommendation rests on a full history (at least the estimator's
	// FullConfidenceHistory, default 24h; VPA: one day); below it the workload is warming
	// up. It is the history length, not the confidence: confidence stays below 100 %
	// for reasons other than youth (DCGM_FI_DEV_GPU_UTIL as the compute source caps it
	// at estimate.LowFidelityComputeConfidence), and those never end.
	full bool
	// lowConfidence: ok is false because the recommendation is below the webhook's
	// minimum confidence, while it has a memory target (target holds it). The webhook
	// admits pods unchanged, with a whole GPU; the updater still judges a running pod's
	// fraction against that whole GPU (updater.AdmittedUnchanged) and replaces it for
	// protective growth only (updater.LowConfidenceAdmits), as it does in a cluster.
	lowConfidence bool
}

// sizer is an adaptive policy's model: it reads the samples a live recommender would
// read and turns them into decisions.
type sizer interface {
	// feed adds the samples of step k of the alive runs, stamped at the step's end.
	feed(tl *timeline, alive []int, k int)
	// decide recomputes every container's decision at now.
	decide(tl *timeline, now time.Time)
	// decision returns the current decision of container wc.
	decision(wc int) decision
	// incompleteData is what the updater reads of workload w's data now
	// (updater.Rules.IncompleteData): "" when complete.
	incompleteData(w int) string
}

// gpufracSizer runs the recommender's own code: history.Model fed per step, and
// recommend.Config.Recommend per workload with the previous recommendations, as
// RunOnce does.
type gpufracSizer struct {
	cfg       recommend.Config
	keep      time.Duration // history kept (the recommender's --history-length)
	capacity  int64
	model     *history.Model
	spec      []gpufracv1.GPUFractionAutoscalerSpec
	prev      [][]gpufracv1.ContainerRecommendation
	decisions []decision
	// boot is the step at whose end the recommender is installed and bootstraps the
	// history before it from Prometheus (bootstrap); it reads nothing before.
	boot int
	// interval is the memory aggregation interval; windows the running interval's memory
	// read per run; stale the recommender's stale-series rule (feed), which judges flat
	// memory only where the replayed source's memory may go stale (mayGoStale: false for
	// DCGM's framebuffer memory, the fields the simulator replays).
	interval   time.Duration
	windows    []memWindow
	stale      metrics.StaleMemory
	mayGoStale bool
	lastGC     time.Time
	buf        [1]metrics.Sample
	// placed is the policy the sizer decides for, whose GPUs' loads (polState.load) the
	// recommender reads; nil when the policy is not simulated.
	placed  *polState
	loadBuf [1]metrics.DeviceLoad
	// gaps is the recommender's check for running pods without samples.
	gaps *gapCheck
	// rank orders the runs as the recommender reads their series: by container ID
	// (metrics.ContainerID.String, as metrics.Reader sorts them), then by run; fed is
	// feed's buffer of the alive runs in that order.
	rank []int
	fed  []int
}

func newGPUFracSizer(tl *timeline, cfg recommend.Config, keep time.Duration, headroom *int32, bt gpufracv1.BackendType, capacity int64, boot int) *gpufracSizer {
	s := &gpufracSizer{cfg: cfg, keep: keep, capacity: capacity, model: history.NewModel(cfg.History),
		prev: make([][]gpufracv1.ContainerRecommendation, len(tl.workloads)), decisions: make([]decision, len(tl.containers)),
		windows: make([]memWindow, len(tl.runs)), stale: metrics.StaleMemory{}, boot: boot, gaps: newGapCheck(tl), rank: readOrder(tl)}
	s.interval = s.model.Options().MemoryAggregationInterval
	s.mayGoStale = metrics.MemoryMayGoStale(metrics.DCGM{})
	for _, w := range tl.workloads {
		s.spec = append(s.spec, AutoscalerSpec(w.key, headroom, bt))
	}
	return s
}

// readOrder returns each run's rank in the order the recommender reads and feeds the
// runs' series: by container ID (metrics.Reader sorts the series of an answer by
// metrics.ContainerID.String), the lifetimes of one ID in time order. The order
// matters: the model is fed sample by sample, and what one sample does can depend on
// the samples of other pods fed before it at the same time (a memory level,
// history.ContainerState.LevelSince, is set by the first sample that rises above the
// level by more than history.LevelNoise: fed the higher of two pods' samples first, a
// new level starts; fed the lower first, it does not).
func readOrder(tl *timeline) []int {
	byID := make([]int, len(tl.runs))
	keys := make([]string, len(tl.runs))
	for i := range byID {
		byID[i], keys[i] = i, tl.runs[i].id.String()
	}
	slices.SortStableFunc(byID, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	rank := make([]int, len(tl.runs))
	for n, i := range byID {
		rank[i] = n
	}
	return rank
}

// AutoscalerSpec returns the GPUFractionAutoscaler spec the simulator gives workload w:
// target the Deployment, updateMode Recreate, backend bt ("": none set, the annotations
// backend), and with headroomPercent set, a "*" container policy with that memory
// headroom (percent).
func AutoscalerSpec(w history.WorkloadKey, headroomPercent *int32, bt gpufracv1.BackendType) gpufracv1.GPUFractionAutoscalerSpec {
	mode := gpufracv1.UpdateModeRecreate
	spec := gpufracv1.GPUFractionAutoscalerSpec{
		UpdatePolicy: &gpufracv1.UpdatePolicy{UpdateMode: &mode},
	}
	if bt != "" {
		spec.Backend = &gpufracv1.Backend{Type: bt}
	}
	spec.TargetRef.APIVersion, spec.TargetRef.Kind, spec.TargetRef.Name = "apps/v1", w.Kind, w.Name
	if headroomPercent != nil {
		h := *headroomPercent
		spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{
			ContainerName: gpufracv1.ContainerPolicyDefault, MemoryHeadroomPercent: &h,
		}}}
	}
	return spec
}

// feed adds step k's samples of the alive runs to the model as the recommender reads
// them, in its order (readOrder): per run, the memory peak of the running aggregation
// interval so far (the recommender's read of the interval's peak, (interval start, step
// end]; the whole interval at its end) unless the stale-series rule drops it (metrics.StaleMemory, with
// the window's flatness and the step's compute, as the recommender's live cycle sees
// them) or it reads 0 beside activity (metrics.ZeroWhileBusy), and the step's mean
// activity.
func (s *gpufracSizer) feed(tl *timeline, alive []int, k int) {
	switch {
	case k < s.boot:
		return // not installed yet: the history waits in Prometheus
	case k == s.boot:
		s.bootstrap(tl, k)
		s.gaps.end(tl, alive, k)
		return
	}
	at := tl.stepEnd(k)
	from := at.Add(-time.Millisecond).Truncate(s.interval)
	s.gaps.begin()
	s.fed = append(s.fed[:0], alive...)
	slices.SortFunc(s.fed, func(a, b int) int { return s.rank[a] - s.rank[b] })
	for _, i := range s.fed {
		r := &tl.runs[i]
		w := tl.workloads[r.workload].key
		j := k - r.start
		win := &s.windows[i]
		if !win.from.Equal(from) {
			*win = newMemWindow(from)
		}
		win.take(r, j)
		cpu := r.cpuRaw[j]
		if v := win.high; !math.IsNaN(v) {
			n := 0
			if !math.IsNaN(cpu) {
				n = 1
			}
			busy := n > 0 && cpu > 0
			stale := s.stale.Judge(r.id, at.Sub(from), v, s.mayGoStale && win.flat(), n, busy) ||
				!s.mayGoStale && metrics.ZeroWhileBusy(v, busy)
			if !stale {
				addSample(s.model, &s.buf, w, r.id, metrics.SignalMemory, at, v, nil)
			}
			s.gaps.memory(tl, i, !stale, stale)
		}
		if math.IsNaN(cpu) {
			s.gaps.compute(tl, i, k, 0)
		} else {
			s.gaps.compute(tl, i, k, 1)
			var load []metrics.DeviceLoad
			if s.placed != nil && s.placed.load[i] != loadAlone {
				s.loadBuf[0] = metrics.DeviceLoad{Time: at, Saturated: s.placed.load[i] == loadSaturated}
				load = s.loadBuf[:]
			}
			addSample(s.model, &s.buf, w, r.id, metrics.SignalCompute, at, cpu, load)
		}
	}
	s.gaps.end(tl, alive, k)
}

// bootstrap feeds the history of steps 0..b as the recommender's first cycle at the end
// of step b reads it from Prometheus (recommender/load.go): per run, the memory peak of
// each whole aggregation interval (stamped at its end) and of the running one (stamped at
// the step's end), each judged by the stale-series rule with the window's flatness and
// every compute sample inside the window, and every step's mean activity, run after
// run in its order (readOrder), the running intervals' peaks after every run's whole
// intervals (a query of their own).
func (s *gpufracSizer) bootstrap(tl *timeline, b int) {
	bootAt := tl.stepEnd(b)
	order := make([]int, len(tl.runs))
	for i, n := range s.rank {
		order[n] = i
	}
	s.gaps.bootstrap(tl, b, order)
	// The running interval's peaks: read by a query of their own after the whole
	// intervals' (recommender's readData), so fed after every run's whole intervals.
	type running struct {
		run, n int
		busy   bool
	}
	var last []running
	for _, i := range order {
		r := &tl.runs[i]
		if r.start > b {
			continue
		}
		w := tl.workloads[r.workload].key
		var win memWindow
		n, busy := 0, false
		for k := r.start; k <= min(r.end, b); k++ {
			at := tl.stepEnd(k)
			if from := at.Add(-time.Millisecond).Truncate(s.interval); !win.from.Equal(from) {
				if k > r.start {
					s.readPeak(tl, i, &win, n, busy, win.from.Add(s.interval))
				}
				win, n, busy = newMemWindow(from), 0, false
			}
			j := k - r.start
			win.take(r, j)
			if cpu := r.cpuRaw[j]; !math.IsNaN(cpu) {
				n++
				busy = busy || cpu > 0
				addSample(s.model, &s.buf, w, r.id, metrics.SignalCompute, at, cpu, nil)
			}
		}
		s.windows[i] = win
		if end := win.from.Add(s.interval); end.After(bootAt) {
			last = append(last, running{i, n, busy})
		} else {
			s.readPeak(tl, i, &win, n, busy, end)
		}
	}
	for _, l := range last {
		s.readPeak(tl, l.run, &s.windows[l.run], l.n, l.busy, bootAt)
	}
}

// readPeak feeds run i's memory peak of window win, read at at, unless the stale-series
// rule drops it (with n compute samples in the window, busy where one was above 0) or it
// reads 0 beside activity (metrics.ZeroWhileBusy).
func (s *gpufracSizer) readPeak(tl *timeline, i int, win *memWindow, n int, busy bool, at time.Time) {
	if math.IsNaN(win.high) {
		return
	}
	r := &tl.runs[i]
	stale := s.stale.Judge(r.id, at.Sub(win.from), win.high, s.mayGoStale && win.flat(), n, busy) ||
		!s.mayGoStale && metrics.ZeroWhileBusy(win.high, busy)
	if !stale {
		addSample(s.model, &s.buf, tl.workloads[r.workload].key, r.id, metrics.SignalMemory, at, win.high, nil)
	}
	s.gaps.memory(tl, i, !stale, stale)
}

// memWindow is a run's memory read of the running aggregation interval: its start and
// the highest and lowest samples (bytes; NaN: none yet).
type memWindow struct {
	from      time.Time
	high, low float64
}

// newMemWindow returns the empty read of the interval starting at from.
func newMemWindow(from time.Time) memWindow {
	return memWindow{from: from, high: math.NaN(), low: math.NaN()}
}

// take adds step j of run r's lifetime (its highest and lowest memory sample) to the read.
func (m *memWindow) take(r *run, j int) {
	if v := r.memRaw[j]; !math.IsNaN(v) {
		m.high = nanMax(m.high, v)
		m.low = -nanMax(-m.low, -r.memLow[j])
	}
}

// flat reports whether every sample of the read was equal (metrics.FlatQuery's standard
// deviation 0).
func (m *memWindow) flat() bool { return m.high == m.low }

// nanMax is the larger of a and b, where NaN (none) is smaller than any value.
func nanMax(a, b float64) float64 {
	if math.IsNaN(a) || b > a {
		return b
	}
	return a
}

// feedModel adds step k's per-step memory peak and mean activity of the alive runs to
// model, as one sample each stamped at the step's end: what the recommender's memory
// peak query (max_over_time) and compute query (avg_over_time over one cycle) return.
func feedModel(model *history.Model, buf *[1]metrics.Sample, tl *timeline, alive []int, k int) {
	at := tl.stepEnd(k)
	for _, i := range alive {
		r := &tl.runs[i]
		w := tl.workloads[r.workload].key
		if v := r.memRaw[k-r.start]; !math.IsNaN(v) {
			addSample(model, buf, w, r.id, metrics.SignalMemory, at, v, nil)
		}
		if v := r.cpuRaw[k-r.start]; !math.IsNaN(v) {
			addSample(model, buf, w, r.id, metrics.SignalCompute, at, v, nil)
		}
	}
}

// addSample adds one sample of container id to model, through buf (no allocation per
// sample): memory in bytes, compute a ratio read from metrics.DCGMGPUUtil, the field the
// simulator replays, with load the device's load at the sample as the reader reports it
// (metrics.Series.DeviceLoad; nil: alone on its GPU, or memory).
func addSample(model *history.Model, buf *[1]metrics.Sample, w history.WorkloadKey, id metrics.ContainerID, signal metrics.Signal, at time.Time, v float64, load []metrics.DeviceLoad) {
	buf[0] = metrics.Sample{Time: at, Value: v}
	series := metrics.Series{ID: id, Samples: buf[:], DeviceLoad: load}
	if signal == metrics.SignalCompute {
		series.Source = metrics.DCGMGPUUtil
	}
	model.Add(w, signal, series)
}

func (s *gpufracSizer) decide(tl *timeline, now time.Time) {
	if now.Before(tl.stepEnd(s.boot)) {
		return // not installed yet
	}
	for w := range tl.workloads {
		recs, _, _ := s.cfg.Recommend(s.model, tl.workloads[w].key, &s.spec[w], nil, s.prev[w], gpufracv1.GuardrailNone, now)
		// A gap in the cycle's data keeps the written recommendation, as the
		// recommender does; a first one is written from what was read.
		if len(recs) > 0 && (s.gaps.incomplete[w] == "" || len(s.prev[w]) == 0) {
			s.prev[w] = recs
		}
		// The updater's rollback floor in force, which the recommender raises what it
		// writes (or keeps) to (policy.ApplyFloors, as its applyFloor).
		if s.placed != nil && !updater.FloorExpired(s.placed.floors[w], now) {
			policy.ApplyFloors(s.prev[w], s.placed.floors[w])
		}
	}
	for c, ci := range tl.containers {
		s.decisions[c] = decision{}
		for i := range s.prev[ci.workload] {
			if rec := &s.prev[ci.workload][i]; rec.ContainerName == ci.container {
				s.decisions[c] = recDecision(&s.spec[ci.workload], rec, s.cfg.LowConfidence, s.cfg.Estimator.WithDefaults().FullConfidenceHistory, s.capacity)
			}
		}
	}
	if now.Sub(s.lastGC) >= time.Hour {
		s.model.GC(now, s.keep)
		s.lastGC = now
	}
}

func (s *gpufracSizer) decision(wc int) decision { return s.decisions[wc] }

func (s *gpufracSizer) incompleteData(w int) string { return s.gaps.incomplete[w] }

// recDecision turns a container recommendation into a decision the way the product
// does: contract.TargetsOf reads the recommendation and contract.WithPolicy applies
// the policy's minMemory, as the webhook and the updater do (gfa and gfr as the
// simulator's autoscaler holds them), and the pod gets what the
// admission webhook writes: the memory target (at most one GPU) and the compute target
// where the recommendation partitions compute (none otherwise: the pod then reserves no
// compute and the evaluator measures contention). None below the LowConfidence threshold (lowConfidence, 0–1) or without a
// memory target; below the threshold with a memory target, the decision is not ok and
// marked lowConfidence, with the target the updater judges running pods by.
func recDecision(spec *gpufracv1.GPUFractionAutoscalerSpec, rec *gpufracv1.ContainerRecommendation, lowConfidence float64, fullHistory time.Duration, capacity int64) decision {
	if rec.Target.Memory == nil {
		return decision{}
	}
	gfa := &gpufracv1.GPUFractionAutoscaler{Spec: *spec}
	gfr := &gpufracv1.GPUFractionRecommendation{}
	gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{*rec}
	t, ok := contract.WithPolicy(gfa, contract.TargetsOf(gfa, gfr), capacity)[rec.ContainerName]
	if !ok || t.Memory < 0 || !t.ControlsMemory {
		return decision{}
	}
	if _, tooLarge := t.UnwritableMemory(capacity); tooLarge || float64(rec.ConfidencePercent)/100 < lowConfidence {
		// Above one GPU (a rollback floor after an out-of-memory exit at the whole GPU
		// lifts the recommendation there: policy.ApplyFloor), the webhook admits pods
		// unchanged as below the minimum confidence, and the updater judges them against
		// the whole GPU (its unwritable check).
		return decision{lowConfidence: true, target: t}
	}
	want := packing.Alloc{MemoryBytes: min(t.Memory, capacity)}
	if v, _, ok := t.PlacedCompute(); ok {
		// A time-sliced pod is placed by its compute request (no limit).
		want.ComputeMilli = min(v, 1000)
	}
	return decision{ok: true, want: want, target: t, full: time.Duration(rec.HistoryHours)*time.Hour >= fullHistory}
}

// vpaSizer keeps VPA's memory model: a history.Model with VPA's daily aggregation
// interval and half-life (VPA's decaying histogram and memory buckets), from which it
// takes VPA's target and bounds.
type vpaSizer struct {
	model         *history.Model
	lowConfidence float64
	capacity      int64
	decisions     []decision
	buf           [1]metrics.Sample
}

func newVPASizer(tl *timeline, step time.Duration, lowConfidence float64, capacity int64) *vpaSizer {
	return &vpaSizer{
		model: history.NewModel(history.Options{MemoryAggregationInterval: VPAMemoryAggregationInterval,
			HalfLife: VPAMemoryHalfLife, PeakWindow: VPAMemoryAggregationInterval, SampleInterval: step}),
		lowConfidence: lowConfidence, capacity: capacity, decisions: make([]decision, len(tl.containers)),
	}
}

// feed adds memory and compute: VPA's confidence counts the container's CPU samples
// (one per minute) and its lifespan, which compute samples stand in for here.
func (s *vpaSizer) feed(tl *timeline, alive []int, k int) {
	feedModel(s.model, &s.buf, tl, alive, k)
}

func (s *vpaSizer) decide(tl *timeline, now time.Time) {
	for c, ci := range tl.containers {
		st := s.model.Container(history.ContainerKey{WorkloadKey: tl.workloads[ci.workload].key, Container: ci.container})
		s.decisions[c] = decision{}
		if st == nil || st.Memory.IsEmpty() {
			continue
		}
		// VPA's confidence is history length in days; its bounds scale with it
		// (upper: (1 + 1/days)^1, lower: (1 + 0.001/days)^-2).
		days := max(st.Span().Hours()/24, 1e-3)
		if math.Min(1, days) < s.lowConfidence {
			continue
		}
		grow := 1 + VPASafetyMargin
		size := func(p, scale float64) int64 {
			return min(s.capacity, int64(math.Ceil(math.Max(st.Memory.Percentile(p)*grow*scale, VPAMinMemoryBytes))))
		}
		target := size(VPATargetPercentile, 1)
		lower := min(target, size(VPALowerPercentile, math.Pow(1+0.001/days, -2)))
		upper := max(target, size(VPAUpperPercentile, 1+1/days))
		// VPA's updater has no near-limit rule (PeakMemory unknown) and does not
		// partition compute (Compute −1).
		s.decisions[c] = decision{ok: true, want: packing.Alloc{MemoryBytes: target},
			target: contract.Target{Memory: target, LowerMemory: lower, UpperMemory: upper, Compute: -1, LowerCompute: -1, UpperCompute: -1,
				PeakMemory: -1, ControlsMemory: true},
			full: days >= 1}
	}
}

func (s *vpaSizer) decision(wc int) decision { return s.decisions[wc] }

// incompleteData is always "": VPA's recommender has no such condition.
func (s *vpaSizer) incompleteData(int) string { return "" }

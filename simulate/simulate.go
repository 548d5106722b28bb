// Package simulate is gpufrac's what-if simulator: it replays a GPU usage trace step by
// step (one recommender cycle, default one minute) through sizing policies, a packer and
// an updater, and evaluates every policy against the usage the trace actually shows.
//
// The gpufrac policy runs the recommender's own code, not a copy: the samples a live
// recommender would read at each cycle (per-step memory peaks and mean activity, which
// its max_over_time and avg_over_time queries return) go into a history.Model, and recommend.Config.Recommend turns the model into
// recommendations exactly as Recommender.RunOnce does. A trace pod runs from its first
// sample to its last; a hole in its samples is an exporter or scrape gap, which the
// recommender's own gap check reads (recommender.GapCheck: NoSamplesWhileRunning keeps
// the recommendation, and the updater shrinks nothing of the workload meanwhile) and
// the evaluator charges at the last sample. Around it the simulator plays the
// updater's rules (Options.Updater): a fraction changes only by replacing the pod; pods
// of a workload without a confident recommendation get a whole GPU; replacements wait
// for a minimum pod lifetime and, when resize windows are set, shrinks wait for a
// window; a cluster-wide rate limit caps replacements per minute.
//
// Pods are placed on GPUs of one memory size the way a fraction-aware scheduler would:
// best fit by memory among the GPUs in use whose free memory and compute (sum of
// compute allocations ≤ 1 GPU) fit the pod, else a new GPU; pods never migrate. The evaluator charges, per step, the GPUs held, memory overruns of
// the pod's limit (a crash under an enforcing backend) and of the GPU (a crash
// without enforcement), compute contention (co-tenants' activity above 100 %), GPU
// utilisation and replacements (see PolicyResult).
//
// The backend (Options.Backend) decides what a pod of an adaptive policy holds, as the
// product's backend writes it: a memory request the packer places by and a limit the
// pod is killed above — on annotations (the default) the target as the limit, packed as
// it is or, with the observed-peak memory request, by the observed peak below it
// (backend.ObservedPeakRequestMiB), on kai-nvfractions those of
// backend.NVFractionsConfig.RequestLimit — so that co-tenants may burst
// together above the GPU's memory: a GPU overrun, counted for every tenant
// (GPUOverrunPodMinutes), and an out-of-memory exit for each tenant above its request.
// The updater reads the applied record (the target) in either case.
//
// Not modelled: usage changes caused by co-location (the trace was recorded with one
// GPU per pod), restart cost and downtime of a replaced pod, out-of-memory restarts,
// latency, and the recommender's latency guardrail (always gpufracv1.GuardrailNone).
package simulate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/recommend"
	"github.com/gpufrac/gpufrac/updater"
)

// Updater defaults: the updater's own (package updater, cmd/updater's flags), so a
// simulation runs the rules a default install runs.
const (
	// DefaultMinLifetime is updater.DefaultMinPodAge.
	DefaultMinLifetime = updater.DefaultMinPodAge
	// DefaultReplacementsPerMinute is the cluster-wide replacement rate limit: the
	// updater's default eviction rate (updater.DefaultEvictionRate, per second) per minute.
	DefaultReplacementsPerMinute = updater.DefaultEvictionRate * 60
	// DefaultChangeThreshold is updater.DefaultThreshold.
	DefaultChangeThreshold = updater.DefaultThreshold
	// DefaultNearLimit is updater.DefaultNearLimit.
	DefaultNearLimit = updater.DefaultNearLimit
	// DefaultComputeRequestGrowth is updater.DefaultComputeRequestGrowth.
	DefaultComputeRequestGrowth = updater.DefaultComputeRequestGrowth
)

// Options configure a simulation. Zero values take the documented defaults.
type Options struct {
	// GPUMemoryBytes is the memory of one simulated GPU, bytes. Required.
	GPUMemoryBytes int64
	// Policies are the policy names to simulate, in report order (DefaultPolicies when
	// empty): the Policy* constants and TimeSlicing(n).
	Policies []string
	// Interval is the simulation step and the recommender's cycle. Default 1m.
	Interval time.Duration
	// HistoryLength is the history the recommender keeps (its --history-length).
	// Default recommend.DefaultHistoryLength.
	HistoryLength time.Duration
	// Recommender configures the gpufrac policy as cmd/recommender configures the live
	// recommender; zero fields take recommend.Config's defaults, and Policy.GPUMemoryBytes
	// is set to GPUMemoryBytes. LowConfidence (default 0.5) gates every adaptive
	// policy: below it pods get a whole GPU.
	Recommender recommend.Config
	// MemoryHeadroomPercent, when set, is every autoscaler's "*" container policy
	// memoryHeadroomPercent, percent (nil: the recommender's default, 15).
	MemoryHeadroomPercent *int32
	// Updater holds the updater's rules.
	Updater UpdaterOptions
	// WarmUp is the part of the trace the recommender reads as history before the
	// simulation starts placing pods and counting (as if gpufrac were installed WarmUp
	// after the trace starts and bootstrapped its history from Prometheus). Default 0.
	WarmUp time.Duration
	// Lookback, when positive, is how long a pod may go without samples and still run: a
	// longer gap ends the pod, and its next sample starts a new pod of the same workload
	// (for traces that give one name to successive pods, such as a StatefulSet's). Zero,
	// the default: a trace pod runs from its first sample to its last, and a gap in its
	// samples is an exporter or scrape gap (see timeline), as Kubernetes never gives a
	// new Deployment pod an old pod's name.
	Lookback time.Duration
	// Backend is the backend that writes the adaptive policies' fractions (spec.backend.type).
	// gpufracv1.BackendKAINVFractions writes a memory request and a limit
	// (backend.NVFractionsConfig.RequestLimit with NVFractions): the packer places pods by
	// the request, a pod is out of memory above its limit, and co-tenants whose actual
	// memory sums above the GPU's are a GPU overrun. Any other value, and the default
	// "" (the API's default backend, annotations), writes the memory target as the
	// limit and, as Annotations.MemoryRequest says, a memory request the packer places
	// by (by default none: the limit; observed-peak: the observed peak when below the
	// target).
	Backend gpufracv1.BackendType
	// NVFractions configures the kai-nvfractions backend as the webhook's --nvfractions-*
	// flags do (zero fields: their defaults).
	NVFractions backend.NVFractionsConfig
	// Annotations configures the annotations backend as the webhook's --annotation-*
	// flags do (zero fields: their defaults); only MemoryRequest is read.
	Annotations backend.AnnotationsConfig
}

// UpdaterOptions are the updater's rules in the simulation.
type UpdaterOptions struct {
	// MinLifetime is how old a pod inside its bounds must be before it is replaced for
	// being ChangeThreshold or more from its target (updater.Rules.MinPodAge; default
	// DefaultMinLifetime; negative: no minimum). Bounds and protective growth ignore it.
	MinLifetime time.Duration
	// ReplacementsPerMinute is the cluster-wide rate limit (default
	// DefaultReplacementsPerMinute; negative: unlimited). Urgent growth goes first.
	ReplacementsPerMinute float64
	// ChangeThreshold is the relative difference from the target, ratio, at which a pod
	// inside its bounds is replaced (updater.Rules.Threshold; default
	// DefaultChangeThreshold).
	ChangeThreshold float64
	// NearLimit is the observed memory peak ÷ allocated memory, ratio, from which memory
	// growth is protective (updater.Rules.NearLimit; default DefaultNearLimit).
	NearLimit float64
	// ComputeRequestGrowth is the rise, ratio, of a time-sliced pod's computeRequest over
	// the one it was placed with from which it is replaced
	// (updater.Rules.ComputeRequestGrowth; default DefaultComputeRequestGrowth;
	// negative: off).
	ComputeRequestGrowth float64
	// PersistCycles, PersistFor and MinReplacementInterval are the updater's hysteresis
	// (updater.Hysteresis; defaults updater.DefaultPersistCycles,
	// updater.DefaultPersistFor, updater.DefaultMinReplacementInterval; negative
	// durations: none).
	PersistCycles          int
	PersistFor             time.Duration
	MinReplacementInterval time.Duration
	// ResizeWindows, when set, restrict replacements that shrink memory or compute to
	// these windows (cron schedules in github.com/robfig/cron/v3 syntax).
	ResizeWindows []gpufracv1.ResizeWindow
	// UrgentGrowth lets protective growth (an out-of-memory exit, a peak near the
	// limit) skip the minimum lifetime and the resize windows (default true, as the
	// API's updatePolicy.urgentGrowth).
	UrgentGrowth *bool
	// MinReplicas is the fewest running pods a workload must have for one to be
	// replaced (default 1; the API's default is 2, which would freeze single-replica
	// workloads). With MaxInFlight it is the workload's disruption budget, checked
	// before each replacement as the updater does (updater.BudgetOf, Budget.Allow and
	// Took): a workload's pods replaced in one cycle are in flight for the rest of it,
	// and its replacements run from the next (they start at once and are ready then).
	MinReplicas int
	// MaxInFlight is the share of a workload's pods that may be replaced in one cycle,
	// ratio 0–1, at least one pod (the updater's --max-in-flight; default
	// updater.DefaultMaxInFlight).
	MaxInFlight float64
	// MaxInFlightPerDevice is the most pods of one GPU replaced in one cycle, ordinary
	// replacements and consolidation together, where the backend says which GPU a pod
	// is on (kai-nvfractions: KAI's GPU group; the annotations backend does not), as the
	// updater's --max-in-flight-per-device (updater.DeviceAllows; 0: the default
	// updater.DefaultMaxInFlightPerDevice; negative: no limit). A replacement runs from
	// the next step, so none is in flight at a cycle's start.
	MaxInFlightPerDevice int
	// Consolidate empties one GPU per step where the updater would
	// (updater.Config.Consolidate, packing.Consolidation): the tenants of the least
	// held GPU whose replacements all fit on the other GPUs in use are replaced and
	// placed there, each past MinLifetime, inside the resize windows, within
	// ReplacementsPerMinute and MinReplicas. gpufrac only (VPA has no such rule). The
	// updater knows each pod's GPU from HAMi's and KAI's placement only, so it needs
	// the kai-nvfractions backend here.
	Consolidate bool
	// ConsolidationComputeMilli is the updater's --consolidation-compute: the most
	// compute, milli-GPU, a GPU may hold after pods moved onto it (0:
	// packing.DefaultConsolidationComputeMilli). kai-nvfractions writes no compute, so
	// it binds nothing there.
	ConsolidationComputeMilli int64
}

// Validate returns the error Run returns for o whatever the trace: the checks of the
// options alone (GPU size, policies, lookback, warm-up, backend, updater), each naming
// its gpufrac simulate flag, so that a caller can refuse them before it reads a trace.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults fills defaults and checks values; its errors name the gpufrac simulate
// flag of the option (--gpu-memory, --policies, --lookback, --warm-up, ...).
func (o Options) withDefaults() (Options, error) {
	if o.GPUMemoryBytes <= 0 {
		return o, fmt.Errorf("--gpu-memory %d bytes: must be positive", o.GPUMemoryBytes)
	}
	if len(o.Policies) == 0 {
		o.Policies = DefaultPolicies
	}
	if err := checkPolicies(o.Policies); err != nil {
		return o, err
	}
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.HistoryLength <= 0 {
		o.HistoryLength = recommend.DefaultHistoryLength
	}
	o.Recommender.History.SampleInterval = o.Interval
	o.Recommender.Policy.GPUMemoryBytes = float64(o.GPUMemoryBytes)
	o.Recommender = o.Recommender.WithDefaults()
	if o.Lookback < 0 {
		return o, fmt.Errorf("--lookback %s: must not be negative", o.Lookback)
	}
	if o.WarmUp < 0 {
		return o, fmt.Errorf("--warm-up %s: must not be negative", o.WarmUp)
	}
	cfg := backend.Config{NVFractions: o.NVFractions, Annotations: o.Annotations, GPUMemoryBytes: o.GPUMemoryBytes}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return o, err // its errors name the --nvfractions-* and --annotation-* flags
	}
	o.NVFractions, o.Annotations = cfg.NVFractions, cfg.Annotations
	u := &o.Updater
	if u.MinLifetime == 0 {
		u.MinLifetime = DefaultMinLifetime
	} else if u.MinLifetime < 0 {
		u.MinLifetime = 0
	}
	if u.ReplacementsPerMinute == 0 {
		u.ReplacementsPerMinute = DefaultReplacementsPerMinute
	}
	if u.ChangeThreshold <= 0 {
		u.ChangeThreshold = DefaultChangeThreshold
	}
	if u.NearLimit <= 0 {
		u.NearLimit = DefaultNearLimit
	}
	if u.ComputeRequestGrowth == 0 {
		u.ComputeRequestGrowth = DefaultComputeRequestGrowth
	}
	if u.PersistCycles <= 0 {
		u.PersistCycles = updater.DefaultPersistCycles
	}
	u.PersistFor = durationDefault(u.PersistFor, updater.DefaultPersistFor)
	u.MinReplacementInterval = durationDefault(u.MinReplacementInterval, updater.DefaultMinReplacementInterval)
	if u.UrgentGrowth == nil {
		t := true
		u.UrgentGrowth = &t
	}
	if u.MinReplicas <= 0 {
		u.MinReplicas = 1
	}
	if u.MaxInFlight == 0 {
		u.MaxInFlight = updater.DefaultMaxInFlight
	}
	if u.MaxInFlightPerDevice == 0 {
		u.MaxInFlightPerDevice = updater.DefaultMaxInFlightPerDevice
	}
	if u.MaxInFlight < 0 || u.MaxInFlight > 1 {
		return o, fmt.Errorf("--max-in-flight %v: want a share of the workload's pods, 0-1, as the updater's", u.MaxInFlight)
	}
	if u.ConsolidationComputeMilli < 0 || u.ConsolidationComputeMilli > 1000 {
		return o, fmt.Errorf("--consolidation-compute %d: want milli-GPU in 1–1000 (0: the default)", u.ConsolidationComputeMilli)
	}
	if u.Consolidate && o.Backend != gpufracv1.BackendKAINVFractions {
		return o, fmt.Errorf("--consolidate needs each pod's GPU, which the updater reads from HAMi's and KAI's placement only: add --backend %s (the annotations backend does not say where a pod runs)", gpufracv1.BackendKAINVFractions)
	}
	return o, nil
}

// durationDefault returns def for 0, 0 for a negative d (none), else d.
func durationDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Settings records the values a simulation ran with (defaults filled in).
type Settings struct {
	// Step is the simulation step and recommender cycle, e.g. "1m0s".
	Step string `json:"step"`
	// WarmUp is Options.WarmUp.
	WarmUp string `json:"warmUp"`
	// Lookback is Options.Lookback ("0s": pods end at their last sample only).
	Lookback string `json:"lookback"`
	// Backend is Options.Backend ("" for the annotations backend); NVFractionsRequest
	// and NVFractionsLimit its request and limit sources when it is kai-nvfractions,
	// AnnotationMemoryRequest the annotations backend's memory request otherwise.
	Backend                 gpufracv1.BackendType `json:"backend,omitempty"`
	NVFractionsRequest      string                `json:"nvfractionsRequest,omitempty"`
	NVFractionsLimit        string                `json:"nvfractionsLimit,omitempty"`
	AnnotationMemoryRequest string                `json:"annotationMemoryRequest,omitempty"`
	// LowConfidence is the confidence (0–1) under which pods get a whole GPU.
	LowConfidence float64 `json:"lowConfidence"`
	// MemoryHeadroomPercent is the gpufrac memory headroom, percent.
	MemoryHeadroomPercent int32 `json:"memoryHeadroomPercent"`
	// FullConfidenceHistory is the history length at which confidence reaches 1.
	FullConfidenceHistory string `json:"fullConfidenceHistory"`
	// MemoryAggregationInterval is the interval of one gpufrac memory peak.
	MemoryAggregationInterval string `json:"memoryAggregationInterval"`
	// MinLifetime, ReplacementsPerMinute, ChangeThreshold, UrgentGrowth, MinReplicas,
	// MaxInFlight and ResizeWindows are the updater's rules (see UpdaterOptions).
	MinLifetime           string  `json:"minLifetime"`
	ReplacementsPerMinute float64 `json:"replacementsPerMinute"`
	ChangeThreshold       float64 `json:"changeThreshold"`
	// NearLimit, PersistCycles, PersistFor and MinReplacementInterval are the
	// updater's near-limit ratio and hysteresis (see UpdaterOptions).
	NearLimit              float64                  `json:"nearLimit"`
	PersistCycles          int                      `json:"persistCycles"`
	PersistFor             string                   `json:"persistFor"`
	MinReplacementInterval string                   `json:"minReplacementInterval"`
	UrgentGrowth           bool                     `json:"urgentGrowth"`
	MinReplicas            int                      `json:"minReplicas"`
	MaxInFlight            float64                  `json:"maxInFlight"`
	ResizeWindows          []gpufracv1.ResizeWindow `json:"resizeWindows,omitempty"`
	// Consolidate is UpdaterOptions.Consolidate.
	Consolidate bool `json:"consolidate,omitempty"`
	// MaxInFlightPerDevice is UpdaterOptions.MaxInFlightPerDevice where the backend
	// applies it (kai-nvfractions; negative: no limit), else 0.
	MaxInFlightPerDevice int `json:"maxInFlightPerDevice,omitempty"`
}

// TraceInfo describes the replayed trace.
type TraceInfo struct {
	// TracePods is the number of trace pods (containers); Pods the number of pod
	// lifetimes after splitting at gaps longer than the lookback.
	TracePods int `json:"tracePods"`
	Pods      int `json:"pods"`
	// Workloads is the number of workloads (Deployments).
	Workloads int `json:"workloads"`
	// Start and End bound the steps replayed: Start is the beginning of the first step,
	// End the end of the last; EvaluatedFrom is where counting starts (after WarmUp).
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	EvaluatedFrom time.Time `json:"evaluatedFrom"`
	// Steps is the number of steps replayed, the warm-up included; EvaluatedSteps the
	// number counted (from EvaluatedFrom).
	Steps          int `json:"steps"`
	EvaluatedSteps int `json:"evaluatedSteps"`
	// PodsWithoutCompute is the number of trace pods without a compute sample: their
	// activity counts as 0 in compute utilisation and contention. When every pod is
	// without one, those figures are unknown (PolicyResult.ComputeKnown).
	PodsWithoutCompute int `json:"podsWithoutCompute"`
	// PodsAboveGPU is the number of trace pods whose memory exceeds the GPU's
	// (GPUMemoryBytes) at some step: no policy can hold them on one GPU, so they overrun
	// under every policy. The trace came from larger GPUs, or --gpu-memory is too small.
	PodsAboveGPU int `json:"podsAboveGPU"`
}

// PolicyResult is one policy's evaluation against the trace's actual usage over the
// evaluated steps. Minutes are step counts × step length in minutes.
type PolicyResult struct {
	// Policy is the policy name.
	Policy string `json:"policy"`
	// GPUMinutes is the number of GPU-minutes held: GPUs with at least one live tenant.
	GPUMinutes float64 `json:"gpuMinutes"`
	// PodMinutes is the number of pod-minutes run, which is what one GPU per pod holds.
	PodMinutes float64 `json:"podMinutes"`
	// GPUsPerPod is GPUMinutes / PodMinutes: the ratio to one GPU per pod.
	GPUsPerPod float64 `json:"gpusPerPod"`
	// VsClairvoyant is GPUMinutes / the clairvoyant-memory policy's GPUMinutes (the
	// true-peak-memory bound; 0, null in JSON, when that policy was not simulated).
	VsClairvoyant float64 `json:"vsClairvoyant"`
	// PeakGPUs is the most GPUs held at once.
	PeakGPUs int `json:"peakGPUs"`
	// PodLimitOverrunMinutes counts pod-minutes in which the pod's actual memory exceeded
	// its memory limit (its allocation, where the backend writes one value): an
	// out-of-memory crash under an enforcing backend.
	PodLimitOverrunMinutes float64 `json:"podLimitOverrunMinutes"`
	// WarmUpOverrunMinutes is the part of PodLimitOverrunMinutes whose allocation came
	// from a recommendation on a history shorter than the estimator's
	// FullConfidenceHistory (default 24h; VPA: one day): overruns while the workload
	// warms up. Always 0 for policies that do not learn.
	WarmUpOverrunMinutes float64 `json:"warmUpOverrunMinutes"`
	// PodsWithOverrun counts pods with at least one such minute.
	PodsWithOverrun int `json:"podsWithOverrun"`
	// GPUOverrunMinutes counts GPU-minutes in which the co-tenants' actual memory summed
	// above the GPU's memory: a crash without enforcement, or, where pods are packed by a
	// request below their limit, a crash of whichever tenant the GPU runs out on.
	GPUOverrunMinutes float64 `json:"gpuOverrunMinutes"`
	// GPUOverrunPodMinutes counts the pod-minutes of every tenant of those GPU-minutes:
	// each of them is at risk of an out-of-memory crash.
	GPUOverrunPodMinutes float64 `json:"gpuOverrunPodMinutes"`
	// WarmUpGPUOverrunPodMinutes is the part of GPUOverrunPodMinutes of tenants whose
	// allocation came from a recommendation on a history shorter than
	// FullConfidenceHistory (as WarmUpOverrunMinutes).
	WarmUpGPUOverrunPodMinutes float64 `json:"warmUpGPUOverrunPodMinutes"`
	// ContentionPodMinutes counts pod-minutes on GPUs whose co-tenants' actual activity
	// summed above 100 % of one GPU; ContentionShare is its share of PodMinutes, ratio
	// 0–1. Both are 0 and unknown (null in JSON) unless ComputeKnown.
	ContentionPodMinutes float64 `json:"contentionPodMinutes"`
	ContentionShare      float64 `json:"contentionShare"`
	// MemoryUtilisation and ComputeUtilisation are the mean, over GPU-minutes held, of the
	// tenants' actual memory (share of the GPU's) and activity (share of one GPU), each
	// capped at 1, ratio 0–1. ComputeUtilisation is 0 and unknown (null in JSON) unless
	// ComputeKnown.
	MemoryUtilisation  float64 `json:"memoryUtilisation"`
	ComputeUtilisation float64 `json:"computeUtilisation"`
	// ComputeKnown is false when no pod of the trace has a compute sample: compute
	// utilisation and contention are then unknown, not 0.
	ComputeKnown bool `json:"-"`
	// Replacements counts pods replaced to change their allocation.
	Replacements int `json:"replacements"`
	// Consolidations counts the replacements among them that emptied a GPU
	// (UpdaterOptions.Consolidate).
	Consolidations int `json:"consolidations,omitempty"`
	// Reversals counts the replacements that undo a recent one, flapping: a
	// replacement whose change of the pod's memory (its applied record: the memory
	// target the webhook wrote, which the updater compares with the recommendation;
	// bytes) is opposite in direction to that of the same pod's previous replacement
	// that changed it, made at most ReversalWindow (24h) earlier. A pod grown then shrunk
	// back counts one, as does one shrunk then grown (a cold start's whole GPU counts as
	// the memory before its first replacement); a replacement that leaves the memory as
	// it was (for compute only, or a move) neither counts nor breaks a sequence.
	Reversals int `json:"reversals"`
	// ColdStartPodMinutes counts pod-minutes on the cold-start allocation (a whole GPU
	// while the workload's recommendation is below the LowConfidence threshold).
	ColdStartPodMinutes float64 `json:"coldStartPodMinutes"`
}

// Result is the simulation of one trace on one GPU size.
type Result struct {
	// GPUMemoryBytes is the memory of one GPU, bytes.
	GPUMemoryBytes int64 `json:"gpuMemoryBytes"`
	// Trace describes the trace replayed.
	Trace TraceInfo `json:"trace"`
	// Settings are the values the simulation ran with.
	Settings Settings `json:"settings"`
	// Policies holds one result per policy, in Options.Policies order.
	Policies []PolicyResult `json:"policies"`

	detail *detail
}

// detail keeps per-step data for plots.
type detail struct {
	stepMinutes float64
	origin      time.Time
	first       int // first evaluated step
	runs        []runInfo
	// per policy, in Policies order:
	gpus     [][]int32    // GPUs held per evaluated step
	changes  [][][]change // per run: allocation changes
	headroom [][]int64    // histogram of memory headroom per pod-step
	overrun  [][]int32    // per run: overrun steps
	binBytes float64      // headroom bin width
}

type runInfo struct {
	name       string
	start, end int
	mem        []float64
	peakMem    float64
}

// change is an allocation a pod got at a step (placement or replacement): alloc is what
// it was packed by, limit the memory above which it is out of memory, bytes.
type change struct {
	step  int
	alloc packing.Alloc
	limit int64
}

// grant is what a pod holds: alloc is what the scheduler packs (the memory request and
// the compute share), limit the memory above which the pod is out-of-memory killed,
// bytes; record, compute and request are what the updater reads as the pod's
// allocation: the memory of the webhook's applied record (the recommendation's target),
// bytes, the compute the backend wrote, milli-GPU (-1: none, never compared), and the
// placement-only compute request it wrote (the record's writtenComputeRequest),
// milli-GPU (0: none).
type grant struct {
	alloc                           packing.Alloc
	limit, record, compute, request int64
}

// hardGrant is a grant whose memory is at once request, limit and record.
func hardGrant(a packing.Alloc) grant {
	return grant{alloc: a, limit: a.MemoryBytes, record: a.MemoryBytes, compute: a.ComputeMilli}
}

// polState is one policy's simulation state.
type polState struct {
	spec     policySpec
	res      *PolicyResult
	pk       *packing.Packer
	applied  []grant
	on       []int // GPU index per run, -1 when not placed
	placedAt []int
	cold     []bool
	partial  []bool // allocation from a recommendation on less than the full-confidence history
	oomAt    []int  // last step the pod ran over its memory allocation, -1 when never
	// outOfDate is the last step at whose end the pod was out of date
	// (updater.Need.OutOfDate, whether or not it could be replaced then), -1 when never:
	// consolidation moves no such pod (updater.movablePods).
	outOfDate []int
	// load is each pod's device load at the step last evaluated (loadAlone,
	// loadShared, loadSaturated): what the reader reports of its GPU
	// (metrics.Series.DeviceLoad), fed to the recommender of an adaptive policy.
	load []uint8
	hyst *updater.Hysteresis
	// floors is each workload's rollback floor (status.updater.floor: nil none), which
	// the updater raises for an out-of-memory exit (updater.RaiseOOMFloor) and drops
	// once expired; the gpufrac policy's only (nil for the others). published is each
	// workload's floor as the last cycle left it (status.updater.floor as published, what
	// the webhook reads): a replacement the webhook would write below the floor without
	// it waits for the next cycle (updater.AwaitsFloor), as the updater's awaiting-floor.
	floors    []*gpufracv1.UpdaterFloor
	published []*gpufracv1.UpdaterFloor
	// needs is candidates' buffer of each workload's needs in one cycle (Hysteresis.Observe).
	needs [][]updater.Need
	// lastReplaced is when the updater last replaced one of each workload's pods (zero:
	// never), status.updater.lastEvictionTime: the order of a cycle's replacements
	// (updater.ReplacesBefore).
	lastReplaced []time.Time
	flaps        reversals
	tokens       float64
	memUtil      float64
	cpuUtil      float64
	steps        struct {
		gpu, pod, podOver, warmOver, gpuOver, gpuOverPod, warmGPUOverPod, contention, cold int
	}
}

// Device loads of a pod at one step (polState.load): alone on its GPU, sharing it, or
// sharing it while the tenants' activities summed as the device reports them (at most 1)
// reach metrics.SaturatedActivity.
const (
	loadAlone = iota
	loadShared
	loadSaturated
)

// evaluate charges step k of one policy against the actual usage and records each pod's
// device load (polState.load).
func evaluate(ps *polState, tl *timeline, d *detail, pi, k int, capacity int64) {
	capF := float64(capacity)
	for gi := 0; gi < ps.pk.Len(); gi++ {
		g := ps.pk.GPU(gi)
		if len(g.Tenants) == 0 {
			continue
		}
		var sm, sc float64
		for _, i := range g.Tenants {
			m, c := tl.runs[i].at(k)
			sm += m
			sc += c
			if m > float64(ps.applied[i].limit) {
				ps.oomAt[i] = k
				ps.steps.podOver++
				d.overrun[pi][i]++
				if ps.partial[i] {
					ps.steps.warmOver++
				}
			}
			if ps.cold[i] {
				ps.steps.cold++
			}
			b := int((float64(ps.applied[i].limit) - m + capF) / d.binBytes)
			d.headroom[pi][min(max(b, 0), len(d.headroom[pi])-1)]++
		}
		ps.steps.gpu++
		ps.steps.pod += len(g.Tenants)
		if sm > capF {
			ps.steps.gpuOver++
			ps.steps.gpuOverPod += len(g.Tenants)
			// The GPU runs out: the tenants above their request hold memory nothing
			// guarantees, and the updater sees an out-of-memory exit of each.
			for _, i := range g.Tenants {
				if m, _ := tl.runs[i].at(k); m > float64(ps.applied[i].alloc.MemoryBytes) {
					ps.oomAt[i] = k
				}
				if ps.partial[i] {
					ps.steps.warmGPUOverPod++
				}
			}
		}
		if sc > 1+1e-9 {
			ps.steps.contention += len(g.Tenants)
		}
		l := uint8(loadAlone)
		switch {
		case len(g.Tenants) < 2:
		case math.Min(1, sc) >= metrics.SaturatedActivity:
			l = loadSaturated
		default:
			l = loadShared
		}
		for _, i := range g.Tenants {
			ps.load[i] = l
		}
		ps.memUtil += math.Min(1, sm/capF)
		ps.cpuUtil += math.Min(1, sc)
	}
	d.gpus[pi] = append(d.gpus[pi], int32(ps.pk.Held()))
}

// candidate is a pod the updater wants to replace.
type candidate struct {
	run     int
	dec     decision
	need    updater.Need
	partial bool
	// unchanged: the decision is below the minimum confidence (decision.lowConfidence);
	// the replacement is admitted unchanged, with the cold-start whole GPU.
	unchanged bool
	// awaitsFloor: the workload's rollback floor, raised this cycle, is not published
	// and the webhook would write the replacement below it (updater.AwaitsFloor).
	awaitsFloor bool
}

// candidates returns the pods of an adaptive policy that the updater replaces at the end
// of step k, in the updater's order (updater.ReplacesBefore over autoscaler order, each
// workload's pods oldest first). The decision
// is the updater's own, in the updater's order: updater.Evaluate on each pod's
// allocation, age and last out-of-memory exit (a step over its memory allocation, which
// an enforcing backend ends with an OOM kill); the workload's needs observed by the
// updater's Hysteresis; then, per pod, updater.Admissible for the resize windows and
// Hysteresis.Allow. A cold-start pod stops counting as cold once its workload's
// recommendation is confident. Below the minimum confidence (decision.lowConfidence),
// a pod holding a fraction is judged against the whole GPU of capacity bytes the
// webhook then admits (updater.AdmittedUnchanged) and replaced only for protective
// growth (updater.LowConfidenceAdmits, the updater's recommendationGate), with the whole
// GPU; a cold-start pod already holds it.
func candidates(ps *polState, tl *timeline, alive []int, k int, windows updater.Windows, rules updater.Rules, capacity int64) []candidate {
	now := tl.stepEnd(k)
	win := windows.State(now)
	var pending []candidate
	if len(ps.needs) != len(tl.workloads) {
		ps.needs = make([][]updater.Need, len(tl.workloads))
	}
	for w := range ps.needs {
		ps.needs[w] = ps.needs[w][:0]
	}
	ps.oomFloors(tl, alive, k)
	for _, i := range alive {
		r := &tl.runs[i]
		if r.end <= k {
			continue
		}
		dec := ps.spec.sizer.decision(r.wc)
		if !dec.ok && (!dec.lowConfidence || ps.cold[i]) {
			continue
		}
		if dec.ok && ps.cold[i] {
			// The recommendation is confident now: the pod's whole GPU is no longer
			// the cold-start allocation but an allocation the updater judges.
			ps.cold[i], ps.partial[i] = false, !dec.full
		}
		a := ps.applied[i]
		name := r.id.Container
		// The updater reads the applied record: the target the pod was given; a
		// cold-start pod, admitted unchanged, has none and holds its whole GPU.
		src := updater.SourceAppliedRecord
		if ps.cold[i] {
			src = updater.SourceWholeGPU
		}
		alloc := updater.PodAllocation{Containers: map[string]updater.Alloc{name: {Memory: a.record, Compute: a.compute, ComputeRequest: a.request, Source: src}}}
		facts := updater.PodFacts{Age: time.Duration(k+1-ps.placedAt[i]) * tl.step}
		if ps.oomAt[i] >= ps.placedAt[i] {
			facts.OOM = &updater.Termination{Container: name, Reason: "OOMKilled", OOM: true, FinishedAt: tl.stepEnd(ps.oomAt[i])}
		}
		// The recommendation's MetricsUnavailable condition, as the updater reads it.
		rules.IncompleteData = ps.spec.sizer.incompleteData(r.workload)
		rules.Floor = nil
		if ps.floors != nil {
			rules.Floor = updater.FloorRules(ps.floors[r.workload], capacity)
		}
		targets := map[string]contract.Target{name: dec.target}
		rules.Unchanged = nil
		if dec.lowConfidence {
			targets = updater.AdmittedUnchanged(targets, capacity)
			rules.Unchanged = map[string]bool{name: dec.target.ControlsMemory}
		}
		need := updater.Evaluate(alloc, targets, facts, rules)
		if need.OutOfDate() {
			ps.outOfDate[i] = k
		}
		if !need.Needed() {
			continue
		}
		ps.needs[r.workload] = append(ps.needs[r.workload], need)
		pending = append(pending, candidate{run: i, dec: dec, need: need, partial: !dec.full && !dec.lowConfidence, unchanged: dec.lowConfidence,
			awaitsFloor: ps.awaitsFloor(r.workload, targets, now, capacity)})
	}
	// Every workload, as the updater observes every autoscaler in every cycle: one
	// without a need this cycle ends its streak and its round.
	for w, needs := range ps.needs {
		ps.hyst.Observe(tl.workloads[w].hkey, now, needs, win.Start)
	}
	var out []candidate
	for _, c := range pending {
		if c.unchanged && !updater.LowConfidenceAdmits(c.need) {
			continue
		}
		if !updater.Admissible(c.need, win.Open) {
			continue
		}
		if c.awaitsFloor {
			continue // the updater's publishingGate: the new floor is published first
		}
		if ok, _, _ := ps.hyst.Allow(tl.workloads[tl.runs[c.run].workload].hkey, now, c.need); !ok {
			continue
		}
		out = append(out, c)
	}
	// The updater's order: its candidates are listed autoscaler by autoscaler (the
	// simulator's autoscaler of a workload is named by it: namespace, then name), each
	// one's pods oldest first (by creation, then name), and sorted stably by
	// updater.ReplacesBefore with each workload's last replacement.
	slices.SortFunc(out, func(a, b candidate) int {
		ra, rb := &tl.runs[a.run], &tl.runs[b.run]
		wa, wb := tl.workloads[ra.workload].key, tl.workloads[rb.workload].key
		return cmp.Or(strings.Compare(wa.Namespace, wb.Namespace), strings.Compare(wa.Name, wb.Name),
			ps.placedAt[a.run]-ps.placedAt[b.run], strings.Compare(ra.name, rb.name), a.run-b.run)
	})
	last := func(c candidate) time.Time { return ps.lastReplaced[tl.runs[c.run].workload] }
	sort.SliceStable(out, func(a, b int) bool {
		return updater.ReplacesBefore(out[a].need, last(out[a]), out[b].need, last(out[b]))
	})
	return out
}

// replaced records a replacement of a pod of workload w at the end of step k
// (lastReplaced), as the updater's status.updater.lastEvictionTime.
func (ps *polState) replaced(tl *timeline, w, k int) {
	ps.lastReplaced[w] = tl.stepEnd(k)
}

// oomFloors is the updater's rollback floor at the end of step k (the gpufrac policy's;
// nothing for the others): each workload's expired floor is dropped
// (updater.FloorExpired), then each live pod's last out-of-memory exit (a step over its
// memory allocation since it was placed) raises its workload's floor as the updater's
// oomFloor does (updater.RaiseOOMFloor on the memory of the pod's applied record, for
// updater.DefaultFloorDuration); published keeps each floor as the cycle found it.
func (ps *polState) oomFloors(tl *timeline, alive []int, k int) {
	if ps.floors == nil {
		return
	}
	now := tl.stepEnd(k)
	copy(ps.published, ps.floors)
	for w, f := range ps.floors {
		if updater.FloorExpired(f, now) {
			ps.floors[w] = nil
		}
	}
	for _, i := range alive {
		r := &tl.runs[i]
		if r.end <= k || ps.oomAt[i] < ps.placedAt[i] {
			continue
		}
		t := updater.Termination{Container: r.id.Container, Reason: "OOMKilled", OOM: true, FinishedAt: tl.stepEnd(ps.oomAt[i])}
		if f, reason := updater.RaiseOOMFloor(ps.floors[r.workload], r.name, t, ps.applied[i].record, updater.DefaultFloorDuration, now); reason != "" {
			ps.floors[r.workload] = f
		}
	}
}

// awaitsFloor reports whether a replacement of a pod of workload w with targets (as
// updater.Evaluate judges it) waits at now for the workload's rollback floor to be
// published: the webhook, reading the floor the last cycle published, would write it
// below the floor in force (updater.AwaitsFloor, at most one GPU of capacity bytes).
func (ps *polState) awaitsFloor(w int, targets map[string]contract.Target, now time.Time, capacity int64) bool {
	if ps.floors == nil || ps.floors[w] == nil {
		return false
	}
	pub := &gpufracv1.GPUFractionAutoscaler{}
	pub.Status.Updater = &gpufracv1.UpdaterStatus{Floor: ps.published[w]}
	return len(updater.AwaitsFloor(ps.floors[w], pub, targets, capacity, now)) > 0
}

// floored is decision dec of workload w's container as the webhook writes it at now:
// the targets through contract.WithFloor (the webhook's and the updater's one floor
// rule: an observed-peak request holds the floor), then, where the rollback floor in
// force is above the recommendation's need (contract.WrittenOf's MemoryFloored, as the
// webhook decides it: a young workload's share above the floor does not hide it), at
// least the floor (at most one GPU of capacity bytes) and no observed-peak request;
// dec itself where no floor is kept.
func (ps *polState) floored(w int, container string, dec decision, now time.Time, capacity int64) decision {
	if ps.floors == nil || ps.floors[w] == nil || !dec.ok {
		return dec
	}
	gfa := &gpufracv1.GPUFractionAutoscaler{}
	gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: ps.floors[w]}
	dec.target.Container = container
	dec.target = contract.WithFloor(gfa, map[string]contract.Target{container: dec.target}, now)[container]
	if wr := contract.WrittenOf(gfa, dec.target, now, 0, capacity); wr.MemoryFloored {
		// The floor is above the recommendation's need: at least the floor (a young
		// share above it stays), and no observed-peak request.
		dec.want.MemoryBytes = max(dec.want.MemoryBytes, wr.Memory)
		dec.target.RequestPeakMemory = 0
	}
	return dec
}

// takeToken takes one replacement from the rate limiter; it reports false when none
// is left this step. A negative rate is unlimited.
func (ps *polState) takeToken(rate float64) bool {
	if rate < 0 {
		return true
	}
	if ps.tokens < 1-1e-9 {
		return false
	}
	ps.tokens--
	return true
}

// refillTokens adds one step's worth of replacements (rate per minute, steps of stepMin
// minutes) before the updater runs, keeping at most the updater's default
// --eviction-burst (updater.BurstOf: one step's worth rounded up, at least one) in the
// bucket, as the updater's token bucket at the same rate and interval does.
func (ps *polState) refillTokens(rate, stepMin float64) {
	if rate < 0 {
		return
	}
	burst := float64(updater.BurstOf(rate/60, time.Duration(stepMin*float64(time.Minute))))
	ps.tokens = math.Min(burst, ps.tokens+rate*stepMin)
}

func settings(o Options) Settings {
	h := int32(math.Round(100 * estimate.DefaultMemoryHeadroom))
	if o.MemoryHeadroomPercent != nil {
		h = *o.MemoryHeadroomPercent
	}
	agg := o.Recommender.History.MemoryAggregationInterval
	if agg <= 0 {
		agg = history.DefaultMemoryAggregationInterval
	}
	u := o.Updater
	var nvReq, nvLimit, annReq string
	perDevice := 0
	if o.Backend == gpufracv1.BackendKAINVFractions {
		nvReq, nvLimit = o.NVFractions.Request, o.NVFractions.Limit
		perDevice = u.MaxInFlightPerDevice
	} else {
		annReq = o.Annotations.MemoryRequest
	}
	return Settings{
		NVFractionsRequest:        nvReq,
		NVFractionsLimit:          nvLimit,
		AnnotationMemoryRequest:   annReq,
		Step:                      o.Interval.String(),
		WarmUp:                    o.WarmUp.String(),
		Lookback:                  o.Lookback.String(),
		Backend:                   o.Backend,
		LowConfidence:             o.Recommender.LowConfidence,
		MemoryHeadroomPercent:     h,
		FullConfidenceHistory:     o.Recommender.Estimator.FullConfidenceHistory.String(),
		MemoryAggregationInterval: agg.String(),
		MinLifetime:               u.MinLifetime.String(),
		ReplacementsPerMinute:     u.ReplacementsPerMinute,
		ChangeThreshold:           u.ChangeThreshold,
		NearLimit:                 u.NearLimit,
		PersistCycles:             u.PersistCycles,
		PersistFor:                u.PersistFor.String(),
		MinReplacementInterval:    u.MinReplacementInterval.String(),
		UrgentGrowth:              *u.UrgentGrowth,
		MinReplicas:               u.MinReplicas,
		MaxInFlight:               u.MaxInFlight,
		MaxInFlightPerDevice:      perDevice,
		ResizeWindows:             u.ResizeWindows,
		Consolidate:               u.Consolidate,
	}
}

// Package policy turns an estimate into a recommendation: it applies the autoscaler's
// resourcePolicy (min/max, controlled resources), the physical size of one GPU, the
// latency guardrail, and chooses a sharing mode with a one-line reason.
package policy

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// Config holds the policy constants. Zero values are replaced by the defaults.
type Config struct {
	// GPUMemoryBytes is the memory of one GPU, bytes: no recommendation exceeds it.
	// Default 80 GiB (H100/A100 80GB).
	GPUMemoryBytes float64
	// ExclusiveThreshold is the share of a GPU's memory or compute above which a
	// workload gets the GPU to itself. Default 0.75: a co-tenant would then have less
	// than a quarter, too little to be worth the interference.
	ExclusiveThreshold float64
	// SteadyMedianCompute is the median activity, ratio, from which compute counts as
	// steady enough to partition with MPS. Default 0.1.
	SteadyMedianCompute float64
	// SteadyBurstRatio is the highest p95/median activity ratio that still counts as
	// steady. Default 2.
	SteadyBurstRatio float64
	// GuardrailComputeStep is how much compute, share of one GPU, is added per cycle
	// while the latency guardrail is breached. Default 0.1 (100m).
	GuardrailComputeStep float64
	// MinCompute is the floor of compute, share of one GPU. Default estimate.DefaultMinCompute.
	MinCompute float64
	// FitMemoryHeadroomBytes is the least room, bytes, that packing-aware sizing leaves
	// above the recent observed memory peak when it rounds a memory target down to a
	// whole share of the GPU (FitShare). Default 2 GiB: the largest one-minute jump
	// above a pod's running peak seen in the GenTD26 trace after a day's first hours
	// (measured on ../shared/data/gentd26) is of that order. Negative disables
	// packing-aware sizing.
	FitMemoryHeadroomBytes float64
	// FitNearLimit, when in (0, 1), is the ratio of the recent observed memory peak to
	// a share from which packing-aware sizing does not round a target down to that
	// share: set to the updater's --near-limit (0.9), it never leaves a pod that the
	// updater would call near its limit. Default 0 (off): measured on the synthetic
	// 4-day traces it removed the overruns of rounded pods whose next peak crossed the
	// share, but held 6-15 % more GPUs at 80 GiB, and 1.71× instead of 1.63× the bound
	// on GenTD26 (docs/benchmarks/savings.md).
	FitNearLimit float64
	// YoungLimitAtShare writes a young workload's memoryLimit (estimate.Estimate
	// YoungMargin above 0) at least at its upper bound, the whole share of one GPU
	// (GPU/n, whole MiB) its target falls in; the target stays the need. It is for
	// backends that place pods by their observed memory peak (recommend.Config
	// MemorySpreadBackends: the annotations backend's observed-peak request), where
	// what is written above the request is room the pod may use, not what it holds.
	// The webhook writes such a container at its share and the updater compares its pods
	// with the share (contract.Target.YoungShare), so a young target that doubles at
	// each new memory level and narrows by the hour replaces pods only when it moves to
	// another share (docs/benchmarks/savings.md, "Reversals": 23 % fewer reversals on
	// the 4-day synthetic traces, no pod over its allocation). Off for backends that
	// place pods by the target (kai-nvfractions by default), where a share written whole
	// would be held whole.
	YoungLimitAtShare bool
	// MinMemoryBytes is the floor of memory, bytes. Default 512 MiB: a CUDA context with
	// a framework's allocator pools takes 300–500 MiB before any model is loaded, so a
	// workload that only ever showed less (idle, starting) still gets room to start.
	MinMemoryBytes float64
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.GPUMemoryBytes, 80*(1<<30))
	def(&c.ExclusiveThreshold, 0.75)
	def(&c.SteadyMedianCompute, 0.1)
	def(&c.SteadyBurstRatio, 2)
	def(&c.GuardrailComputeStep, 0.1)
	def(&c.MinCompute, estimate.DefaultMinCompute)
	def(&c.MinMemoryBytes, 512*(1<<20))
	if c.FitMemoryHeadroomBytes == 0 {
		c.FitMemoryHeadroomBytes = DefaultFitMemoryHeadroomBytes
	}
	return c
}

// DefaultFitMemoryHeadroomBytes is Config.FitMemoryHeadroomBytes' default, bytes.
const DefaultFitMemoryHeadroomBytes = 2 << 30

// FitShare rounds a memory target (bytes) down to the largest whole share of one GPU
// (gpuBytes/n, n ≥ 2) below it when the recent observed peak (bytes) plus minRoom
// (bytes) still fits that share and, when nearLimit is in (0, 1), the peak stays
// under nearLimit (ratio) of it.
// What users pay for is whole GPUs: a target a few percent above half a GPU keeps a
// second tenant off it, so rounding to the half is worth it whenever the evidence (the
// peak) leaves room. It returns the target unchanged when no share fits, when the
// target is already a share or less than the peak plus minRoom, or when minRoom is
// negative (disabled).
func FitShare(target, peak, minRoom, nearLimit, gpuBytes float64) float64 {
	if minRoom < 0 || target <= 0 || gpuBytes <= 0 || target >= gpuBytes {
		return target
	}
	n := math.Floor(gpuBytes/target) + 1
	share := math.Floor(gpuBytes/n/(1<<20)) * (1 << 20) // whole MiB, as written
	if share < target && peak+minRoom <= share && (nearLimit <= 0 || nearLimit >= 1 || peak < nearLimit*share) {
		return share
	}
	return target
}

// ShareCeil returns the smallest whole share of one GPU (gpuBytes/n, n ≥ 1) that holds
// bytes, in whole MiB: rounded down where that still holds bytes (so that n of them fit
// one GPU), else up; bytes itself when it is not positive or exceeds the GPU.
func ShareCeil(bytes, gpuBytes float64) float64 {
	if bytes <= 0 || gpuBytes <= 0 || bytes > gpuBytes {
		return bytes
	}
	n := math.Floor(gpuBytes / bytes)
	if share := math.Floor(gpuBytes/n/(1<<20)) * (1 << 20); share >= bytes {
		return share
	}
	return math.Ceil(gpuBytes/n/(1<<20)) * (1 << 20)
}

// MemoryHeadroom returns the policy's memory headroom as a ratio (15 % → 0.15).
func MemoryHeadroom(cp *gpufracv1.ContainerPolicy) float64 {
	if cp == nil || cp.MemoryHeadroomPercent == nil {
		return estimate.DefaultMemoryHeadroom
	}
	return float64(*cp.MemoryHeadroomPercent) / 100
}

// Recommend builds the recommendation of one container from its estimate, its policy
// (nil: none), its previous recommendation (nil: none) and the guardrail state.
func (c Config) Recommend(name string, est estimate.Estimate, cp *gpufracv1.ContainerPolicy,
	prev *gpufracv1.ContainerRecommendation, g gpufracv1.Guardrail) gpufracv1.ContainerRecommendation {
	c = c.WithDefaults()
	lim := c.limits(cp)
	b := sizes{target: lim.cap(est.Target), lower: lim.cap(est.LowerBound), upper: lim.cap(est.UpperBound)}
	if est.HasMemory {
		c.fitMemory(&b, est, lim)
	}
	if prev != nil && g != gpufracv1.GuardrailNone {
		c.hold(&b, fromAPI(prev.Target), g, lim)
	}
	c.youngShare(&b, est, lim)
	mode, reason := c.SharingMode(est, b.target, cp)
	if c.LowFidelityBusy(est) && mode == gpufracv1.SharingModeExclusive {
		// GPU_UTIL says a kernel ran, not how much of the GPU it used: never a whole GPU
		// at a confidence the webhook applies. Below the exclusive memory share the mode
		// is TimeSlicing instead, which partitions no compute (PartitionsCompute): the
		// pod gets its measured memory and shares the GPU's time, which is no whole GPU,
		// so the confidence stays.
		est.Confidence = math.Min(est.Confidence, estimate.LowFidelityBusyConfidence)
	}
	rec := gpufracv1.ContainerRecommendation{
		ContainerName:     name,
		ComputeSource:     est.ComputeSource,
		SharingMode:       mode,
		SharingModeReason: reason,
		ConfidencePercent: int32(math.Round(est.Confidence * 100)),
		HistoryHours:      int32(est.History.Hours()),
	}
	if est.HasMemory && cp.Controls(gpufracv1.ResourceMemory) {
		rec.YoungMarginPercent = int32(math.Round(est.YoungMargin * 100))
	}
	withMem, withCPU := est.HasMemory && cp.Controls(gpufracv1.ResourceMemory), est.HasCompute && cp.Controls(gpufracv1.ResourceCompute)
	uncapped := estimate.Resources{MemoryBytes: est.Target.MemoryBytes, Compute: math.Min(1, est.Target.Compute)}
	rec.Target = toAPI(b.target, withMem, withCPU)
	rec.LowerBound = toAPI(b.lower, withMem, withCPU)
	rec.UpperBound = toAPI(b.upper, withMem, withCPU)
	rec.UncappedTarget = toAPI(uncapped, withMem, withCPU)
	if lim := MemoryQuantity(b.memoryLimit); withMem && lim.Cmp(*rec.Target.Memory) > 0 {
		rec.MemoryLimit = lim // above the target in whole MiB, as written
	}
	if est.HasMemory {
		rec.ObservedPeakMemory = MemoryQuantity(est.RecentPeakBytes)
	}
	if mode == gpufracv1.SharingModeTimeSlicing && withCPU && est.ComputeRequest > 0 {
		// Time-slicing reserves no compute limit, only a placement request sized for
		// the contention budget (estimate.Config.ComputeRequest).
		rec.ComputeRequest = ComputeQuantity(clamp(est.ComputeRequest, lim.cpuMin, lim.cpuMax))
	}
	return rec
}

// sizes are a recommendation's target and bounds while Recommend builds them, and the
// memory limit above the target (bytes; 0: none, the limit is the target).
type sizes struct {
	target, lower, upper estimate.Resources
	memoryLimit          float64
}

// limits are the smallest and largest sizes a container may be given: memory in bytes,
// compute as a share of one GPU.
type limits struct{ memMin, memMax, cpuMin, cpuMax float64 }

// limits returns the configured floors and one GPU, narrowed by the policy's minimum and
// maximum (cp nil: none); a policy minimum memory replaces the floor.
func (c Config) limits(cp *gpufracv1.ContainerPolicy) limits {
	l := limits{memMin: c.MinMemoryBytes, memMax: c.GPUMemoryBytes, cpuMin: c.MinCompute, cpuMax: 1}
	if cp == nil {
		return l
	}
	if cp.MinMemory != nil {
		l.memMin = cp.MinMemory.AsApproximateFloat64()
	}
	if cp.MaxMemory != nil {
		l.memMax = math.Min(l.memMax, cp.MaxMemory.AsApproximateFloat64())
	}
	if cp.MinCompute != nil {
		l.cpuMin = math.Max(l.cpuMin, cp.MinCompute.AsApproximateFloat64())
	}
	if cp.MaxCompute != nil {
		l.cpuMax = math.Min(l.cpuMax, cp.MaxCompute.AsApproximateFloat64())
	}
	return l
}

// cap clamps r into the limits.
func (l limits) cap(r estimate.Resources) estimate.Resources {
	return estimate.Resources{MemoryBytes: clamp(r.MemoryBytes, l.memMin, l.memMax), Compute: clamp(r.Compute, l.cpuMin, l.cpuMax)}
}

// fitMemory applies the packing-aware size: the memory target is rounded down to a
// whole share of the GPU when the peak, with the young margin, leaves room, never under
// the minimum; the memory limit (estimate.Estimate.MemoryLimitBytes) likewise when the
// peak with the young margin and the memory spread leaves room, within the caps and
// never under the target.
func (c Config) fitMemory(b *sizes, est estimate.Estimate, lim limits) {
	// A young workload's share must hold its peak with the young margin too, and a
	// spiky one's limit its peak plus its own spread (estimate.Estimate.MemorySpread).
	peak := est.RecentPeakBytes * (1 + est.YoungMargin)
	b.target.MemoryBytes = math.Max(lim.memMin, FitShare(b.target.MemoryBytes, peak, c.FitMemoryHeadroomBytes, c.FitNearLimit, c.GPUMemoryBytes))
	if est.MemoryLimitBytes > 0 {
		limit := clamp(est.MemoryLimitBytes, lim.memMin, lim.memMax)
		limit = FitShare(limit, peak*(1+est.MemorySpread), c.FitMemoryHeadroomBytes, c.FitNearLimit, c.GPUMemoryBytes)
		b.memoryLimit = math.Max(limit, b.target.MemoryBytes)
	}
	b.lower.MemoryBytes = math.Min(b.lower.MemoryBytes, b.target.MemoryBytes)
}

// youngShare sets a young workload's (est.YoungMargin above 0) memory upper bound to the
// whole share of one GPU its target falls in (at most the maximum, never under the
// target) and, with YoungLimitAtShare, its memory limit to at least that share. A young
// pod is then replaced for a smaller allowance only when it moves to a smaller whole
// share of the GPU: a shrink inside the same share frees nothing a co-tenant of that
// share could use. It runs after hold, so a target the guardrail holds up keeps its
// share.
func (c Config) youngShare(b *sizes, est estimate.Estimate, lim limits) {
	if !est.HasMemory || est.YoungMargin <= 0 {
		return
	}
	b.upper.MemoryBytes = math.Max(b.target.MemoryBytes, math.Min(lim.memMax, ShareCeil(b.target.MemoryBytes, c.GPUMemoryBytes)))
	if c.YoungLimitAtShare {
		// Room up to the share (no memoryLimit is written at or under the target).
		b.memoryLimit = math.Max(b.memoryLimit, b.upper.MemoryBytes)
	}
}

// hold applies the latency guardrail g (breached or near): the target never shrinks
// below the previous one (prev), and while breached compute grows by
// GuardrailComputeStep; neither above the maximum (a previous target above a maxMemory
// or maxCompute lowered since is held at the maximum). The bounds are widened to hold
// the target.
func (c Config) hold(b *sizes, prev estimate.Resources, g gpufracv1.Guardrail, lim limits) {
	if g == gpufracv1.GuardrailBreached {
		prev.Compute += c.GuardrailComputeStep
	}
	b.target.MemoryBytes = math.Max(b.target.MemoryBytes, math.Min(lim.memMax, prev.MemoryBytes))
	b.target.Compute = math.Max(b.target.Compute, math.Min(lim.cpuMax, prev.Compute))
	b.lower.MemoryBytes = math.Min(b.lower.MemoryBytes, b.target.MemoryBytes)
	b.lower.Compute = math.Min(b.lower.Compute, b.target.Compute)
	b.upper.MemoryBytes = math.Max(b.upper.MemoryBytes, b.target.MemoryBytes)
	b.upper.Compute = math.Max(b.upper.Compute, b.target.Compute)
}

// LowFidelityBusy reports whether an estimate's compute came from DCGM_FI_DEV_GPU_UTIL and
// reads as needing the GPU to itself (its uncapped target at ExclusiveThreshold or more):
// that field says a kernel was running, not how much of the GPU it used, so it never
// makes a workload Exclusive: the mode is TimeSlicing (no compute reserved), and where
// memory alone needs most of the GPU (Exclusive anyway) confidence is capped at
// estimate.LowFidelityBusyConfidence.
func (c Config) LowFidelityBusy(est estimate.Estimate) bool {
	c = c.WithDefaults()
	return est.HasCompute && est.ComputeSource == metrics.DCGMGPUUtil && est.Target.Compute >= c.ExclusiveThreshold
}

// SharingMode picks Exclusive, MPS or TimeSlicing for a target and says why, within the
// policy's allowed modes.
func (c Config) SharingMode(est estimate.Estimate, target estimate.Resources, cp *gpufracv1.ContainerPolicy) (gpufracv1.SharingMode, string) {
	c = c.WithDefaults()
	memShare := target.MemoryBytes / c.GPUMemoryBytes
	var mode gpufracv1.SharingMode
	var reason string
	switch {
	case !est.HasCompute && memShare < c.ExclusiveThreshold:
		mode = gpufracv1.SharingModeTimeSlicing
		reason = fmt.Sprintf("no compute samples yet; %.0f%% of GPU memory: time-slicing until compute is measured", memShare*100)
	case est.SharedDevice && (memShare >= c.ExclusiveThreshold || target.Compute >= c.ExclusiveThreshold):
		mode = gpufracv1.SharingModeTimeSlicing
		reason = fmt.Sprintf("%.0f%% of GPU memory and %.0f%% of compute read from a shared GPU's device values copied to each pod (an upper bound shared with its co-tenants): not Exclusive from them",
			memShare*100, target.Compute*100)
	case memShare < c.ExclusiveThreshold && c.LowFidelityBusy(est):
		mode = gpufracv1.SharingModeTimeSlicing
		reason = fmt.Sprintf("%s at %.0f%% says a kernel ran, not how much of the GPU it used: not Exclusive without profiling fields (SM_ACTIVE); %.0f%% of GPU memory",
			metrics.DCGMGPUUtil, est.ComputeP95*100, memShare*100)
	case memShare >= c.ExclusiveThreshold || target.Compute >= c.ExclusiveThreshold:
		mode = gpufracv1.SharingModeExclusive
		reason = fmt.Sprintf("needs %.0f%% of GPU memory and %.0f%% of compute", memShare*100, target.Compute*100)
	case est.ComputeMedian >= c.SteadyMedianCompute && est.ComputeP95 <= c.SteadyBurstRatio*est.ComputeMedian:
		mode = gpufracv1.SharingModeMPS
		reason = fmt.Sprintf("steady compute (median %.0f%%, p95 %.0f%%): MPS partitions SMs", est.ComputeMedian*100, est.ComputeP95*100)
	default:
		mode = gpufracv1.SharingModeTimeSlicing
		reason = fmt.Sprintf("bursty or low duty cycle (median %.0f%%, p95 %.0f%%): time-slicing shares idle time", est.ComputeMedian*100, est.ComputeP95*100)
	}
	if cp == nil || len(cp.AllowedSharingModes) == 0 {
		return mode, reason
	}
	for _, m := range cp.AllowedSharingModes {
		if m == mode {
			return mode, reason
		}
	}
	// Fall back to the most isolated allowed mode.
	for _, m := range []gpufracv1.SharingMode{gpufracv1.SharingModeExclusive, gpufracv1.SharingModeMPS, gpufracv1.SharingModeTimeSlicing} {
		for _, a := range cp.AllowedSharingModes {
			if a == m {
				return m, fmt.Sprintf("%s not allowed by policy (%s)", mode, reason)
			}
		}
	}
	return mode, reason
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// MemoryQuantity renders bytes as a quantity rounded up to a whole MiB, so it prints as
// "40Gi" or "40961Mi" rather than a long byte count.
func MemoryQuantity(bytes float64) *resource.Quantity {
	mib := int64(math.Ceil(bytes / (1 << 20)))
	return resource.NewQuantity(mib<<20, resource.BinarySI)
}

// ComputeQuantity renders a share of one GPU as a milli quantity rounded up ("350m").
func ComputeQuantity(share float64) *resource.Quantity {
	return resource.NewMilliQuantity(int64(math.Ceil(share*1000-1e-9)), resource.DecimalSI)
}

func toAPI(r estimate.Resources, mem, cpu bool) gpufracv1.GPUResources {
	var out gpufracv1.GPUResources
	if mem {
		out.Memory = MemoryQuantity(r.MemoryBytes)
	}
	if cpu {
		out.Compute = ComputeQuantity(r.Compute)
	}
	return out
}

func fromAPI(r gpufracv1.GPUResources) estimate.Resources {
	var out estimate.Resources
	if r.Memory != nil {
		out.MemoryBytes = r.Memory.AsApproximateFloat64()
	}
	if r.Compute != nil {
		out.Compute = r.Compute.AsApproximateFloat64()
	}
	return out
}

// ApplyFloor raises a container recommendation to a floor the updater set after a
// rollback (status.updater.floor): target and bounds never go below it, so the next pod
// gets at least the allocation that was known to work. Nil floor values are ignored. A
// young share at or above the memory floor (gpufracv1.ContainerRecommendation.YoungShare:
// what the pods are written and compared at) already holds it: the target stays the
// need (the webhook and the updater take max(share, floor) as for any target).
func ApplyFloor(rec *gpufracv1.ContainerRecommendation, floor gpufracv1.ContainerAllocation) {
	if share := rec.YoungShare(); share != nil && floor.Memory != nil && share.Cmp(*floor.Memory) >= 0 {
		floor.Memory = nil
	}
	raise := func(target, lower, upper **resource.Quantity, f *resource.Quantity) {
		if f == nil || *target == nil {
			return
		}
		if (*target).Cmp(*f) < 0 {
			*target = ptrQ(f)
		}
		if *upper != nil && (*upper).Cmp(**target) < 0 {
			*upper = ptrQ(*target)
		}
		if *lower != nil && (*lower).Cmp(**target) > 0 {
			*lower = ptrQ(*target)
		}
	}
	raise(&rec.Target.Memory, &rec.LowerBound.Memory, &rec.UpperBound.Memory, floor.Memory)
	if rec.MemoryLimit != nil && rec.Target.Memory != nil && rec.MemoryLimit.Cmp(*rec.Target.Memory) <= 0 {
		rec.MemoryLimit = nil // the floor lifted the target to the limit or above
	}
	raise(&rec.Target.Compute, &rec.LowerBound.Compute, &rec.UpperBound.Compute, floor.Compute)
}

// ApplyFloors raises each of recs to its container's floor in f (status.updater.floor;
// nil: none) with ApplyFloor. The recommender calls it while the floor holds, and so
// does gpufrac simulate.
func ApplyFloors(recs []gpufracv1.ContainerRecommendation, f *gpufracv1.UpdaterFloor) {
	if f == nil {
		return
	}
	for i := range recs {
		for _, c := range f.Containers {
			if c.ContainerName == recs[i].ContainerName {
				ApplyFloor(&recs[i], c)
			}
		}
	}
}

// WithinPolicy clamps a written container recommendation into its current policy's
// explicit bounds (cp's minMemory, maxMemory, minCompute and maxCompute; cp nil: none),
// as Recommend clamps a new one: target, bounds, memory limit and compute request
// between the minimum and the maximum, the minimum winning where they cross. It is for
// a recommendation kept while no new one is made (a failed read, a gap in the data):
// the policy may have changed since it was written. Only the user's own maximum lowers
// it; no configured floor or GPU size is applied (that is a measurement's job). It
// reports whether anything changed.
func WithinPolicy(rec *gpufracv1.ContainerRecommendation, cp *gpufracv1.ContainerPolicy) bool {
	if cp == nil {
		return false
	}
	changed := false
	clampQ := func(q **resource.Quantity, lo, hi *resource.Quantity) {
		if *q == nil {
			return
		}
		if hi != nil && (*q).Cmp(*hi) > 0 {
			*q, changed = ptrQ(hi), true
		}
		if lo != nil && (*q).Cmp(*lo) < 0 {
			*q, changed = ptrQ(lo), true
		}
	}
	for _, r := range []*gpufracv1.GPUResources{&rec.Target, &rec.LowerBound, &rec.UpperBound} {
		clampQ(&r.Memory, cp.MinMemory, cp.MaxMemory)
		clampQ(&r.Compute, cp.MinCompute, cp.MaxCompute)
	}
	clampQ(&rec.MemoryLimit, cp.MinMemory, cp.MaxMemory)
	if rec.MemoryLimit != nil && rec.Target.Memory != nil && rec.MemoryLimit.Cmp(*rec.Target.Memory) <= 0 {
		rec.MemoryLimit, changed = nil, true // the limit is the target now
	}
	clampQ(&rec.ComputeRequest, cp.MinCompute, cp.MaxCompute)
	return changed
}

func ptrQ(q *resource.Quantity) *resource.Quantity { c := q.DeepCopy(); return &c }

// Package recommend is the pure step from a workload's history to its container
// recommendations: the estimator (package estimate) under the autoscaler's policy
// (package policy), with the written values kept while a new one is within noise. It
// reads no cluster and no Prometheus: the recommender controller calls it every cycle,
// and the simulator calls the same code, so the simulator's figures are the product's.
package recommend

import (
	"math"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/policy"
	"github.com/gpufrac/gpufrac/workload"
)

// DefaultHistoryLength is how much history the recommender loads at bootstrap and keeps:
// 8 days (VPA's Prometheus history provider default).
const DefaultHistoryLength = 8 * 24 * time.Hour

// Config holds the settings of the recommendation step. Zero values take the defaults
// (WithDefaults).
type Config struct {
	// LowConfidence is the confidence (0–1) under which LowConfidence is True. Default 0.5.
	LowConfidence float64
	// MemoryNoise is the relative memory change (ratio) below which a new target does
	// not replace the written one. Default 0.02.
	MemoryNoise float64
	// ComputeNoise is the absolute compute change (share of one GPU) up to which a new
	// target does not replace the written one; one milli-GPU more is allowed for the
	// target's rounding up to a milli quantity. Default: one compute histogram bucket
	// (history.ComputeBuckets, 0.01) as the target sees it, scaled by the estimator's
	// compute margin (1 + 0.15 by default: 0.0115), so a percentile that moves by one
	// bucket and back does not rewrite the status every cycle.
	ComputeNoise float64
	// BoundsNoise is the relative change of a lowerBound or upperBound below which the
	// written one is kept. Default 0.1: bounds move with confidence every cycle while
	// history is young, and the updater acts on a target far outside them.
	BoundsNoise float64

	History   history.Options
	Estimator estimate.Config
	Policy    policy.Config

	// MemorySpreadBackends are the backends (spec.backend.type; an autoscaler without
	// one uses the annotations backend) whose containers get a memoryLimit above the
	// target with the workload's spread as headroom (Estimator.MemorySpreadFactor,
	// estimate.Estimate.MemoryLimitBytes; negative: off); other autoscalers are
	// estimated with the factor off. Nil: the default, DefaultMemorySpreadBackends;
	// empty (non-nil): none.
	MemorySpreadBackends []gpufracv1.BackendType
}

// DefaultMemorySpreadBackends is the --memory-spread-backends default: the annotations
// backend, whose pods are placed by their observed memory peak
// (gpufrac.io/gpu-memory-request, the webhook's default --annotation-memory-request
// observed-peak) with the memoryLimit (or the target) as their limit, so a larger limit
// is burst room and costs no GPUs. Measured with gpufrac simulate
// (docs/benchmarks/savings.md, "The spread as a memory limit above the target").
// Backends that place pods by the target (hami, kai, kai-nvfractions' default request)
// would pay for it in GPUs.
var DefaultMemorySpreadBackends = []gpufracv1.BackendType{gpufracv1.BackendAnnotations}

// placedByPeak reports whether the pods of an autoscaler of spec are placed by their
// observed memory peak, what is written above it room only: its backend is one of
// MemorySpreadBackends.
func (c Config) placedByPeak(spec *gpufracv1.GPUFractionAutoscalerSpec) bool {
	return spec != nil && slices.Contains(c.MemorySpreadBackends, spec.EffectiveBackend())
}

// estimatorFor returns the estimator settings for an autoscaler of spec: the
// memory spread factor only where the spec's backend is one of MemorySpreadBackends.
func (c Config) estimatorFor(spec *gpufracv1.GPUFractionAutoscalerSpec) estimate.Config {
	e := c.Estimator
	if !c.placedByPeak(spec) {
		e.MemorySpreadFactor = -1 // off
	}
	return e
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.LowConfidence <= 0 {
		c.LowConfidence = 0.5
	}
	if c.MemoryNoise <= 0 {
		c.MemoryNoise = 0.02
	}
	if c.BoundsNoise <= 0 {
		c.BoundsNoise = 0.1
	}
	c.Estimator = c.Estimator.WithDefaults()
	if c.ComputeNoise <= 0 {
		c.ComputeNoise = computeBucket * (1 + c.Estimator.ComputeMargin)
	}
	if c.Estimator.YoungConfidence == 0 {
		// Young workloads earn their confidence from evidence up to the threshold
		// under which the recommendation is not applied (estimate.Config.YoungConfidence).
		c.Estimator.YoungConfidence = c.LowConfidence
	}
	if c.MemorySpreadBackends == nil {
		c.MemorySpreadBackends = DefaultMemorySpreadBackends
	}
	c.Policy = c.Policy.WithDefaults()
	c.Policy.MinCompute = c.Estimator.MinCompute
	if c.Estimator.ContentionBudget < 0 || c.Estimator.ContentionWindow >= 24*time.Hour {
		c.History.NoComputeByHour = true // nothing reads the hour-of-day histograms
	}
	return c
}

// Recommend computes the container recommendations of one workload from the model,
// without I/O: estimate (package estimate), then policy and guardrail (package policy),
// then noise suppression against prev, the recommendations written last time. Each
// says where its container sits (ContainerType) in pod, the workload's current pod
// (nil when none exists: prev's type, else Regular). The recommender and the what-if
// simulator both call it. It also returns how many containers have state and how many
// of them the policy turns off.
func (c Config) Recommend(model *history.Model, w history.WorkloadKey, spec *gpufracv1.GPUFractionAutoscalerSpec, pod *corev1.Pod,
	prev []gpufracv1.ContainerRecommendation, guard gpufracv1.Guardrail, now time.Time) (recs []gpufracv1.ContainerRecommendation, off, known int) {
	byName := map[string]*gpufracv1.ContainerRecommendation{}
	for i := range prev {
		byName[prev[i].ContainerName] = &prev[i]
	}
	names := model.Containers(w)
	sort.Strings(names)
	estimator := c.estimatorFor(spec)
	pol := c.Policy
	pol.YoungLimitAtShare = c.placedByPeak(spec)
	for _, name := range names {
		cp := spec.ContainerPolicy(name)
		if !cp.Enabled() {
			off++
			continue
		}
		est, ok := estimator.Estimate(model.Container(history.ContainerKey{WorkloadKey: w, Container: name}), policy.MemoryHeadroom(cp), now)
		if !ok {
			continue
		}
		rec := pol.Recommend(name, est, cp, byName[name], guard)
		rec.Derivation = derivation(estimator, c.History)
		if p := byName[name]; p != nil && withinNoise(p, &rec, c) {
			// Keep the written sizes, but report the fresh confidence, history and
			// compute source (a pod's metric source can change: recommender/sources.go).
			conf, hours, uncapped, src, young, peak := rec.ConfidencePercent, rec.HistoryHours, rec.UncappedTarget, rec.ComputeSource, rec.YoungMarginPercent, rec.ObservedPeakMemory
			rec = *p
			rec.ConfidencePercent, rec.HistoryHours, rec.ComputeSource, rec.YoungMarginPercent = conf, hours, src, young
			// The uncapped need is a fresh measurement, not held at an old value: a
			// capped target stays within noise forever, the need behind it may not.
			if !needNear(p.UncappedTarget, uncapped, c) {
				rec.UncappedTarget = uncapped
			}
			// So is the observed peak, which backends place pods by (the observed-peak
			// request) and the updater compares allocations with: the written one is
			// kept only while the fresh one is not above it and within noise below it.
			if peakKept(p.ObservedPeakMemory, peak, c) {
				peak = p.ObservedPeakMemory
			}
			rec.ObservedPeakMemory = peak
			// The written sizes, but within the policy as it is now: a minimum raised
			// (or a maximum lowered) by less than the noise since still holds.
			policy.WithinPolicy(&rec, cp)
		}
		rec.ContainerType = containerType(pod, name, byName[name])
		rec.MIG = c.Policy.MIG(rec, est.MIGProfile)
		recs = append(recs, rec)
	}
	return recs, off, len(names)
}

// Derivation returns the settings the recommendation step derives targets with
// (gpufracv1.Derivation: percentiles, compute margin, memory aggregation interval), as
// Recommend records them on each container recommendation. gpufrac explain reads the
// recorded ones, or Config{}.WithDefaults().Derivation() for a status written before
// they were recorded.
func (c Config) Derivation() *gpufracv1.Derivation { return derivation(c.Estimator, c.History) }

// derivation is Derivation for the estimator settings e and history options h.
func derivation(e estimate.Config, h history.Options) *gpufracv1.Derivation {
	e = e.WithDefaults()
	interval := h.MemoryAggregationInterval
	if interval <= 0 {
		interval = history.DefaultMemoryAggregationInterval
	}
	ratio := func(r float64) resource.Quantity {
		return *resource.NewMilliQuantity(int64(math.Round(r*1000)), resource.DecimalSI)
	}
	return &gpufracv1.Derivation{
		MemoryPercentile:  ratio(e.MemoryTargetPercentile),
		MemoryInterval:    metav1.Duration{Duration: interval},
		ComputePercentile: ratio(e.ComputeTargetPercentile),
		ComputeMargin:     ratio(e.ComputeMargin),
	}
}

// computeBucket is the width of one compute histogram bucket, share of one GPU
// (history.ComputeBuckets, linear: 0.01).
var computeBucket = history.ComputeBuckets.GetBucketStart(1) - history.ComputeBuckets.GetBucketStart(0)

// computeNear reports whether two compute targets (shares of one GPU) are within noise:
// at most ComputeNoise apart, plus one milli-GPU for the rounding up to a milli quantity
// (policy.ComputeQuantity) and float error.
func (c Config) computeNear(x, y float64) bool { return math.Abs(x-y) <= c.ComputeNoise+0.001+1e-9 }

// needNear reports whether two uncapped needs are within the target noise (MemoryNoise
// relative, ComputeNoise absolute).
func needNear(a, b gpufracv1.GPUResources, c Config) bool {
	q := func(x, y *resource.Quantity, tol func(x, y float64) bool) bool {
		if (x == nil) != (y == nil) {
			return false
		}
		return x == nil || tol(x.AsApproximateFloat64(), y.AsApproximateFloat64())
	}
	return q(a.Memory, b.Memory, func(x, y float64) bool { return math.Abs(x-y) <= c.MemoryNoise*math.Max(x, y) }) &&
		q(a.Compute, b.Compute, c.computeNear)
}

// peakKept reports whether a written observed peak (bytes; nil: none) still stands for
// the fresh one: neither nil, the fresh one not above it and at most MemoryNoise
// (relative) below it. A peak that rose by any amount replaces it: memory is
// incompressible, and a pod placed by the written peak would hold less than it uses.
func peakKept(written, fresh *resource.Quantity, c Config) bool {
	if written == nil || fresh == nil || fresh.Cmp(*written) > 0 {
		return false
	}
	w, f := written.AsApproximateFloat64(), fresh.AsApproximateFloat64()
	return w-f <= c.MemoryNoise*w
}

// withinNoise reports whether a new recommendation is close enough to the written one to
// keep the written one (avoids status churn and flapping): targets within MemoryNoise
// (relative) and ComputeNoise (absolute), bounds within BoundsNoise (relative), since
// bounds move with confidence every cycle while history is young; never a written memory
// target below the new observed peak where the new target is above it.
func withinNoise(old, cur *gpufracv1.ContainerRecommendation, c Config) bool {
	if old.SharingMode != cur.SharingMode {
		return false
	}
	near := func(a, b *resource.Quantity, tol func(x, y float64) bool) bool {
		if (a == nil) != (b == nil) {
			return false
		}
		return a == nil || tol(a.AsApproximateFloat64(), b.AsApproximateFloat64())
	}
	relative := func(r float64) func(x, y float64) bool {
		return func(x, y float64) bool { return math.Abs(x-y) <= r*math.Max(x, y) }
	}
	if !near(old.Target.Memory, cur.Target.Memory, relative(c.MemoryNoise)) || !near(old.Target.Compute, cur.Target.Compute, c.computeNear) {
		return false
	}
	// A written memory target below what the workload was seen to use since (a policy
	// headroom under the noise: memoryHeadroomPercent 0 or 1) is no longer within noise
	// where the new target holds more; one held there by maxMemory stays.
	if peak := cur.ObservedPeakMemory; peak != nil && old.Target.Memory != nil && old.Target.Memory.Cmp(*peak) < 0 && cur.Target.Memory.Cmp(*old.Target.Memory) > 0 {
		return false
	}
	// What the webhook writes besides the target: the memory limit above it (present
	// only for the backends of MemorySpreadBackends, so a backend change adds or drops
	// it) and the compute request of a time-sliced container.
	if !near(old.MemoryLimit, cur.MemoryLimit, relative(c.MemoryNoise)) || !near(old.ComputeRequest, cur.ComputeRequest, c.computeNear) {
		return false
	}
	for _, p := range [][2]gpufracv1.GPUResources{{old.LowerBound, cur.LowerBound}, {old.UpperBound, cur.UpperBound}} {
		if !near(p[0].Memory, p[1].Memory, relative(c.BoundsNoise)) || !near(p[0].Compute, p[1].Compute, relative(c.BoundsNoise)) {
			return false
		}
	}
	return true
}

// containerType is where a container sits in pod, the workload's current template (its
// newest live pod), else where the recommendation written last time (prev) said (a
// workload without pods now), else Regular.
func containerType(pod *corev1.Pod, name string, prev *gpufracv1.ContainerRecommendation) gpufracv1.ContainerType {
	if pod != nil {
		if t, ok := workload.ContainerTypeOf(pod, name); ok {
			return t
		}
	}
	if prev != nil && prev.ContainerType != "" {
		return prev.ContainerType
	}
	return gpufracv1.ContainerTypeRegular
}

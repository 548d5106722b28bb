package estimate

import (
	"math"

	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	"github.com/gpufrac/gpufrac/recommender/history"
)

// ComputeRequest returns the compute, share of one GPU (0–1), that a time-sliced pod
// with the activity distribution h (history.ComputeBuckets) reserves for placement: its
// effective compute (Kelly, "Notes on effective bandwidths", 1996)
//
//	request = Λ(s)/s, Λ(s) = ln E[e^{sX}], s = ln(1/ContentionBudget)/ContentionSlowdown,
//
// where X is the pod's activity in one sample interval. Co-tenants whose requests sum to
// at most one GPU have ΣΛᵢ(s) ≤ s, so by the Chernoff bound, when their activities are
// independent,
//
//	P(ΣXᵢ > 1 + ContentionSlowdown) ≤ exp(ΣΛᵢ(s) − s(1 + ContentionSlowdown)) ≤ ContentionBudget:
//
// time-slicing slows them by more than ContentionSlowdown in at most ContentionBudget
// of the intervals. Each request depends on the pod's own history only, so the bound
// holds for any co-tenants a scheduler summing requests puts together. The request
// lies between the mean activity (a steady pod) and the peak: a pod idle most of the
// time reserves little more than its mean, a pod with frequent bursts close to them.
//
// Every bucket counts at its upper edge, as Percentile reads it. The result is at least
// MinCompute and at most 1. It returns 0 for an empty histogram or when the budget is
// off (ContentionBudget < 0).
func (c Config) ComputeRequest(h vpautil.Histogram) float64 {
	c = c.WithDefaults()
	if c.ContentionBudget < 0 || h == nil || h.IsEmpty() {
		return 0
	}
	cp, err := h.SaveToChekpoint()
	if err != nil || len(cp.BucketWeights) == 0 {
		return 0
	}
	s := c.ContentionSpace()
	return math.Min(1, math.Max(c.MinCompute, logMGF(cp.BucketWeights, s)/s))
}

// ContentionSpace returns the space parameter s = ln(1/ContentionBudget) /
// ContentionSlowdown, per GPU, at which ComputeRequest takes the effective compute
// (after defaults; a budget of 1 or more gives the smallest s, 1e-9: the mean).
func (c Config) ContentionSpace() float64 {
	c = c.WithDefaults()
	return math.Max(math.Log(1/c.ContentionBudget)/c.ContentionSlowdown, 1e-9)
}

// logMGF returns ln E[e^{sX}] of the distribution whose bucket weights (of
// history.ComputeBuckets) are w, each bucket at its upper edge, as a log-sum-exp so
// that a large s does not overflow.
func logMGF(w map[int]uint32, s float64) float64 {
	top := math.Inf(-1)
	for b := range w {
		top = math.Max(top, s*bucketEdge(b))
	}
	var sum, total float64
	for b, wt := range w {
		sum += float64(wt) * math.Exp(s*bucketEdge(b)-top)
		total += float64(wt)
	}
	return top + math.Log(sum/total)
}

// bucketEdge is the upper edge of compute bucket b, the value Percentile returns for
// it (the start of the last bucket, which has no upper edge).
func bucketEdge(b int) float64 {
	o := history.ComputeBuckets
	if b < o.NumBuckets()-1 {
		return o.GetBucketStart(b + 1)
	}
	return o.GetBucketStart(b)
}

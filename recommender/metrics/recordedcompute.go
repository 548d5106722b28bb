package metrics

import (
	"math"
	"strconv"
)

// Reading a history load's hourly compute from the gpufrac-history recordings: the
// deciles of each hour's minute means (HistoryComputeQuantile1h) and how many minute
// means the hour holds (HistoryComputeMinutes1h), fed to the compute histogram as the
// hour's samples (ComputeDecileWeights) instead of the raw minute means.

// ComputeDecileWeights returns how many of an hour's n minute means (n ≥ 0) each recorded
// decile stands for: entry k−1 for the quantile k/10 (HistoryComputeQuantiles), summing
// to n, so the model counts the samples the raw read would give.
//
// Each decile takes the minutes up to its own rank, never more: PromQL's
// quantile_over_time(k/10) interpolates between the sorted means v[0] ≤ … ≤ v[n−1] at
// rank r = k(n−1)/10 (computed in float64, as PromQL does), so it is at least v[⌊r⌋], at or above ⌊r⌋+1 of the n means. Giving
// the deciles up to k the weight ⌊k(n−1)/10⌋+1 in all makes the fed distribution's share
// at or below any value at most the true one's: the fed distribution stochastically
// dominates the hour's minute means, so every percentile of it, and anything monotone
// in the percentiles, is at least the raw read's (the safe side). For n a multiple of
// 10 (a whole hour: 60) every decile weighs n/10.
func ComputeDecileWeights(n int) []int {
	w := make([]int, len(HistoryComputeQuantiles))
	if n <= 0 {
		return w
	}
	below := 0 // minutes at or below the previous decile's rank
	for k, q := range HistoryComputeQuantiles {
		// The rank as PromQL computes it, in float64 (0.7·90 is 62.99…, not 63).
		upTo := min(n, int(math.Floor(q*float64(n-1)))+1)
		w[k] = upTo - below
		below = upTo
	}
	return w
}

// quantileLabel is the HistoryQuantileLabel value of a recorded quantile.
func quantileLabel(q float64) string { return strconv.FormatFloat(q, 'f', -1, 64) }

package estimate

import (
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/floats"
	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
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
	if c.ContentionBudget < 0 {
		return 0
	}
	s := c.ContentionSpace()
	lm, ok := histLogMGF(h, s)
	if !ok {
		return 0
	}
	return math.Min(1, math.Max(c.MinCompute, lm/s))
}

// SaturatedShare returns the share (0–1) of the samples in h (history.ComputeBuckets,
// decayed weights) at or above metrics.SaturatedActivity: intervals in which the pod
// alone kept its GPU saturated. 0 for a nil or empty histogram.
//
// Such a sample is censored: the device reports at most 100 %, so what the pod would
// have used with the GPU to itself is unknown above it, and any co-tenant active in
// that interval contends with it. ComputeRequest therefore reserves a whole GPU for a
// pod whose saturated share is above ContentionBudget: the pod alone spends the budget
// whatever its co-tenants are.
func SaturatedShare(h vpautil.Histogram) float64 {
	w, ok := bucketWeights(h)
	if !ok {
		return 0
	}
	var total, sat float64
	for b, wt := range w {
		total += float64(wt)
		if history.ComputeBuckets.GetBucketStart(b) >= metrics.SaturatedActivity-1e-9 {
			sat += float64(wt)
		}
	}
	return sat / total
}

// histLogMGF returns ln E[e^{sX}] of the samples in h (logMGF of its bucket weights),
// and false for a nil or empty histogram or one whose weights cannot be read.
func histLogMGF(h vpautil.Histogram, s float64) (float64, bool) {
	w, ok := bucketWeights(h)
	if !ok {
		return 0, false
	}
	return logMGF(w, s), true
}

// bucketWeights returns h's bucket weights (of history.ComputeBuckets, bucket index →
// weight, scaled as VPA's checkpoint scales them), and false for a nil or empty
// histogram or one whose weights cannot be read.
func bucketWeights(h vpautil.Histogram) (map[int]uint32, bool) {
	if h == nil || h.IsEmpty() {
		return nil, false
	}
	cp, err := h.SaveToChekpoint()
	if err != nil || len(cp.BucketWeights) == 0 {
		return nil, false
	}
	return cp.BucketWeights, true
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
	var total float64
	for _, wt := range w {
		total += float64(wt)
	}
	terms := make([]float64, 0, len(w))
	for b, wt := range w {
		terms = append(terms, s*bucketEdge(b)+math.Log(float64(wt)/total))
	}
	return floats.LogSumExp(terms)
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

// MinWindowCoverage is the least time a window of the day must be covered by compute
// samples (history.ContainerState.HourCoverage, summed over the window's hours that
// were seen on more than one day) for TimeOfDayComputeRequest to take its effective
// compute: one hour, 60 samples at the default one-minute step, so that one sample does
// not stand for a window. A window with less evidence falls back to the whole day's
// request (no data is not zero).
const MinWindowCoverage = time.Hour

// TimeOfDayComputeRequest returns ComputeRequest conditioned on the time of day: the
// largest effective compute Λ_w(s)/s over the windows w of ContentionWindow
// consecutive hours of the day (UTC) with at least MinWindowCoverage of samples, where
// Λ_w(s) = ln E[e^{sX} | hour in w] weighs each hour of w that has samples equally;
// never less than the whole day's ComputeRequest.
//
// The whole day's bound assumes co-tenants' activities are independent. Inference load
// is diurnal, and workloads of one region peak in the same hours, so their activities
// are correlated through the time of day. Given the window, they are independent
// again (to the resolution of the window), and each pod's request is at least its
// effective compute in every window, so co-tenants whose requests sum to at most one
// GPU have ΣΛᵢ,w(s) ≤ s in every window: the Chernoff bound of ComputeRequest holds
// within every window, hence over the day. Since E[e^{sX}] over the day is the mean of
// the windows' (for equal windows), the result is at least the whole day's effective
// compute, with equality for a pod whose load does not change over the day.
//
// Only hours seen on more than one day count (history.ContainerState.ComputeHourDays):
// a time-of-day effect shows only when the day repeats; within one day, a window where
// independent bursts happened to fall is indistinguishable from a busy hour, and the
// whole day's bound already covers independent bursts. A container whose history has
// no hour-of-day histograms (state built before they existed), less than two days of
// any hour, or no window with enough evidence gets the whole day's request, as does
// every container when ContentionWindow is 24h or more.
func (c Config) TimeOfDayComputeRequest(st *history.ContainerState) float64 {
	c = c.WithDefaults()
	whole := c.ComputeRequest(st.Compute)
	hours := int(c.ContentionWindow / time.Hour)
	if whole == 0 || hours >= history.HoursPerDay {
		return whole
	}
	s := c.ContentionSpace()
	var lm [history.HoursPerDay]float64 // ln E[e^{sX}] of each hour; -Inf: no samples
	for h, hist := range st.ComputeByHour {
		lm[h] = math.Inf(-1)
		if v, ok := histLogMGF(hist, s); ok && st.ComputeHourDays[h] {
			lm[h] = v
		}
	}
	best := math.Inf(-1)
	window := make([]float64, 0, hours)
	for start := range history.HoursPerDay {
		var covered time.Duration
		window = window[:0]
		for j := range hours {
			h := (start + j) % history.HoursPerDay
			if !math.IsInf(lm[h], -1) {
				covered += st.HourCoverage(h)
				window = append(window, lm[h])
			}
		}
		if len(window) == 0 || covered < MinWindowCoverage {
			continue
		}
		// ln of the mean of e^{lm} over the window's hours with samples.
		best = math.Max(best, floats.LogSumExp(window)-math.Log(float64(len(window))))
	}
	if math.IsInf(best, -1) {
		return whole
	}
	return math.Min(1, math.Max(whole, best/s))
}

// ValidateContentionWindow reports an error unless d is a whole number of hours from 1h
// to 24h (Config.ContentionWindow's domain; flag names it in the message).
func ValidateContentionWindow(flag string, d time.Duration) error {
	if d < time.Hour || d > 24*time.Hour || d%time.Hour != 0 {
		return fmt.Errorf("--%s %s: want whole hours from 1h to 24h (24h: the whole day, no time-of-day conditioning)", flag, d)
	}
	return nil
}

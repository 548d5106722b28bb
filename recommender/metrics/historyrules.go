package metrics

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Recording rules that pre-aggregate what a history bootstrap reads (the gpufrac-history
// group of rules/gpufrac.rules.yaml, written by hack/historyrules from HistoryRules;
// TestHistoryRulesFile fails when the file differs).
// Each keeps the labels the reader's own queries return: namespace, pod, container, the
// source's device labels (Source.DeviceLabels) and SourceLabel, the published metric the
// value came from; values are in bytes, or a ratio 0–1 of the device as published (a MIG
// instance-relative field stays a ratio of the instance: the reader converts it with the
// instance profile, as for raw series).
const (
	// HistoryMemoryMax1m is the peak GPU memory (bytes) over the minute ending at each
	// evaluation: Source.MemoryPeakQuery over HistoryRuleInterval, impossible samples
	// dropped.
	HistoryMemoryMax1m = "gpufrac:pod_device_gpu_memory_used:max_1m"
	// HistoryMemoryMin1m is the least GPU memory (bytes) over the same minute: with the
	// peak, it says whether the series stayed flat (FlatQuery, stale series).
	HistoryMemoryMin1m = "gpufrac:pod_device_gpu_memory_used:min_1m"
	// HistoryCompute1m is the mean GPU activity (ratio 0–1) over the minute ending at
	// each evaluation: Source.ComputeQuery over HistoryRuleInterval, one compute sample of
	// the recommender's model at its default --interval.
	HistoryCompute1m = "gpufrac:pod_device_gpu_compute:avg_1m"
	// HistoryMemoryMax1h is the peak GPU memory (bytes) of the HistoryPeakInterval ending
	// at the group's first evaluation of each hour: the maximum of the 60 HistoryMemoryMax1m
	// values ending there, one sample per hour (the memory histogram's one sample).
	HistoryMemoryMax1h = "gpufrac:pod_device_gpu_memory_used:max_1h"
	// HistoryMemoryMin1h is the least GPU memory (bytes) of the same hour.
	HistoryMemoryMin1h = "gpufrac:pod_device_gpu_memory_used:min_1h"
	// HistoryMinutes1h is, per source (HistorySourceLabel only), the most
	// HistoryMemoryMax1m recordings any one series of the source has in the same hour, a
	// count: HistoryMinutesPerHour when every minute evaluation of the hour recorded, fewer
	// when the rules were loaded or an evaluation was missed within the hour, so that a
	// reader of the hourly recordings knows which hours to read from the raw series
	// instead (RecordedHours). One series per source and hour.
	HistoryMinutes1h = "gpufrac:history_memory_minutes:max_1h"
	// HistoryComputeQuantile1h is, per series of HistoryCompute1m, the quantiles of the
	// same hour's minute means (ratio 0–1 of the device as published): one point per
	// hour and HistoryQuantileLabel value (HistoryComputeQuantiles: 21), PromQL's
	// quantile_over_time (linear interpolation between the sorted minute means).
	HistoryComputeQuantile1h = "gpufrac:pod_device_gpu_compute:quantile_1h"
	// HistoryComputeMinutes1h is, per series of HistoryCompute1m, how many minute means
	// the same hour holds (a count, at most HistoryMinutesPerHour): the number of compute
	// samples the hour's quantiles stand for (ComputeQuantileWeights).
	HistoryComputeMinutes1h = "gpufrac:pod_device_gpu_compute:count_1h"
)

// HistoryQuantileLabel is the label of HistoryComputeQuantile1h naming its quantile, as
// strconv.FormatFloat(q, 'f', -1, 64) writes it ("0.1" … "0.99", "1").
const HistoryQuantileLabel = "quantile"

// HistoryComputeQuantiles are the quantiles recorded per hour, ascending, 21 of them:
// the deciles 0.1 … 0.8, 0.51, and one per minute rank of the top
// HistoryComputeTopMinutes of a whole hour's HistoryMinutesPerHour sorted minute means
// v[0] ≤ … ≤ v[59]: for rank k = 48 … 59, the least hundredth q with q·59 ≥ k (0.82,
// 0.84, 0.85, 0.87, 0.89, 0.9, 0.92, 0.94, 0.95, 0.97, 0.99, 1), which PromQL
// interpolates at or just above v[k], so ComputeQuantileWeights gives it the minutes up
// to rank k. Where the quantiles come from:
//
//   - A percentile p that the model reads (estimate's compute percentiles: 0.5, 0.9,
//     0.95; TestComputeQuantilesBesidePercentiles) is a rank edge of a whole hour: the
//     quantile p stands for exactly p·60 minutes, and the decaying histogram's later
//     stamps tip its read to the next recorded quantile above. With deciles alone that
//     was the hour's maximum for the 0.9 target (docs/benchmarks.md, 2026-12-02);
//     0.51, 0.92 and 0.97 stand for one minute more than 0.5, 0.9 and 0.95.
//   - Over many hours the model's percentile is one of the mixture of hours, where an
//     hour's rank at the raw percentile varies by about ±2 minutes (binomial: √(60·0.9·0.1)
//     = 2.3), and the effective compute (estimate.Config.ComputeRequest) weighs the top
//     of the distribution most: every minute rank above 0.8 is recorded, the deciles
//     below. Measured against the raw model on trace.Synthesize (hack/benchquantiles,
//     1,000 pods × 1 day, seed 1; hold-out 300 × 2 days, seed 2; docs/benchmarks.md):
//     the 0.9 percentile at most 0.07 (hold-out 0.15) above raw, median 0.01 (one
//     bucket); the effective compute at most 0.018 above, against 0.20 and 0.16 with
//     deciles alone.
var HistoryComputeQuantiles = func() []float64 {
	q := []float64{0.51}
	for k := 1; k <= 8; k++ {
		q = append(q, float64(k)/10)
	}
	top := HistoryMinutesPerHour - 1 // the highest rank, 59
	for k := top - HistoryComputeTopMinutes + 1; k <= top; k++ {
		q = append(q, math.Ceil(100*float64(k)/float64(top))/100)
	}
	slices.Sort(q)
	return slices.Compact(q)
}()

// HistoryComputeTopMinutes is how many of a whole hour's top minute ranks
// HistoryComputeQuantiles records one quantile each: 12, the minutes above the 0.8
// decile (ranks 48 … 59 of 60), which hold the model's compute target (0.9), upper
// bound (0.95) and their spread between hours (HistoryComputeQuantiles).
const HistoryComputeTopMinutes = 12

// HistoryMinutesPerHour is the number of minute recordings one hourly recording is made
// of when no evaluation was missed: HistoryPeakInterval / HistoryRuleInterval (60).
const HistoryMinutesPerHour = int(HistoryPeakInterval / HistoryRuleInterval)

// HistoryRuleInterval is the evaluation interval of the gpufrac-history group: 1 minute,
// the recommender's default cycle interval and compute step (recommender.Config.Interval),
// the finest compute window its model takes one sample of.
const HistoryRuleInterval = time.Minute

// HistoryPeakInterval is the window of the hourly recordings: 1 hour, the default memory
// aggregation interval (history.DefaultMemoryAggregationInterval), the window the memory
// histogram takes one peak of.
const HistoryPeakInterval = time.Hour

// HistorySourceLabel is the label each minute recording carries with its Source's name
// (Source.Name: dcgm, hami, kai, agent), as the normalised gpufrac:*_by_source series do;
// the hourly recordings keep it.
const HistorySourceLabel = "source"

// HistoryRule is one recording rule: the series name it records and its PromQL.
type HistoryRule struct {
	// Record is the recorded series name (the History* constants).
	Record string
	// Source is the name of the Source the rule reads, the HistorySourceLabel value it
	// records ("" for the hourly rules, over every source's minute recordings).
	Source string
	// Expr is the rule's PromQL.
	Expr string
}

// HistoryRules returns the gpufrac-history recording rules, for every known source
// (Sources) over every namespace: per minute, the memory peak, the memory minimum and the
// compute mean, each the expression the reader evaluates for a HistoryRuleInterval
// window (same fields and preference, same filtering of impossible samples, same
// exported_* relabelling, same grouping by device); and, per hour, the peak and minimum
// of the minute recordings, and how many minute evaluations the hour's peaks are made of
// (HistoryMinutes1h).
//
// The hourly rules take the HistoryRuleInterval recordings of the last
// HistoryPeakInterval − HistoryRuleInterval/2: exactly 60 of them whether the backend's
// ranges are closed at the start (Prometheus 2) or open (Prometheus 3), so consecutive
// hours tile the minute windows without overlap. They are kept at one evaluation per
// hour: the one where minute() is 0, the group's first of the hour. Compute is recorded
// per hour as the quantiles of the hour's minute means (HistoryComputeQuantile1h, one rule
// evaluating every quantile, each with its HistoryQuantileLabel set by label_replace,
// joined with or) and their count
// (HistoryComputeMinutes1h).
func HistoryRules() []HistoryRule {
	var out []HistoryRule
	for _, src := range Sources {
		sel := Selector{Labels: DefaultLabels, Device: src.DeviceLabels(), AllNamespaces: true}
		out = append(out,
			HistoryRule{Record: HistoryMemoryMax1m, Source: src.Name(), Expr: src.MemoryPeakQuery(sel, HistoryRuleInterval)},
			HistoryRule{Record: HistoryMemoryMin1m, Source: src.Name(), Expr: preferred(src.Fields(SignalMemory), sel, "min_over_time", HistoryRuleInterval)},
			HistoryRule{Record: HistoryCompute1m, Source: src.Name(), Expr: src.ComputeQuery(sel, HistoryRuleInterval)},
		)
	}
	hour := func(fn, minute string) string {
		return fmt.Sprintf("%s(%s[%s]) and on () (minute() == 0)", fn, minute, promDuration(HistoryPeakInterval-HistoryRuleInterval/2))
	}
	out = append(out,
		HistoryRule{Record: HistoryMemoryMax1h, Expr: hour("max_over_time", HistoryMemoryMax1m)},
		HistoryRule{Record: HistoryMemoryMin1h, Expr: hour("min_over_time", HistoryMemoryMin1m)},
		HistoryRule{Record: HistoryMinutes1h, Expr: fmt.Sprintf("max by (%s) (%s)", HistorySourceLabel, hour("count_over_time", HistoryMemoryMax1m))},
	)
	quantiles := make([]string, len(HistoryComputeQuantiles))
	for i, q := range HistoryComputeQuantiles {
		quantiles[i] = fmt.Sprintf(`label_replace(quantile_over_time(%s, %s[%s]), %q, %q, "", "")`,
			quantileLabel(q), HistoryCompute1m, promDuration(HistoryPeakInterval-HistoryRuleInterval/2), HistoryQuantileLabel, quantileLabel(q))
	}
	out = append(out, HistoryRule{Record: HistoryComputeQuantile1h, Expr: fmt.Sprintf("(%s) and on () (minute() == 0)", strings.Join(quantiles, " or "))})
	return append(out, HistoryRule{Record: HistoryComputeMinutes1h, Expr: hour("count_over_time", HistoryCompute1m)})
}

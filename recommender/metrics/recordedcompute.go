package metrics

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
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

// RecordedCompute reads the source's hourly compute recordings at the recording times
// from, from + HistoryPeakInterval, …, to (at the recordings' phase, RecordingPhase) and
// returns, per container, the samples the compute histogram takes for each recorded
// hour: its n minute means (HistoryComputeMinutes1h) stood for by the deciles
// (HistoryComputeQuantile1h), decile k repeated ComputeDecileWeights(n)[k] times, in
// ascending order, one per HistoryRuleInterval at the last n minute ends of the hour
// (the latest at the recording time), as the raw read's minute means are stamped. The
// labels and units are the raw compute read's (Source.ComputeQuery), so decode's device,
// MIG and Allocation handling apply unchanged; no copied device value is marked (the
// caller reads raw wherever copies are possible). An hour without a count or with a
// decile missing gives nothing. Query errors are returned.
//
// Ascending order within the hour puts the higher values at the later times, where the
// decaying histogram weighs them slightly more: the fed distribution still dominates the
// raw one's (ComputeDecileWeights) with the decay, when the raw points lie on the same
// minute ends.
func (r *Reader) RecordedCompute(ctx context.Context, src Source, sel Selector, from, to time.Time) ([]Series, error) {
	read := func(name string) (model.Matrix, error) {
		return r.rangeMatrix(ctx, fmt.Sprintf("max without (%s) (%s)", HistorySourceLabel, recorded(name, src, sel)), from, to, HistoryPeakInterval)
	}
	deciles, err := read(HistoryComputeQuantile1h)
	if err != nil {
		return nil, err
	}
	counts, err := read(HistoryComputeMinutes1h)
	if err != nil {
		return nil, err
	}
	at := map[float64]int{}
	for k, q := range HistoryComputeQuantiles {
		at[q] = k
	}
	// values[series][hour][decile]
	values := map[model.Fingerprint]map[model.Time][]float64{}
	for _, s := range deciles {
		q, err := strconv.ParseFloat(string(s.Metric[HistoryQuantileLabel]), 64)
		k, ok := at[q]
		if err != nil || !ok {
			continue
		}
		m := s.Metric.Clone()
		delete(m, HistoryQuantileLabel)
		fp := m.Fingerprint()
		if values[fp] == nil {
			values[fp] = map[model.Time][]float64{}
		}
		for _, p := range s.Values {
			if values[fp][p.Timestamp] == nil {
				values[fp][p.Timestamp] = make([]float64, len(HistoryComputeQuantiles))
				for i := range values[fp][p.Timestamp] {
					values[fp][p.Timestamp][i] = math.NaN()
				}
			}
			values[fp][p.Timestamp][k] = float64(p.Value)
		}
	}
	minute := model.Time(HistoryRuleInterval.Milliseconds())
	var m model.Matrix
	for _, c := range counts {
		out := &model.SampleStream{Metric: c.Metric}
		for _, p := range c.Values {
			dec, n := values[c.Metric.Fingerprint()][p.Timestamp], int(p.Value)
			if dec == nil || slices.ContainsFunc(dec, math.IsNaN) || n <= 0 {
				continue
			}
			n = min(n, HistoryMinutesPerHour)
			t := p.Timestamp - model.Time(n-1)*minute
			for k, w := range ComputeDecileWeights(n) {
				for range w {
					out.Values = append(out.Values, model.SamplePair{Timestamp: t, Value: model.SampleValue(dec[k])})
					t += minute
				}
			}
		}
		if len(out.Values) > 0 {
			m = append(m, out)
		}
	}
	return r.decode(SignalCompute, m, nil), nil
}

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
// quantiles of each hour's minute means (HistoryComputeQuantile1h) and how many minute
// means the hour holds (HistoryComputeMinutes1h), fed to the compute histogram as the
// hour's samples (ComputeQuantileWeights) instead of the raw minute means.

// ComputeQuantileWeights returns how many of an hour's n minute means (n ≥ 0) each
// recorded quantile stands for: entry k for HistoryComputeQuantiles[k], summing to n, so
// the model counts the samples the raw read would give.
//
// Each quantile takes the minutes up to its own rank, never more: PromQL's
// quantile_over_time(q) interpolates between the sorted means v[0] ≤ … ≤ v[n−1] at rank
// r = q(n−1) (computed in float64, as PromQL does), so it is at least v[⌊r⌋], at or
// above ⌊r⌋+1 of the n means. Giving the quantiles up to q the weight ⌊q(n−1)⌋+1 in all
// makes the fed distribution's share at or below any value at most the true one's: the
// fed distribution stochastically dominates the hour's minute means, so every
// percentile of it, and anything monotone in the percentiles, is at least the raw
// read's (the safe side). A quantile whose rank has the same floor as the one below
// it weighs 0 (for a whole hour of 60 no recorded quantile does; for fewer minutes
// some may). For n = 60 the deciles weigh 6 each (0.51 one and 0.6 five) and each of
// the top HistoryComputeTopMinutes quantiles one minute.
func ComputeQuantileWeights(n int) []int { return QuantileWeights(HistoryComputeQuantiles, n) }

// QuantileWeights is ComputeQuantileWeights for any ascending quantiles qs (0–1, the
// last 1): entry k is how many of n minute means qs[k] stands for.
func QuantileWeights(qs []float64, n int) []int {
	w := make([]int, len(qs))
	if n <= 0 {
		return w
	}
	below := 0 // minutes at or below the previous quantile's rank
	for k, q := range qs {
		// The rank as PromQL computes it, in float64 (0.7·90 is 62.99…, not 63).
		upTo := min(n, int(math.Floor(q*float64(n-1)))+1)
		w[k] = upTo - below
		below = upTo
	}
	return w
}

// QuantileAtLeast returns a recorded quantile's value (ratio 0–1) raised by 4 units in
// the last place: PromQL's interpolation v·(1−w) + v·w between two equal minute means
// can come out up to 1.5 units below them in float64 (three roundings), which would
// put the fed sample a bucket below the raw one's where the mean lies on a bucket edge
// of history.ComputeBuckets (DCGM's whole percents: 0.02 is an edge). Raised, the value
// is never below the minute mean it stands for, and 4 units (about 1e-16 of a GPU)
// change no bucket otherwise. A value up to 1 is raised to at most 1, the whole device,
// so that it stays a plausible ratio (Invalid).
func QuantileAtLeast(v float64) float64 {
	raised := v
	for range 4 {
		raised = math.Nextafter(raised, math.Inf(1))
	}
	return math.Min(raised, math.Max(v, 1))
}

// quantileLabel is the HistoryQuantileLabel value of a recorded quantile.
func quantileLabel(q float64) string { return strconv.FormatFloat(q, 'f', -1, 64) }

// RecordedCompute reads the source's hourly compute recordings at the recording times
// from, from + HistoryPeakInterval, …, to (at the recordings' phase, RecordingPhase) and
// returns, per container, the samples the compute histogram takes for each recorded
// hour: its n minute means (HistoryComputeMinutes1h) stood for by the quantiles
// (HistoryComputeQuantile1h), quantile k repeated ComputeQuantileWeights(n)[k] times, in
// ascending order, one per HistoryRuleInterval at the last n minute ends of the hour
// (the latest at the recording time), as the raw read's minute means are stamped. The
// labels and units are the raw compute read's (Source.ComputeQuery), so decode's device,
// MIG and Allocation handling apply unchanged; no copied device value is marked (the
// caller reads raw wherever copies are possible). An hour without a count or with a
// quantile missing gives nothing. Query errors are returned.
//
// Ascending order within the hour puts the higher values at the later times, where the
// decaying histogram weighs them slightly more: the fed distribution still dominates the
// raw one's (ComputeQuantileWeights) with the decay, when the raw points lie on the same
// minute ends.
func (r *Reader) RecordedCompute(ctx context.Context, src Source, sel Selector, from, to time.Time) ([]Series, error) {
	read := func(name string) (model.Matrix, error) {
		return r.rangeMatrix(ctx, fmt.Sprintf("max without (%s) (%s)", HistorySourceLabel, recorded(name, src, sel)), from, to, HistoryPeakInterval)
	}
	quantiles, err := read(HistoryComputeQuantile1h)
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
	// values[series][hour][quantile]
	values := map[model.Fingerprint]map[model.Time][]float64{}
	for _, s := range quantiles {
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
			qv, n := values[c.Metric.Fingerprint()][p.Timestamp], int(p.Value)
			if qv == nil || slices.ContainsFunc(qv, math.IsNaN) || n <= 0 {
				continue
			}
			n = min(n, HistoryMinutesPerHour)
			t := p.Timestamp - model.Time(n-1)*minute
			for k, w := range ComputeQuantileWeights(n) {
				for range w {
					out.Values = append(out.Values, model.SamplePair{Timestamp: t, Value: model.SampleValue(QuantileAtLeast(qv[k]))})
					t += minute
				}
			}
		}
		if len(out.Values) > 0 {
			m = append(m, out)
		}
	}
	return r.decode(SignalCompute, m, nil, HistoryRuleInterval), nil
}

package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/prom"
)

// SampleRead is a compute or memory read that Prometheus can answer with raw samples:
// the series of one field, selected by one series selector, whose per-step means
// (compute) or peaks (memory) the Reader computes itself (Reader.RangeFromSamples)
// instead of asking Prometheus to evaluate avg_over_time or max_over_time at every step
// of a range query, and whose impossible samples it drops itself (no dirty-namespace
// check, DirtyQuery, is needed).
//
// Why: a long load's compute read is one range function per series and step, and
// Prometheus pays its vector match, aggregation and relabelling at every step for every
// series (55 % of the evaluation of a 10,000-pod × 8-day first install,
// docs/benchmarks.md). The same samples returned as a range vector cost Prometheus only
// the chunk reads (12× less evaluation time on Debian's Prometheus 2.42, 1,000 pods × 6
// hours, docs/benchmarks.md "compute from raw samples").
type SampleRead struct {
	// Field is the one field read.
	Field Field
	// Selector is the PromQL series selector of its series, e.g.
	// DCGM_FI_DEV_GPU_UTIL{namespace=~"a|b",pod!="",exported_pod=""}.
	Selector string
	// keys are the labels the windows' values are merged by (max), as the data
	// queries' aggregation: namespace, pod, container and the device labels.
	keys []string
	// peak: each window's value is its valid samples' maximum (memory,
	// max_over_time); else their mean (compute, avg_over_time).
	peak bool
}

// ComputeSamples returns the SampleRead of src's compute over sel, and true, where the
// compute query (Source.ComputeQuery) reduces to one series selector: sel carries a
// Presence (Reader.Presence) that finds exactly one compute field with series, no series
// scraped without honor_labels and, for an instance-relative field, none on a MIG
// instance, and the field keeps the selector's label names (no Field.Labels,
// Field.Device or Field.NoContainer relabelling). Elsewhere (several fields, whose
// preference is decided per container and step; relabelled series) it returns false
// and the load reads the range query, as before.
func ComputeSamples(src Source, sel Selector) (SampleRead, bool) {
	return samplesOf(src, sel, SignalCompute)
}

// MemorySamples is ComputeSamples for the memory peaks (Source.MemoryPeakQuery): the
// SampleRead of src's one memory field with series over sel, whose windows' values are
// their valid samples' maximum; false where the memory query is more than one series
// selector, or where the field keeps its last value (Field.KeepsLastValue: its
// flatness, FlatQuery, is read beside the peaks with the same namespaces' split).
func MemorySamples(src Source, sel Selector) (SampleRead, bool) {
	sr, ok := samplesOf(src, sel, SignalMemory)
	return sr, ok && !sr.Field.KeepsLastValue
}

func samplesOf(src Source, sel Selector, signal Signal) (SampleRead, bool) {
	p := sel.present()
	if p == nil || (p.exported() && !sel.Direct) {
		return SampleRead{}, false
	}
	fields := p.keep(src.Fields(signal))
	if len(fields) != 1 {
		return SampleRead{}, false
	}
	f := fields[0]
	parts := f.migParts(p)
	if f.Labels != nil || f.Device != nil || f.NoContainer || len(parts) != 1 || !p.hasMetric(f.Metric) {
		return SampleRead{}, false
	}
	return SampleRead{
		Field:    f,
		Selector: sel.workloadSelector(f.Metric, NamespaceRegex(sel.Namespaces), parts[0].extra+sel.extra()),
		keys:     sel.keys(),
		peak:     signal == SignalMemory,
	}, true
}

// RangeFromSamples reads sr over [start, end] at step from raw samples: one instant
// query of the range vector sr.Selector[end − start + step] at end. The value at each
// step t is, per series, the mean (compute) or the maximum (memory, MemorySamples) of
// its valid samples in (t − step, t] (in [0, the unit's maximum]; NaN, ±Inf and samples
// out of range dropped, as the robust form of Selector.Series drops them: they are
// counted by DropCountQuery), the series of one container and device merged with max,
// converted to a ratio 0–1 or bytes and labelled with SourceLabel, as
// Source.ComputeQuery and Source.MemoryPeakQuery answer; a window without a valid sample
// has no value. Decoded as Range decodes; start equal to end is one window, as an
// instant query's.
//
// Each raw sample counts in one window only: (t − step, t] is Prometheus 3's range
// semantics; Prometheus 2's range functions also counted a sample stamped exactly at a
// window's start, which only backfilled series aligned to the step have.
//
// The samples come through the API's RawReader (Prometheus' remote read API) where it
// has one, and through the query API where that fails.
//
// It returns Prometheus' error (TooManySamples or timedOut for an answer too large for
// the backend's limits or the timeout: the caller then reads the range query, which
// chunks), a *PartialResponseError for an answer with warnings, or an
// ErrSampleOutsideQuery error.
func (r *Reader) RangeFromSamples(ctx context.Context, signal Signal, sr SampleRead, start, end time.Time, step time.Duration) ([]Series, error) {
	if step <= 0 || end.Before(start) {
		return nil, fmt.Errorf("raw sample read [%s, %s] at step %s: want a positive step and start not after end", start, end, step)
	}
	raw, err := r.rawSamples(ctx, sr.Selector, start.Add(-step), end)
	if err != nil {
		return nil, err
	}
	return r.decode(signal, sr.bin(raw, start, end, step), nil, step), nil
}

// rawSamples returns the raw samples of the series selector in (from, to]: through the
// API's RawReader where it has one and the read succeeds, else as the range vector
// selector[to − from] of an instant query at to.
func (r *Reader) rawSamples(ctx context.Context, selector string, from, to time.Time) (model.Matrix, error) {
	if rr, ok := r.API.(RawReader); ok {
		rctx, cancel := context.WithTimeout(ctx, r.timeout())
		raw, err := rr.ReadRaw(rctx, selector, from, to)
		cancel()
		if err == nil {
			Queries.WithLabelValues(KindRemoteRead, "ok").Inc()
			return raw, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, prom.ErrRemoteReadUnsupported) {
			Queries.WithLabelValues(KindRemoteRead, "error").Inc()
			klog.FromContext(ctx).V(2).Info("Remote read failed; reading the samples through the query API", "err", err)
		}
	}
	query := fmt.Sprintf("%s[%dms]", selector, to.Sub(from).Milliseconds())
	v, err := r.instant(ctx, query, to)
	if err != nil {
		return nil, err
	}
	raw, ok := v.(model.Matrix)
	if !ok {
		Queries.WithLabelValues("instant", "error").Inc()
		return nil, fmt.Errorf("prometheus query %q: want a matrix, got %s", query, typeOf(v))
	}
	if err := outsideQuery("instant", query, raw, from, to, 0); err != nil {
		return nil, err
	}
	Queries.WithLabelValues("instant", "ok").Inc()
	return raw, nil
}

// KindRemoteRead is the kind label of gpufrac_recommender_prometheus_queries_total for
// a read through Prometheus' remote read API (RawReader).
const KindRemoteRead = "remote_read"

// RawReader is implemented by a Reader's API that can read raw samples without the
// query engine: prom.NewAPI's, over Prometheus' remote read API (prom.RemoteReadPath).
// ReadRaw returns the samples of the series selector (a PromQL series selector) in
// (from, to], one stream per series in time order, stale markers as NaN; its errors are
// the backend's, or prom.ErrRemoteReadUnsupported where the backend does not serve it.
//
// RangeFromSamples reads through it where the API has it, and through the query API
// (an instant query of the range vector, JSON) where it fails. Measured on Debian's
// Prometheus 2.42 (docs/benchmarks.md, "raw samples through the remote read API"): the
// compute read of a bootstrap of 1,000 pods × 24 hours of one field waited 0.11 s
// through it against 1.66 s through the query API.
type RawReader interface {
	ReadRaw(ctx context.Context, selector string, from, to time.Time) (model.Matrix, error)
}

// bin bins raw into the steps of [start, end]: per series the mean (or, for a peak
// read, the maximum) of its valid samples in each (t − step, t], then the maximum over
// the series with the same keys, in the signal's unit (bytes or ratio), labelled with
// the keys and SourceLabel. It empties raw as it goes, so a stream's samples can be
// collected once binned.
func (sr SampleRead) bin(raw model.Matrix, start, end time.Time, step time.Duration) model.Matrix {
	first, stepMs := model.TimeFromUnixNano(start.UnixNano()), step.Milliseconds()
	n := int(end.Sub(start)/step) + 1
	limit := sr.Field.Unit.max()
	type group struct {
		metric model.Metric
		max    []float64 // per step; NaN: no value yet
	}
	groups := map[string]*group{}
	var order []*group
	// acc holds per step the sum of the valid samples (mean) or their maximum (peak).
	acc, count := make([]float64, n), make([]int, n)
	var key strings.Builder
	for r, s := range raw {
		raw[r] = nil // each stream's samples may be freed once binned
		clear(acc)
		clear(count)
		for _, p := range s.Values {
			v := float64(p.Value)
			d := int64(p.Timestamp - first)
			if !(v >= 0 && v <= limit) || d <= -stepMs {
				continue // NaN, ±Inf or out of range; or at or before the first window
			}
			i := 0
			if d > 0 {
				i = int((d + stepMs - 1) / stepMs)
			}
			if i >= n {
				continue
			}
			switch {
			case !sr.peak:
				acc[i] += v
			case count[i] == 0 || v > acc[i]:
				acc[i] = v
			}
			count[i]++
		}
		key.Reset()
		for _, k := range sr.keys {
			key.WriteString(string(s.Metric[model.LabelName(k)]))
			key.WriteByte(0xff)
		}
		g := groups[key.String()]
		if g == nil {
			m := model.Metric{SourceLabel: model.LabelValue(sr.Field.Metric)}
			for _, k := range sr.keys {
				if v := s.Metric[model.LabelName(k)]; v != "" {
					m[model.LabelName(k)] = v
				}
			}
			g = &group{metric: m, max: make([]float64, n)}
			for i := range g.max {
				g.max[i] = math.NaN()
			}
			groups[key.String()] = g
			order = append(order, g)
		}
		for i, c := range count {
			if c == 0 {
				continue
			}
			v := acc[i]
			if !sr.peak {
				v /= float64(c)
			}
			if !(v <= g.max[i]) {
				g.max[i] = v
			}
		}
	}
	out := make(model.Matrix, 0, len(order))
	for _, g := range order {
		n := 0
		for _, v := range g.max {
			if !math.IsNaN(v) {
				n++
			}
		}
		st := &model.SampleStream{Metric: g.metric, Values: make([]model.SamplePair, 0, n)}
		for i, v := range g.max {
			if !math.IsNaN(v) {
				st.Values = append(st.Values, model.SamplePair{Timestamp: first.Add(time.Duration(i) * step), Value: model.SampleValue(sr.Field.Unit.convert(v))})
			}
		}
		if len(st.Values) > 0 {
			out = append(out, st)
		}
	}
	return out
}

// RangeFromSamplesOr is RangeFromSamples with the fallback a long load takes where the
// backend refuses the raw samples as too large or runs out of time
// (SampleReadTooLarge): it logs the refusal and returns query's answer instead (the
// range query, which chunks). Other errors, and any once ctx is done, are returned as
// they are.
func (r *Reader) RangeFromSamplesOr(ctx context.Context, signal Signal, sr SampleRead, start, end time.Time, step time.Duration, query func() ([]Series, error)) ([]Series, error) {
	s, err := r.RangeFromSamples(ctx, signal, sr, start, end, step)
	if err == nil || !SampleReadTooLarge(err) || ctx.Err() != nil {
		return s, err
	}
	klog.FromContext(ctx).V(2).Info("Reading raw samples was refused as too large; reading the query", "signal", signal, "selector", sr.Selector, "err", err)
	return query()
}

// SampleReadTooLarge reports whether RangeFromSamples failed because the backend refused
// its answer as too large (TooManySamples: Prometheus' --query.max-samples, Thanos',
// Mimir's and Cortex's limits) or it ran out of time (the Reader's Timeout or the
// backend's): the range query, which chunks (Reader.Range), may still get through.
func SampleReadTooLarge(err error) bool { return TooManySamples(err) || timedOut(err) }

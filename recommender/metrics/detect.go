package metrics

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// DetectSources returns the sources, in Sources' order (most precise per-pod attribution
// first), that have a series of any of their fields (memory or compute, every
// generation) in Prometheus between from and to: the history window. It asks the
// label-values API (/api/v1/label/__name__/values with match[]), which reads the index
// and no sample, so it costs the same over 8 days as over 5 minutes, sees a Job that
// ran between two scrapes of a probe, and gives the same answer whenever the
// recommender (re)starts within the window. Finding none is not an error: a workload
// then has no samples (a condition says so), and history found later is read.
//
// It returns Prometheus' error, or a *PartialResponseError (ErrPartialResponse) when
// the answer carried warnings: a source missing from a partial answer is not absent.
func DetectSources(ctx context.Context, r *Reader, from, to time.Time) ([]Source, error) {
	names := SourceMetrics(Sources...)
	match := fmt.Sprintf(`{__name__=~%q}`, strings.Join(quoteAll(names), "|"))
	values, err := r.LabelValues(ctx, model.MetricNameLabel, []string{match}, from, to)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, v := range values {
		have[string(v)] = true
	}
	var out []Source
	for _, s := range Sources {
		for _, m := range SourceMetrics(s) {
			if have[m] {
				out = append(out, s)
				break
			}
		}
	}
	return out, nil
}

// SourceMetrics lists the published metric names the sources read, memory fields first.
func SourceMetrics(sources ...Source) []string {
	var out []string
	for _, s := range sources {
		for _, sig := range []Signal{SignalMemory, SignalCompute} {
			for _, f := range s.Fields(sig) {
				out = append(out, f.Metric)
			}
		}
	}
	return out
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = regexp.QuoteMeta(n)
	}
	return out
}

// LabelValues asks the label-values API (/api/v1/label/<label>/values) for the values of
// label among the series matching any of match with samples between from and to: the
// index, no sample read. It returns Prometheus' error, or a *PartialResponseError
// (ErrPartialResponse) when the answer carried warnings (a value missing from a partial
// answer is not absent); each request counts in Queries as kind "labels".
func (r *Reader) LabelValues(ctx context.Context, label string, match []string, from, to time.Time) (model.LabelValues, error) {
	return indexRequest(ctx, r, "labels", "label values "+label, match, func(ctx context.Context) (model.LabelValues, promv1.Warnings, error) {
		values, warnings, _, err := r.API.LabelValues(ctx, label, match, from, to)
		return values, warnings, err
	})
}

// indexRequest runs an index request (label values, series) of the selectors match
// under the Reader's timeout, counted in Queries as kind, its error wrapped with what
// (e.g. "label values pod"), and an answer with warnings returned as a
// *PartialResponseError.
func indexRequest[T any](ctx context.Context, r *Reader, kind, what string, match []string, call func(context.Context) (T, promv1.Warnings, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	var zero T
	out, warnings, err := call(cctx)
	if err != nil {
		Queries.WithLabelValues(kind, "error").Inc()
		return zero, fmt.Errorf("prometheus %s %s: %w", what, strings.Join(match, " "), withBody(err))
	}
	if err := partial(kind, strings.Join(match, " "), warnings); err != nil {
		return zero, err
	}
	Queries.WithLabelValues(kind, "ok").Inc()
	return out, nil
}

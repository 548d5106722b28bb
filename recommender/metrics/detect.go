package metrics

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

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
	cctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	values, warnings, _, err := r.API.LabelValues(cctx, label, match, from, to)
	if err != nil {
		Queries.WithLabelValues("labels", "error").Inc()
		return nil, fmt.Errorf("prometheus label values %s %s: %w", label, strings.Join(match, " "), withBody(err))
	}
	if err := partial("labels", strings.Join(match, " "), warnings); err != nil {
		return nil, err
	}
	Queries.WithLabelValues("labels", "ok").Inc()
	return values, nil
}

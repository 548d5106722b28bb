package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// DetectSource returns the first of Sources whose memory metric Prometheus holds at ts,
// or an error naming the metrics looked for.
func DetectSource(ctx context.Context, r *Reader, ts time.Time) (Source, error) {
	return DetectSourceOver(ctx, r, ts, ts)
}

// DetectStep is the step at which DetectSourceOver looks back over the history window
// when nothing is scraped now: each step sees the samples of the lookback delta (5 m)
// before it, so a probe costs a few samples per series and step, not the window's.
const DetectStep = time.Hour

// DetectSourceOver returns the first of Sources whose memory metric Prometheus holds at
// to or, when none is scraped now (an exporter restart, a scrape gap), at any
// DetectStep of [from, to]: a live gap never hides days of history, and the choice does
// not depend on when the recommender restarted within the gap. It returns an error
// naming the metrics looked for when neither finds one.
func DetectSourceOver(ctx context.Context, r *Reader, from, to time.Time) (Source, error) {
	var names []string
	for _, s := range Sources {
		names = append(names, s.MemoryMetric())
	}
	vec, err := r.Vector(ctx, fmt.Sprintf(`count by (__name__) ({__name__=~%q})`, strings.Join(names, "|")), to)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, s := range vec {
		have[string(s.Metric[model.MetricNameLabel])] = true
	}
	if len(have) == 0 && to.Sub(from) > DetectStep {
		q := fmt.Sprintf(`count by (__name__) ({__name__=~%q})`, strings.Join(names, "|"))
		cctx, cancel := context.WithTimeout(ctx, r.timeout())
		v, warnings, _, err := r.API.QueryRange(cctx, q, promv1.Range{Start: from, End: to, Step: DetectStep})
		cancel()
		if err != nil {
			Queries.WithLabelValues("range", "error").Inc()
			return nil, fmt.Errorf("prometheus range query %q: %w", q, err)
		}
		if err := partial("range", q, warnings); err != nil {
			return nil, err
		}
		Queries.WithLabelValues("range", "ok").Inc()
		if m, ok := v.(model.Matrix); ok {
			for _, s := range m {
				if len(s.Values) > 0 {
					have[string(s.Metric[model.MetricNameLabel])] = true
				}
			}
		}
	}
	for _, s := range Sources {
		if have[s.MemoryMetric()] {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no GPU metric source found in Prometheus (looked for %s)", strings.Join(names, ", "))
}

package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// DetectSource returns the first of Sources whose memory metric Prometheus holds at ts,
// or an error naming the metrics looked for.
func DetectSource(ctx context.Context, r *Reader, ts time.Time) (Source, error) {
	var names []string
	for _, s := range Sources {
		names = append(names, s.MemoryMetric())
	}
	vec, err := r.Vector(ctx, fmt.Sprintf(`count by (__name__) ({__name__=~%q})`, strings.Join(names, "|")), ts)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, s := range vec {
		have[string(s.Metric[model.MetricNameLabel])] = true
	}
	for _, s := range Sources {
		if have[s.MemoryMetric()] {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no GPU metric source found in Prometheus (looked for %s)", strings.Join(names, ", "))
}

package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// ExportedLabels are the workload labels as Prometheus renames them when it scrapes an
// exporter without honor_labels: the exporter's own target labels keep namespace, pod
// and container, and the workload's move to exported_*.
var ExportedLabels = Labels{Namespace: "exported_namespace", Pod: "exported_pod", Container: "exported_container"}

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

// DetectLabels returns ExportedLabels when the source's memory series carry
// exported_pod (a scrape without honor_labels), else DefaultLabels. Series whose pod
// label then names the exporter itself are never attributed to a workload, because
// queries select and group by the exported_* labels only.
func DetectLabels(ctx context.Context, r *Reader, src Source, ts time.Time) (Labels, error) {
	vec, err := r.Vector(ctx, fmt.Sprintf(`count(%s{%s!=""})`, src.MemoryMetric(), ExportedLabels.Pod), ts)
	if err != nil {
		return Labels{}, err
	}
	if len(vec) > 0 && vec[0].Value > 0 {
		return ExportedLabels, nil
	}
	return DefaultLabels, nil
}

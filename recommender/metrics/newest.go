package metrics

import (
	"fmt"
	"slices"
	"strings"
)

// NewestSampleQuery returns PromQL whose instant value is the time (Unix seconds) of
// Prometheus' newest sample of any of the sources' memory and compute fields:
// timestamp(), so only samples within Prometheus' lookback of the evaluation time (5
// minutes by default) count, and the answer is empty without one. "" when the sources
// have no fields. A source's memory and compute fields come from one exporter's scrape,
// so one signal holds samples up to where the other does.
func NewestSampleQuery(sources []Source) string {
	var names []string
	for _, src := range sources {
		for _, sig := range []Signal{SignalMemory, SignalCompute} {
			for _, f := range src.Fields(sig) {
				if !slices.Contains(names, f.Metric) {
					names = append(names, f.Metric)
				}
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	var ts []string
	for _, m := range names {
		// The field's name as a label: timestamp() drops names, and the series of two
		// fields may otherwise share their labels (`or` would drop the second's).
		ts = append(ts, fmt.Sprintf(`label_replace(timestamp(%s), %q, %q, "", "")`, m, SourceLabel, m))
	}
	return "max(" + strings.Join(ts, " or ") + ")"
}

package metrics

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
)

// TestEverySourceQueryParses is the per-source table test: for every metric source, with
// and without exported_* labels, custom label names and namespaces that need regex
// escaping, every query the recommender sends parses with Prometheus' own PromQL parser,
// and the data queries' outermost aggregation groups by exactly the selector's keys
// (namespace, pod, container, device labels): the grouping the reader attributes samples
// by.
func TestEverySourceQueryParses(t *testing.T) {
	from := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, src := range Sources {
		for _, direct := range []bool{true, false} {
			for _, labels := range []Labels{DefaultLabels, {Namespace: "k8s_ns", Pod: "k8s_pod", Container: "k8s_ctr"}} {
				sel := Selector{Labels: labels, Namespaces: []string{"team-a", "b.x"}, Direct: direct, Device: src.DeviceLabels()}
				name := src.Name()
				grouped := map[string]string{
					"memory peak": src.MemoryPeakQuery(sel, time.Hour),
					"compute":     src.ComputeQuery(sel, time.Minute),
				}
				if q := ContradictedQuery(src, sel, time.Hour); q != "" {
					grouped["contradicted"] = q
				}
				if q := ContradictedQuery(src, sel, time.Minute); q != "" {
					grouped["contradicted (short window)"] = q
				}
				others := map[string]string{"flat": FlatQuery(src, sel, time.Hour),
					"copies memory": CopiesQuery(src, sel, SignalMemory, time.Hour), "copies compute": CopiesQuery(src, sel, SignalCompute, time.Minute)}
				for _, signal := range []Signal{SignalMemory, SignalCompute} {
					q, _ := sel.DropCountQuery(src.Fields(signal), from.Add(-time.Hour), from)
					others["drop count "+string(signal)] = q
					q, _ = sel.MissingLabelsQuery(src.Fields(signal), from.Add(-time.Hour), from)
					others["missing labels "+string(signal)] = q
					others["dirty namespaces "+string(signal)] = sel.DirtyQuery(src.Fields(signal), 6*time.Hour)
				}
				others["recorded peaks"], others["recorded flat"] = RecordedPeakQuery(src, sel), RecordedFlatQuery(src, sel)
				others["targets"] = TargetsQuery(src, sel, []Target{{Job: "dcgm-exporter", Instance: "10.0.0.5:9400"}, {Job: "gpu.metrics", Instance: "[fd00::1]:9400"}}, 8*24*time.Hour)
				others["served"] = ServedQuery(src, sel, AgentCoverage)
				for what, q := range grouped {
					expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
					if err != nil {
						t.Errorf("%s direct=%v %s query does not parse: %v\n%s", name, direct, what, err, q)
						continue
					}
					var agg *parser.AggregateExpr
					parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
						if a, ok := n.(*parser.AggregateExpr); ok && agg == nil {
							agg = a
						}
						return nil
					})
					if agg == nil || agg.Without || !slices.Equal(agg.Grouping, sel.keys()) {
						t.Errorf("%s direct=%v %s query: outermost aggregation %v, want by %v\n%s", name, direct, what, agg, sel.keys(), q)
					}
				}
				for what, q := range others {
					if q == "" {
						continue // the source has nothing to ask (e.g. no shared copies for per-process fields)
					}
					if _, err := parser.NewParser(parser.Options{}).ParseExpr(q); err != nil {
						t.Errorf("%s direct=%v %s query does not parse: %v\n%s", name, direct, what, err, q)
					}
				}
			}
		}
	}
}

// Command historyrules writes the gpufrac-history recording rules
// (metrics.HistoryRules) into rules/gpufrac.rules.yaml: everything from the marker line
// (marker) to the end of the file is replaced. Run it from the repository root
// (`make history-rules`, which also refreshes the chart's copy);
// metrics.TestHistoryRulesFile fails when the file's rules differ from HistoryRules.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

func main() {
	const path = "rules/gpufrac.rules.yaml"
	raw, err := os.ReadFile(path)
	if err == nil {
		var out []byte
		if out, err = withHistoryRules(raw); err == nil {
			err = os.WriteFile(path, out, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "historyrules:", err)
		os.Exit(1)
	}
}

// marker is the line of rules/gpufrac.rules.yaml after which WithHistoryRules
// writes the gpufrac-history group.
const marker = "  # --- gpufrac-history: written by `make history-rules` (hack/historyrules) from recommender/metrics.HistoryRules; do not edit below ---\n"

// withHistoryRules returns the rule file text with everything from marker on
// (or, without the marker, after the whole text) replaced by the marker and the
// gpufrac-history group: one rule per metrics.HistoryRules entry, its PromQL as the reader writes it (one
// line, so the file's text is what TestHistoryRulesFile compares).
// It returns an error when a rule's PromQL does not parse.
func withHistoryRules(file []byte) ([]byte, error) {
	text := string(file)
	if i := strings.Index(text, marker); i >= 0 {
		text = text[:i]
	} else if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	var b strings.Builder
	b.WriteString(text)
	b.WriteString(marker)
	fmt.Fprintf(&b, "  # Pre-aggregated history for large fleets (docs/recommender.md, rules/README.md).\n")
	fmt.Fprintf(&b, "  - name: gpufrac-history\n    interval: %s\n    rules:\n", model.Duration(metrics.HistoryRuleInterval))
	for _, r := range metrics.HistoryRules() {
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr); err != nil {
			return nil, fmt.Errorf("rule %s (source %q): %w", r.Record, r.Source, err)
		}
		fmt.Fprintf(&b, "      - record: %s\n", r.Record)
		if r.Source != "" {
			fmt.Fprintf(&b, "        labels:\n          %s: %s\n", metrics.HistorySourceLabel, r.Source)
		}
		fmt.Fprintf(&b, "        expr: |\n          %s\n", r.Expr)
	}
	return []byte(b.String()), nil
}

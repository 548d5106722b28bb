package metrics

import (
	"strings"
	"testing"
	"time"
)

// The gpufrac-history group of rules/gpufrac.rules.yaml is what HistoryRules
// returns, rule for rule (run `make history-rules` when the reader's queries change), at
// HistoryRuleInterval.
func TestHistoryRulesFile(t *testing.T) {
	file := readRuleFile(t)
	want := HistoryRules()
	found := false
	for _, g := range file.Groups {
		if g.Name != "gpufrac-history" {
			continue
		}
		found = true
		if d, err := time.ParseDuration(g.Interval); err != nil || d != HistoryRuleInterval {
			t.Errorf("gpufrac-history interval %q, want %s", g.Interval, HistoryRuleInterval)
		}
		if len(g.Rules) != len(want) {
			t.Fatalf("gpufrac-history has %d rules, HistoryRules %d: run make history-rules", len(g.Rules), len(want))
		}
		for i, r := range g.Rules {
			w := want[i]
			if r.Record != w.Record || r.Labels[HistorySourceLabel] != w.Source || strings.TrimSpace(r.Expr) != w.Expr {
				t.Errorf("rule %d is %s{%s=%q}, want %s{%s=%q} with HistoryRules' expression: run make history-rules",
					i, r.Record, HistorySourceLabel, r.Labels[HistorySourceLabel], w.Record, HistorySourceLabel, w.Source)
			}
		}
	}
	if !found {
		t.Fatal("rules/gpufrac.rules.yaml has no gpufrac-history group: run make history-rules")
	}
}

package metrics

import (
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	promparser "github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/internal/goconst"
)

// quietDropReasons are the drop reasons that deliberately raise no alert, with why.
var quietDropReasons = map[string]string{
	DropOutsidePodLife: "samples before a pod was created, after its container ended, crash-loop zeros: normal, nothing to fix",
}

// Every reason of gpufrac_recommender_samples_dropped_total (the Drop* constants of this
// package) is selected by an alert of rules/gpufrac.rules.yaml, as PromQL matches it,
// unless it is listed as quiet; and a reason added later falls into one too.
func TestEveryDropReasonHasAnAlert(t *testing.T) {
	file := readRuleFile(t)
	alerts := map[string][]string{} // reason → alerts selecting it
	reasons := append(dropReasons(t), "reason_added_later")
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := promparser.NewParser(promparser.Options{}).ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			promparser.Inspect(expr, func(n promparser.Node, _ []promparser.Node) error {
				vs, ok := n.(*promparser.VectorSelector)
				if !ok || vs.Name != SamplesDroppedName {
					return nil
				}
				for _, reason := range reasons {
					if matchesAll(vs.LabelMatchers, "reason", reason) {
						alerts[reason] = append(alerts[reason], r.Alert)
					}
				}
				return nil
			})
		}
	}
	for _, reason := range reasons {
		_, quiet := quietDropReasons[reason]
		switch {
		case quiet && len(alerts[reason]) > 0:
			t.Errorf("reason %s is quiet (%s) but alerts %v select it", reason, quietDropReasons[reason], alerts[reason])
		case !quiet && len(alerts[reason]) == 0:
			t.Errorf("reason %s of %s has no alert in rules/gpufrac.rules.yaml", reason, SamplesDroppedName)
		}
	}
}

// matchesAll reports whether every matcher on the label accepts the value.
func matchesAll(ms []*labels.Matcher, name, value string) bool {
	for _, m := range ms {
		if m.Name == name && !m.Matches(value) {
			return false
		}
	}
	return true
}

// dropReasons returns the values of the package's Drop* string constants.
func dropReasons(t *testing.T) []string {
	found, err := goconst.Strings(".", "Drop")
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Sorted(maps.Values(found))
	if len(out) < 9 {
		t.Fatalf("found %d drop reasons: %v", len(out), out)
	}
	return out
}

// ruleFile is rules/gpufrac.rules.yaml as the tests read it.
type ruleFile struct {
	Groups []struct {
		Name, Interval string
		Rules          []struct {
			Alert, Record, Expr string
			Labels              map[string]string
		}
	}
}

// readRuleFile parses rules/gpufrac.rules.yaml.
func readRuleFile(t *testing.T) ruleFile {
	t.Helper()
	raw, err := os.ReadFile("../../rules/gpufrac.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file ruleFile
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	return file
}

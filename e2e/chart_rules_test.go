package e2e

// Chart rules and dashboard: alert runbooks and tests, the rendered PrometheusRule, dashboard queries.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestChartRules checks that every alert has a runbook and unit tests that see it fire and
// stay quiet, that the chart renders the rules into a valid PrometheusRule, and that the
// dashboard's queries parse and only use recorded gpufrac: series that the rules define.
// promtool's check and unit tests of rules/ and the chart copy's freshness run in `make
// rules-test` and `make chart-lint`.
func TestChartRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found (Debian package prometheus)")
	}
	tests, _ := filepath.Glob(filepath.Join(repoRoot, "rules", "tests", "*.yaml"))
	if len(tests) == 0 {
		t.Fatal("no rule unit tests in rules/tests")
	}
	rulesRaw, err := os.ReadFile(filepath.Join(repoRoot, "rules", "gpufrac.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	type ruleFile struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	var rf ruleFile
	if err := yaml.Unmarshal(rulesRaw, &rf); err != nil {
		t.Fatal(err)
	}
	alerts, records := map[string]bool{}, map[string]bool{}
	runbooks, err := os.ReadFile(filepath.Join(repoRoot, "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,3} (GPUFrac[A-Za-z]+)\s*$`).FindAllStringSubmatch(string(runbooks), -1) {
		headings[m[1]] = true
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
				continue
			}
			alerts[r.Alert] = true
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[k] == "" {
					t.Errorf("alert %s has no %s", r.Alert, k)
				}
			}
			if want := "docs/alerts.md#" + strings.ToLower(r.Alert); !strings.HasSuffix(r.Annotations["runbook_url"], want) {
				t.Errorf("alert %s: runbook_url %q does not end with %s", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !headings[r.Alert] {
				t.Errorf("alert %s has no runbook section (## %s) in docs/alerts.md", r.Alert, r.Alert)
			}
		}
	}

	// Each alert fires in some unit test and is expected quiet in some other case.
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, f := range tests {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string           `json:"alertname"`
					ExpAlerts []map[string]any `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(raw, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	var names []string
	for a := range alerts {
		names = append(names, a)
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: unit tests see it firing %v, quiet %v; want both", a, fires[a], quiet[a])
		}
	}
	sort.Strings(names)
	t.Logf("%d alerts, %d recording rules; alerts: %s", len(alerts), len(records), strings.Join(names, ", "))

	// The PrometheusRule the chart renders holds valid rules; alerts of disabled
	// components are left out.
	// The gpufrac-history group only with historyRecordings (all-on sets it).
	for _, c := range []struct {
		values  string
		set     []string
		absent  []string
		history bool
	}{
		{"all-on", nil, nil, true},
		{"simulate", []string{"updater.enabled=false"}, []string{"GPUFracUpdaterDown", "GPUFracUpdaterBlocked", "GPUFracUpdaterStatusWritesFailing", "GPUFracMetricSamplesDropped"}, false},
	} {
		var spec []byte
		for _, o := range chartObjects(t, chartTemplate(t, "rules", "monitoring", c.values, c.set...)) {
			if o.GetKind() == "PrometheusRule" {
				if spec, err = yaml.Marshal(o.Object["spec"]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if spec == nil {
			t.Fatalf("%s: no PrometheusRule rendered", c.values)
		}
		f := filepath.Join(t.TempDir(), "rendered.rules.yaml")
		if err := os.WriteFile(f, spec, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := chartExec(nil, promtool, "check", "rules", f); err != nil {
			t.Errorf("rendered PrometheusRule (%s): %v\n%s", c.values, err, out)
		}
		if got := bytes.Contains(spec, []byte("name: gpufrac-history\n")); got != c.history {
			t.Errorf("%s: gpufrac-history group rendered %v, want %v", c.values, got, c.history)
		}
		for _, a := range c.absent {
			if bytes.Contains(spec, []byte("alert: "+a+"\n")) {
				t.Errorf("%s: alert %s rendered, want it left out", c.values, a)
			}
		}
		if c.absent == nil {
			for a := range alerts {
				if !bytes.Contains(spec, []byte("alert: "+a+"\n")) {
					t.Errorf("%s: alert %s missing from the rendered PrometheusRule", c.values, a)
				}
			}
		}
	}

	checkDashboard(t, records)
}

// checkDashboard parses every query of the Grafana dashboard and checks the recorded
// series it reads exist, and that the chart ships it in a sidecar-discoverable ConfigMap.
func checkDashboard(t *testing.T, records map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir(), "dashboards", "gpufrac.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || (k == "query" && strings.HasPrefix(s, "label_values("))) {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	if len(exprs) < 20 {
		t.Errorf("dashboard has %d queries, want at least 20", len(exprs))
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]+\)$`)
	p := parser.NewParser(parser.Options{})
	used := map[string]bool{}
	for _, e := range exprs {
		q := grafanaVars.Replace(e)
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		expr, err := p.ParseExpr(q)
		if err != nil {
			t.Errorf("dashboard query %q: %v", e, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				used[vs.Name] = true
			}
			return nil
		})
	}
	for name := range used {
		if strings.HasPrefix(name, "gpufrac:") && !records[name] {
			t.Errorf("dashboard reads %s, which no recording rule defines", name)
		}
	}

	for _, o := range chartObjects(t, chartTemplate(t, "dash", "monitoring", "all-on")) {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		if o.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard=1", o.GetLabels())
		}
		data, _, _ := unstructured.NestedString(o.Object, "data", "gpufrac.json")
		var d map[string]any
		if err := json.Unmarshal([]byte(data), &d); err != nil || d["uid"] != "gpufrac-overview" {
			t.Errorf("dashboard ConfigMap data: uid %v, %v", d["uid"], err)
		}
		return
	}
	t.Error("no dashboard ConfigMap rendered with monitoring.grafanaDashboard.enabled")
}

package e2e

// Chart values: the schema rejects what the binaries reject, and every value is documented.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/admission"
	"github.com/gpufrac/gpufrac/backend"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartSchema checks that the values schema rejects what the binaries would reject at
// start. `helm lint --strict` with each CI values file runs in `make chart-lint`.
func TestChartSchema(t *testing.T) {
	for _, bad := range [][]string{
		{"admission.webhook.timeoutSeconds=5"},
		{"recommender.metricSource=prom"},
		{"admission.certificates.mode=vault"},
		{"recommender.replicaz=3"},
		{"recommender.leaderElection=false"}, // two replicas need leader election
	} {
		args := []string{"template", "x", chartDir()}
		for _, s := range bad {
			args = append(args, "--set", s)
		}
		if _, err := chartExec(nil, helmBin(t), args...); err == nil {
			t.Errorf("helm template --set %v: accepted, want an error", bad)
		}
	}
}

// TestChartGPUMemoryAsTheBinaries checks that the chart takes a GPU memory (gpuMemory,
// agent.simulate.gpuMemory) exactly when the binaries' --gpu-memory parser
// (backend.ParseGPUMemory) does: a value the chart accepts must not stop the pods at
// start, and one they take must not be refused by the chart.
func TestChartGPUMemoryAsTheBinaries(t *testing.T) {
	values := []string{
		"80Gi", "141Gi", "81559Mi", "80GiB", "81559MiB", "0.5Ti", "1Gi", "1024Mi", "1048576Ki", "85899345920", "80e9", "1073741824",
		"80G", "80GB", "141G", "81559M", "81559MB", "83886080k", "1T", "1TB", "8E", // decimal units
		"80", "1023Mi", "0.5Gi", "1073741823", "80Mi", // under 1Gi: a unit left off
		"80gi", "80 Gi", "eighty", "80B", "Gi", // malformed
	}
	for _, key := range []string{"gpuMemory", "agent.simulate.gpuMemory"} {
		for _, v := range values {
			_, perr := backend.ParseGPUMemory(v)
			_, err := chartExec(nil, helmBin(t), "template", "x", chartDir(), "--set", "agent.simulate.enabled=true", "--set-string", key+"="+v)
			switch {
			case perr == nil && err != nil:
				t.Errorf("%s=%q: the binaries take it, the chart refuses it: %v", key, v, err)
			case perr != nil && err == nil:
				t.Errorf("%s=%q: the chart accepts it, the binaries refuse it (%v)", key, v, perr)
			case err != nil && !strings.Contains(err.Error(), v):
				t.Errorf("%s=%q: the chart's error does not name the value: %v", key, v, err)
			}
		}
	}
}

// TestChartWebhookTimeoutAsTheBinary checks admission.webhook.timeoutSeconds against the
// admission binary's own check (admission.Config.CheckTimeout: --owner-wait plus the
// longer backend timeout plus 250ms must fit): with the waits at their defaults (1.45s)
// the chart refuses exactly the timeouts the binary refuses, so 1 is not installed as a
// webhook that never starts; a timeout the chart refuses is never one the binary takes
// with the same flags.
func TestChartWebhookTimeoutAsTheBinary(t *testing.T) {
	argSets := [][]string{
		nil,
		{"--owner-wait=100ms"},
		{"--dra-timeout=300ms"},
		{"--device-plugin-timeout=300ms"},
		{"--dra-timeout=300ms", "--device-plugin-timeout=300ms"},
		{"-dra-timeout", "500ms", "--device-plugin-timeout=500ms"},
		{"--dra-timeout=900ms", "--device-plugin-timeout=900ms"}, // too long: the binary's to say
		{"--owner-wait=2s"},
	}
	for _, timeout := range []int{1, 2, 3} {
		for _, args := range argSets {
			var cfg admission.Config
			fs := flag.NewFlagSet("admission", flag.ContinueOnError)
			cfg.AddFlags(fs)
			if err := fs.Parse(args); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			binErr := cfg.WithDefaults().CheckTimeout(int32(timeout))
			set := []string{fmt.Sprintf("admission.webhook.timeoutSeconds=%d", timeout)}
			for i, a := range args {
				set = append(set, fmt.Sprintf("admission.configArgs[%d]=%s", i, a))
			}
			helmArgs := []string{"template", "x", chartDir()}
			for _, s := range set {
				helmArgs = append(helmArgs, "--set-string", s)
			}
			helmArgs[len(helmArgs)-len(set)*2] = "--set" // the timeout is an integer
			_, chartErr := chartExec(nil, helmBin(t), helmArgs...)
			switch {
			case chartErr != nil && binErr == nil:
				t.Errorf("timeoutSeconds %d, configArgs %v: the binary starts, the chart refuses it: %v", timeout, args, chartErr)
			case chartErr == nil && binErr != nil && len(args) == 0:
				t.Errorf("timeoutSeconds %d with the default waits: the chart accepts it, the webhook refuses to start (%v)", timeout, binErr)
			case chartErr != nil && !strings.Contains(chartErr.Error(), "admission.webhook.timeoutSeconds"):
				t.Errorf("timeoutSeconds %d, configArgs %v: the chart's error does not name the value: %v", timeout, args, chartErr)
			}
		}
	}
	// The flags may come through the webhook's own extraArgs too.
	if _, err := chartExec(nil, helmBin(t), "template", "x", chartDir(), "--set", "admission.webhook.timeoutSeconds=1",
		"--set", "admission.extraArgs={--dra-timeout=300ms,--device-plugin-timeout=300ms}"); err != nil {
		t.Errorf("timeoutSeconds 1 with the backend timeouts lowered in admission.extraArgs: %v", err)
	}
}

// TestChartStartValuesAsTheBinaries checks that helm install refuses the values a binary
// refuses at start (a period of 0, --eviction-rate 0, an agent --interval under 1s, a
// self-managed certificate lifetime of at most 3 x --cert-check-interval), naming the
// value, instead of installing pods that crash-loop; and that the values next to them
// the binaries take are still installed.
func TestChartStartValuesAsTheBinaries(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string // the value the chart's error names; empty: installed
	}{
		{[]string{"recommender.interval=0s"}, "recommender.interval"},
		{[]string{"recommender.interval=0h0m"}, "recommender.interval"},
		{[]string{"recommender.historyLength=0.0h"}, "recommender.historyLength"},
		{[]string{"recommender.checkpoints.interval=0s"}, "recommender.checkpoints.interval"},
		{[]string{"recommender.sharingPlanner.interval=0ms"}, "recommender.sharingPlanner.interval"},
		{[]string{"prometheus.timeout=0s"}, "prometheus.timeout"},
		{[]string{"updater.interval=0s"}, "updater.interval"},
		{[]string{"updater.evictionRate=0"}, "updater.evictionRate"},
		{[]string{"updater.evictionRate=0.0"}, "updater.evictionRate"},
		{[]string{"agent.enabled=true", "agent.interval=500ms"}, "agent.interval"},
		{[]string{"admission.certificates.caValidity=3m"}, "admission.certificates.caValidity"},
		{[]string{"admission.certificates.certValidity=0s"}, "admission.certificates.certValidity"},
		{[]string{"admission.certificates.certValidity=2h", "admission.extraArgs[0]=--cert-check-interval=1h"}, "admission.certificates.certValidity"},
		{[]string{"recommender.interval=30s", "recommender.historyLength=1h", "prometheus.timeout=1m30s"}, ""},
		{[]string{"updater.interval=1m", "updater.evictionRate=-1", "updater.recommenderLeaseMaxAge=0s"}, ""},
		{[]string{"updater.evictionRate=0.05"}, ""},
		{[]string{"agent.enabled=true", "agent.interval=0.5m"}, ""},
		{[]string{"admission.certificates.certValidity=3m1s"}, ""},
		{[]string{"admission.certificates.certValidity=4h", "admission.extraArgs[0]=--cert-check-interval=1h"}, ""},
		// Not rendered, so not refused: a disabled component, cert-manager's certificate.
		{[]string{"recommender.enabled=false", "recommender.interval=0s"}, ""},
		{[]string{"updater.enabled=false", "updater.evictionRate=0"}, ""},
		{[]string{"admission.certificates.mode=cert-manager", "admission.certificates.certValidity=1m"}, ""},
	} {
		args := []string{"template", "x", chartDir()}
		for _, s := range c.set {
			flag := "--set-string"
			if strings.HasSuffix(s, "=true") || strings.HasSuffix(s, "=false") {
				flag = "--set"
			}
			args = append(args, flag, s)
		}
		_, err := chartExec(nil, helmBin(t), args...)
		switch {
		case c.want != "" && err == nil:
			t.Errorf("%v: installed, but the binary refuses it at start", c.set)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%v: the chart's error does not name %s: %v", c.set, c.want, err)
		case c.want == "" && err != nil:
			t.Errorf("%v: refused, but the binaries take it: %v", c.set, err)
		}
	}
}

// TestChartPortsDistinct checks that helm install refuses two of one container's
// listening ports set to the same number, naming both values, instead of installing pods
// whose second server fails to bind (address already in use) and crash-loop.
func TestChartPortsDistinct(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want []string // the values the chart's error names; none: installed
	}{
		{[]string{"recommender.metricsPort=8081"}, []string{"recommender.metricsPort", "recommender.probePort"}},
		{[]string{"updater.probePort=8080"}, []string{"updater.metricsPort", "updater.probePort"}},
		{[]string{"admission.metricsPort=8081"}, []string{"admission.metricsPort", "admission.probePort"}},
		{[]string{"admission.webhook.port=8080"}, []string{"admission.metricsPort", "admission.webhook.port"}},
		{[]string{"admission.probePort=9443"}, []string{"admission.probePort", "admission.webhook.port"}},
		{[]string{"admission.webhook.port=8081", "admission.probePort=9443"}, nil},
		{[]string{"recommender.metricsPort=9090", "updater.metricsPort=9090"}, nil}, // two pods
		{[]string{"updater.enabled=false", "updater.probePort=8080"}, nil},
	} {
		args := []string{"template", "x", chartDir()}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		_, err := chartExec(nil, helmBin(t), args...)
		switch {
		case c.want != nil && err == nil:
			t.Errorf("%v: installed, but its container cannot bind both ports", c.set)
		case c.want == nil && err != nil:
			t.Errorf("%v: refused: %v", c.set, err)
		case err != nil:
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: the chart's error does not name %s: %v", c.set, w, err)
				}
			}
		}
	}
}

// TestChartDisruptionBudgetsLetOnePodGo checks that helm install refuses a
// PodDisruptionBudget that lets no pod of its component be evicted (admission
// minAvailable at its replicas, a percentage rounded up to pods as the disruption
// controller does; recommender or updater maxUnavailable 0), naming the value: every
// node drain and cluster upgrade would wait on it for ever.
func TestChartDisruptionBudgetsLetOnePodGo(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string // the value the chart's error names; empty: installed
	}{
		{[]string{"admission.podDisruptionBudget.minAvailable=2"}, "admission.podDisruptionBudget.minAvailable"},
		{[]string{"admission.podDisruptionBudget.minAvailable=100%"}, "admission.podDisruptionBudget.minAvailable"},
		{[]string{"admission.podDisruptionBudget.minAvailable=60%"}, "admission.podDisruptionBudget.minAvailable"}, // 2 of 2
		{[]string{"recommender.podDisruptionBudget.maxUnavailable=0"}, "recommender.podDisruptionBudget.maxUnavailable"},
		{[]string{"updater.podDisruptionBudget.maxUnavailable=0%"}, "updater.podDisruptionBudget.maxUnavailable"},
		{[]string{"admission.podDisruptionBudget.minAvailable=50%"}, ""},
		{[]string{"admission.podDisruptionBudget.minAvailable=60%", "admission.replicas=3"}, ""},
		{[]string{"admission.podDisruptionBudget.minAvailable=2", "admission.replicas=3"}, ""},
		{[]string{"updater.podDisruptionBudget.maxUnavailable=10%"}, ""},
		// No budget rendered: one replica, or the budget turned off.
		{[]string{"updater.podDisruptionBudget.maxUnavailable=0", "updater.replicas=1"}, ""},
		{[]string{"recommender.podDisruptionBudget.maxUnavailable=0", "recommender.podDisruptionBudget.enabled=false"}, ""},
	} {
		args := []string{"template", "x", chartDir()}
		for _, s := range c.set {
			flag := "--set"
			if strings.HasSuffix(s, "%") {
				flag = "--set-string"
			}
			args = append(args, flag, s)
		}
		_, err := chartExec(nil, helmBin(t), args...)
		switch {
		case c.want != "" && err == nil:
			t.Errorf("%v: installed, but the budget lets no pod be evicted", c.set)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%v: the chart's error does not name %s: %v", c.set, c.want, err)
		case c.want == "" && err != nil:
			t.Errorf("%v: refused: %v", c.set, err)
		}
	}
}

// TestChartGoMemLimit checks that each Deployment's container with a memory limit runs
// with GOMEMLIMIT at that limit, so the Go heap of the webhook's and the updater's
// cluster-wide informer caches (and the recommender's history bootstrap) is collected
// before it reaches the OOM killer, and that a GOMEMLIMIT of a component's extraEnv is
// the only one.
func TestChartGoMemLimit(t *testing.T) {
	memLimits := func(t *testing.T, set ...string) map[string][]map[string]any {
		t.Helper()
		got := map[string][]map[string]any{}
		for _, o := range chartObjects(t, chartTemplate(t, "x", "gpufrac-system", "default", set...)) {
			if o.GetKind() != "Deployment" {
				continue
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
				for _, e := range env {
					if e := e.(map[string]any); e["name"] == "GOMEMLIMIT" {
						got[o.GetName()] = append(got[o.GetName()], e)
					}
				}
			}
		}
		return got
	}
	got := memLimits(t)
	for _, c := range []string{"recommender", "updater", "admission"} {
		name := "x-gpufrac-" + c
		if len(got[name]) != 1 {
			t.Errorf("%s: %d GOMEMLIMIT variables, want 1 (its memory limit): %v", name, len(got[name]), got[name])
			continue
		}
		if ref, _, _ := unstructured.NestedString(got[name][0], "valueFrom", "resourceFieldRef", "resource"); ref != "limits.memory" {
			t.Errorf("%s: GOMEMLIMIT %v, want the container's limits.memory", name, got[name][0])
		}
	}
	got = memLimits(t, "admission.resources.limits=null", "updater.extraEnv[0].name=GOMEMLIMIT", "updater.extraEnv[0].value=400MiB")
	if n := len(got["x-gpufrac-admission"]); n != 0 {
		t.Errorf("admission without a memory limit: %d GOMEMLIMIT variables, want none", n)
	}
	if u := got["x-gpufrac-updater"]; len(u) != 1 || u[0]["value"] != "400MiB" {
		t.Errorf("updater with GOMEMLIMIT in extraEnv: %v, want only that one", u)
	}
}

// TestChartValuesDocumented checks that every key of values.yaml is documented there (a
// "# -- " comment right above it, or a section whose keys all are) and listed in
// docs/install.md.
func TestChartValuesDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	install, err := os.ReadFile(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	type frame struct {
		indent int
		key    string
	}
	keyRe := regexp.MustCompile(`^(\s*)([A-Za-z_][\w.-]*):(.*)$`)
	var (
		stack      []frame
		comments   []string
		skipIndent = -1
		documented []string
		undoc      []string
		sections   = map[string]bool{}
	)
	for _, line := range strings.Split(string(raw), "\n") {
		s := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(s, "#"):
			comments = append(comments, s)
			continue
		case s == "":
			comments = nil
			continue
		}
		m := keyRe.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(s, "-") {
			comments = nil
			continue
		}
		indent := len(m[1])
		if skipIndent >= 0 && indent > skipIndent {
			comments = nil
			continue
		}
		skipIndent = -1
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, frame{indent, m[2]})
		var parts []string
		for _, f := range stack {
			parts = append(parts, f.key)
		}
		path := strings.Join(parts, ".")
		doc := false
		for _, c := range comments {
			if strings.HasPrefix(c, "# -- ") {
				doc = true
			}
		}
		comments = nil
		switch {
		case doc:
			documented = append(documented, path)
			skipIndent = indent
		case strings.TrimSpace(m[3]) == "":
			sections[path] = true // a section: its keys must be documented
		default:
			undoc = append(undoc, path)
		}
	}
	for _, k := range undoc {
		t.Errorf("values.yaml: %s has no \"# -- \" description", k)
	}
	for _, k := range documented {
		if !bytes.Contains(install, []byte("`"+k+"`")) {
			t.Errorf("docs/install.md does not list value %s", k)
		}
	}
	if len(documented) < 100 {
		t.Errorf("only %d documented values found", len(documented))
	}
}

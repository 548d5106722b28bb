package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// The chart tests render charts/gpufrac with bin/helm (built from tools/helm when
// missing), let the real test API server validate every object with a server-side dry
// run (the Prometheus Operator and cert-manager CRDs of e2e/testdata/crds installed), and
// install the rendered RBAC to check each component's permissions with
// `kubectl auth can-i`. TestChartRules checks the alert runbooks, the rendered rules and
// the Grafana dashboard's queries. helm lint and promtool's tests of rules/ run once, in
// `make verify`, not here.

// chartValueSets are the CI values files of the chart.
var chartValueSets = []string{"default", "all-on", "simulate"}

// helmLDFlags mirror the Makefile's $(BIN)/helm recipe.
const helmLDFlags = "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0 -X helm.sh/helm/v3/internal/version.gitTreeState=clean " +
	"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 " +
	"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37"

var (
	helmOnce sync.Once
	helmErr  error
	crdsOnce sync.Once
	crdsErr  error
)

func chartDir() string { return filepath.Join(repoRoot, "charts", "gpufrac") }

// helmBin returns bin/helm, building it from the tools/helm module first if it is missing.
func helmBin(t testing.TB) string {
	t.Helper()
	path := filepath.Join(repoRoot, "bin", "helm")
	helmOnce.Do(func() {
		if _, err := os.Stat(path); err == nil {
			return
		}
		t.Logf("building %s from tools/helm (first time only)", path)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", helmLDFlags, "-o", path, "helm.sh/helm/v3/cmd/helm")
		cmd.Dir = filepath.Join(repoRoot, "tools", "helm")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("building helm: %v\n%s", err, out)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return path
}

// chartExec runs a command with stdin and returns its stdout; the error carries stderr.
func chartExec(stdin []byte, name string, args ...string) (string, error) {
	stdout, _, err := chartExec2(stdin, name, args...)
	return stdout, err
}

// chartExec2 is chartExec returning stderr (warnings) too.
func chartExec2(stdin []byte, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = repoRoot
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// kubectl runs kubectl against the test cluster as its admin.
func chartKubectl(stdin []byte, args ...string) (string, error) {
	return chartExec(stdin, "kubectl", append([]string{"--kubeconfig=" + testCluster.Kubeconfig}, args...)...)
}

// chartTemplate renders the chart with one of its ci/ values files plus --set flags.
func chartTemplate(t testing.TB, release, ns, values string, set ...string) []byte {
	t.Helper()
	args := []string{"template", release, chartDir(), "--namespace", ns,
		"-f", filepath.Join(chartDir(), "ci", values+"-values.yaml")}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := chartExec(nil, helmBin(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

// chartObjects splits rendered manifests into objects.
func chartObjects(t testing.TB, manifests []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decoding rendered manifests: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// chartYAML joins objects back into one multi-document stream.
func chartYAML(t testing.TB, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

// installChartCRDs installs the third-party CRDs the chart's optional objects need.
func installChartCRDs(t testing.TB) {
	t.Helper()
	crdsOnce.Do(func() {
		dir := filepath.Join(repoRoot, "e2e", "testdata", "crds")
		if _, crdsErr = chartKubectl(nil, "apply", "--server-side", "--field-manager=e2e", "-f", dir); crdsErr != nil {
			return
		}
		_, crdsErr = chartKubectl(nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", dir)
	})
	if crdsErr != nil {
		t.Fatal(crdsErr)
	}
}

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

// TestChartDryRun applies every rendered object of each CI values set with a
// server-side dry run, so the API server validates them (strict field validation, CEL
// of the webhook matchConditions, CRD schemas, Pod Security "restricted" warnings), and
// checks the webhook configurations equal what the admission binary registers.
func TestChartDryRun(t *testing.T) {
	installChartCRDs(t)
	for _, v := range chartValueSets {
		t.Run(v, func(t *testing.T) {
			ns, release := "chart-"+v, "gf-"+v
			createNamespace(t, ns)
			// Pod Security admission warns about every pod template that would violate
			// the "restricted" profile.
			if _, err := chartKubectl(nil, "label", "namespace", ns, "pod-security.kubernetes.io/warn=restricted"); err != nil {
				t.Fatal(err)
			}
			rendered := chartTemplate(t, release, ns, v)
			objs := chartObjects(t, rendered)
			out, warnings, err := chartExec2(rendered, "kubectl", "--kubeconfig="+testCluster.Kubeconfig, "apply", "--server-side",
				"--dry-run=server", "--validate=strict", "--field-manager=helm", "-o", "json", "-f", "-")
			if err != nil {
				t.Fatal(err)
			}
			// Only the real agent (hostPID, host /proc, root) may break "restricted".
			for _, w := range strings.Split(warnings, "\n") {
				if strings.Contains(w, "would violate PodSecurity") && !(v == "all-on" && strings.Contains(w, "hostPID")) {
					t.Errorf("Pod Security: %s", w)
				}
			}
			if v == "all-on" && !strings.Contains(warnings, "would violate PodSecurity") {
				t.Errorf("the real agent's DaemonSet passes Pod Security \"restricted\" (no hostPID?); warnings: %q", warnings)
			}
			var list struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatalf("decoding kubectl output: %v", err)
			}
			if len(list.Items) == 0 && len(objs) == 1 {
				list.Items = []json.RawMessage{json.RawMessage(out)}
			}
			if len(list.Items) != len(objs) {
				t.Fatalf("dry run returned %d objects, rendered %d", len(list.Items), len(objs))
			}
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
			}
			t.Logf("%s: %d objects validated by the API server: %v", v, len(objs), kinds)

			cfg := chartValuesFile(t, v)
			checkChartWebhooks(t, list.Items, ns, release, cfg)
		})
	}
}

// chartValues is the part of a values file the webhook comparison needs.
type chartValues struct {
	Admission struct {
		Webhook struct {
			ExcludeNamespaces       []string          `json:"excludeNamespaces"`
			ValidatingFailurePolicy string            `json:"validatingFailurePolicy"`
			NamespaceSelector       map[string]string `json:"namespaceSelector"`
		} `json:"webhook"`
		GPUResourcePrefix string `json:"gpuResourcePrefix"`
	} `json:"admission"`
}

func chartValuesFile(t testing.TB, v string) chartValues {
	t.Helper()
	var c chartValues
	for _, f := range []string{filepath.Join(chartDir(), "values.yaml"), filepath.Join(chartDir(), "ci", v+"-values.yaml")} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return c
}

// checkChartWebhooks compares the server-defaulted webhook configurations of the dry
// run with admission.Registration's desired ones: the admission binary updates the
// configurations whenever they differ, so any difference would make it rewrite what
// Helm installed on every start.
func checkChartWebhooks(t *testing.T, items []json.RawMessage, ns, release string, v chartValues) {
	t.Helper()
	reg := admission.Registration{
		Name:                    release + "-gpufrac-admission",
		Namespace:               ns,
		ExcludeNamespaces:       v.Admission.Webhook.ExcludeNamespaces,
		Service:                 &admission.ServiceReference{Namespace: ns, Name: release + "-gpufrac-admission", Port: 443},
		TimeoutSeconds:          3,
		ValidatingFailurePolicy: admissionregistrationv1.FailurePolicyType(v.Admission.Webhook.ValidatingFailurePolicy),
		GPUResourcePrefix:       v.Admission.GPUResourcePrefix,
	}
	var sel []string
	for k, val := range v.Admission.Webhook.NamespaceSelector {
		sel = append(sel, k+"="+val)
	}
	sort.Strings(sel)
	reg.NamespaceLabelSelector = strings.Join(sel, ",")
	if err := reg.Validate(); err != nil {
		t.Fatal(err)
	}
	var seen int
	for _, raw := range items {
		var meta struct{ Kind string }
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			seen++
			var got admissionregistrationv1.MutatingWebhookConfiguration
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if want := reg.Mutating(nil); !equality.Semantic.DeepEqual(got.Webhooks, want.Webhooks) {
				t.Errorf("MutatingWebhookConfiguration differs from the admission binary's:\nchart: %s\nbinary: %s", chartJSON(got.Webhooks), chartJSON(want.Webhooks))
			}
			if got.Webhooks[0].FailurePolicy == nil || *got.Webhooks[0].FailurePolicy != admissionregistrationv1.Ignore ||
				got.Webhooks[0].TimeoutSeconds == nil || *got.Webhooks[0].TimeoutSeconds != 3 {
				t.Errorf("pod webhook: failurePolicy %v timeoutSeconds %v, want Ignore and 3", got.Webhooks[0].FailurePolicy, got.Webhooks[0].TimeoutSeconds)
			}
			excluded := got.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values
			if !chartContains(excluded, "kube-system") || !chartContains(excluded, ns) {
				t.Errorf("pod webhook excludes namespaces %v, want kube-system and %s", excluded, ns)
			}
		case "ValidatingWebhookConfiguration":
			seen++
			var got admissionregistrationv1.ValidatingWebhookConfiguration
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if want := reg.Validating(nil); !equality.Semantic.DeepEqual(got.Webhooks, want.Webhooks) {
				t.Errorf("ValidatingWebhookConfiguration differs from the admission binary's:\nchart: %s\nbinary: %s", chartJSON(got.Webhooks), chartJSON(want.Webhooks))
			}
		}
	}
	if seen != 2 {
		t.Errorf("found %d webhook configurations, want 2", seen)
	}
}

func chartJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func chartContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// canI is one `kubectl auth can-i` expectation.
type canI struct {
	verb, resource string // resource may be resource/name
	sub            string // subresource
	ns             string // "" = all namespaces (-A)
	want           bool
}

func (c canI) String() string {
	s := c.verb + " " + c.resource
	if c.sub != "" {
		s += " (" + c.sub + ")"
	}
	if c.ns == "" {
		return s + " in all namespaces"
	}
	return s + " in " + c.ns
}

// chartCanI asks the API server whether user may do c.
func chartCanI(user string, c canI) (bool, error) {
	args := []string{"auth", "can-i", c.verb, c.resource, "--as=" + user}
	if c.sub != "" {
		args = append(args, "--subresource="+c.sub)
	}
	if c.ns == "" {
		args = append(args, "--all-namespaces")
	} else {
		args = append(args, "--namespace="+c.ns)
	}
	out, err := chartKubectl(nil, args...)
	switch strings.TrimSpace(out) {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, fmt.Errorf("kubectl auth can-i: %q: %v", out, err)
}

// applyChartRBAC installs the rendered service accounts, roles and bindings (for real)
// and removes the cluster-scoped ones when the test ends.
func applyChartRBAC(t *testing.T, rendered []byte) {
	t.Helper()
	var rbac []*unstructured.Unstructured
	for _, o := range chartObjects(t, rendered) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	doc := chartYAML(t, rbac)
	if _, err := chartKubectl(doc, "apply", "--server-side", "--field-manager=helm", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = chartKubectl(doc, "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
}

// checkCanI checks every expectation of one user; allowed ones are retried for a few
// seconds while the authorizer's caches catch up.
func checkCanI(t *testing.T, user string, checks []canI) {
	t.Helper()
	for _, c := range checks {
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, err := chartCanI(user, c)
			if err != nil {
				t.Errorf("%s: %s: %v", user, c, err)
				break
			}
			if got == c.want {
				break
			}
			if !c.want || time.Now().After(deadline) {
				t.Errorf("%s may %s: %v, want %v", user, c, got, c.want)
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
}

// TestChartRBAC installs the rendered RBAC of two releases (self-managed certificate with
// pre-created objects, and cert-manager without) and checks what each component's
// service account may and may not do.
func TestChartRBAC(t *testing.T) {
	const (
		ns     = "chart-rbac"
		other  = "chart-rbac-other"
		nsCM   = "chart-rbac-cm"
		secret = "rbac-gpufrac-admission-tls"
	)
	// kubectl auth can-i resolves resource names through discovery, so the kinds below
	// must be served: the Prometheus Operator CRDs stand in for scalable custom resources.
	installChartCRDs(t)
	createNamespace(t, ns)
	createNamespace(t, other)
	createNamespace(t, nsCM)
	applyChartRBAC(t, chartTemplate(t, "rbac", ns, "default", "agent.enabled=true",
		"rbac.scaleTargets[0].apiGroups[0]=monitoring.coreos.com", "rbac.scaleTargets[0].resources[0]=podmonitors"))
	applyChartRBAC(t, chartTemplate(t, "rbaccm", nsCM, "default",
		"admission.certificates.mode=cert-manager", "rbac.preCreateObjects=false", "rbac.aggregateToDefaultRoles=false"))
	sa := func(namespace, name string) string { return "system:serviceaccount:" + namespace + ":" + name }

	// Nobody may read Secrets cluster-wide, or create, delete or change pods beyond its role.
	common := func(ns string) []canI {
		return []canI{
			{"get", "secrets", "", "", false},
			{"list", "secrets", "", "", false},
			{"list", "secrets", "", ns, false},
			{"get", "secrets/other-secret", "", ns, false},
			{"create", "secrets", "", ns, false},
			{"create", "pods", "", other, false},
			{"delete", "pods", "", other, false},
			{"update", "deployments", "", other, false},
			{"create", "mutatingwebhookconfigurations", "", "", false},
			{"update", "mutatingwebhookconfigurations/someone-elses", "", "", false},
			{"create", "clusterrolebindings", "", "", false},
			{"get", "configmaps", "", other, false},
			{"create", "serviceaccounts", "token", ns, false},
		}
	}

	t.Run("recommender", func(t *testing.T) {
		checkCanI(t, sa(ns, "rbac-gpufrac-recommender"), append([]canI{
			{"list", "pods", "", "", true},
			{"watch", "pods", "", "", true},
			{"get", "deployments", "", other, true},
			{"list", "replicasets", "", "", true},
			{"watch", "statefulsets", "", "", true},
			{"list", "daemonsets", "", "", true},
			{"list", "jobs", "", "", true},
			{"list", "cronjobs", "", "", true},
			{"get", "deployments", "scale", other, true},
			{"get", "servicemonitors.monitoring.coreos.com", "scale", other, true}, // any kind's scale subresource
			{"get", "podmonitors.monitoring.coreos.com", "", other, true},          // rbac.scaleTargets
			{"list", "gpufractionautoscalers", "", "", true},
			{"create", "gpufractionrecommendations", "", other, true},
			{"update", "gpufractionrecommendations", "", other, true},
			{"patch", "gpufractionrecommendations", "status", other, true},
			{"patch", "gpufractionautoscalers", "status", other, true},
			{"create", "events", "", other, true},
			{"create", "events.events.k8s.io", "", other, true},
			{"get", "leases/gpufrac-recommender.autoscaling.gpufrac.io", "", ns, true},
			{"update", "leases/gpufrac-recommender.autoscaling.gpufrac.io", "", ns, true},
			// Not beyond its role:
			{"update", "gpufractionautoscalers", "", other, false},
			{"delete", "gpufractionautoscalers", "", other, false},
			{"patch", "pods", "", other, false},
			{"create", "pods", "eviction", other, false},
			{"get", "servicemonitors.monitoring.coreos.com", "", other, false},
			{"create", "leases", "", ns, false},
			{"update", "leases/gpufrac-admission-status", "", ns, false},
		}, common(ns)...))
	})
	t.Run("updater", func(t *testing.T) {
		checkCanI(t, sa(ns, "rbac-gpufrac-updater"), append([]canI{
			{"create", "pods", "eviction", other, true},
			{"patch", "pods", "", other, true},
			{"patch", "pods", "resize", other, true},
			{"list", "pods", "", "", true},
			{"list", "poddisruptionbudgets", "", "", true},
			{"list", "gpufractionautoscalers", "", "", true},
			{"watch", "gpufractionrecommendations", "", "", true},
			{"list", "replicasets", "", "", true},
			{"list", "horizontalpodautoscalers", "", "", true},
			{"get", "leases/gpufrac-admission-status", "", ns, true},
			{"update", "leases/gpufrac-updater.autoscaling.gpufrac.io", "", ns, true},
			{"create", "events", "", other, true},
			// Not beyond its role: evictions only (never delete), no writes to recommendations.
			{"update", "gpufractionrecommendations", "", other, false},
			{"update", "leases/gpufrac-admission-status", "", ns, false},
			{"delete", "poddisruptionbudgets", "", other, false},
			{"create", "leases", "", ns, false},
		}, common(ns)...))
	})
	t.Run("admission", func(t *testing.T) {
		checkCanI(t, sa(ns, "rbac-gpufrac-admission"), append([]canI{
			{"list", "gpufractionautoscalers", "", "", true},
			{"watch", "gpufractionrecommendations", "", "", true},
			{"watch", "replicasets", "", "", true},
			{"list", "jobs", "", "", true},
			{"get", "secrets/" + secret, "", ns, true},
			{"update", "secrets/" + secret, "", ns, true},
			{"get", "mutatingwebhookconfigurations/rbac-gpufrac-admission", "", "", true},
			{"update", "mutatingwebhookconfigurations/rbac-gpufrac-admission", "", "", true},
			{"update", "validatingwebhookconfigurations/rbac-gpufrac-admission", "", "", true},
			{"update", "leases/gpufrac-admission-status", "", ns, true},
			{"create", "events", "", other, true},
			// Not beyond its role:
			{"get", "secrets/" + secret, "", other, false},
			{"delete", "mutatingwebhookconfigurations/rbac-gpufrac-admission", "", "", false},
			{"update", "validatingwebhookconfigurations/someone-elses", "", "", false},
			{"patch", "pods", "", other, false},
			{"update", "gpufractionrecommendations", "", other, false},
			{"list", "pods", "", "", false},
			{"create", "leases", "", ns, false},
		}, common(ns)...))
	})
	t.Run("agent", func(t *testing.T) {
		checkCanI(t, sa(ns, "rbac-gpufrac-agent"), append([]canI{
			{"list", "pods", "", "", true},
			{"watch", "pods", "", "", true},
			{"patch", "pods", "", other, false},
			{"list", "nodes", "", "", false},
			{"list", "deployments", "", "", false},
			{"list", "gpufractionautoscalers", "", "", false},
		}, common(ns)...))
	})
	t.Run("admission-cert-manager", func(t *testing.T) {
		// With cert-manager the webhook needs no Secret and no webhook configuration
		// access at all (the kubelet mounts the Secret, cert-manager injects the CA);
		// without pre-created objects it may create Leases, still never Secrets.
		checkCanI(t, sa(nsCM, "rbaccm-gpufrac-admission"), append([]canI{
			{"list", "gpufractionautoscalers", "", "", true},
			{"create", "leases", "", nsCM, true},
			{"update", "leases/gpufrac-admission-status", "", nsCM, true},
			{"get", "secrets/rbaccm-gpufrac-admission-tls", "", nsCM, false},
			{"update", "mutatingwebhookconfigurations/rbaccm-gpufrac-admission", "", "", false},
		}, common(nsCM)...))
	})
	t.Run("users", func(t *testing.T) {
		// kubectl UX: namespace viewers see autoscalers and recommendations, editors edit
		// autoscalers; nobody but the recommender writes recommendations.
		for _, rb := range []struct{ user, role string }{{"alice", "view"}, {"bob", "edit"}} {
			doc := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[1]s-%[2]s, namespace: %[3]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[2]s}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: %[1]s}]
`, rb.user, rb.role, other)
			if _, err := chartKubectl([]byte(doc), "apply", "--server-side", "--field-manager=e2e", "-f", "-"); err != nil {
				t.Fatal(err)
			}
		}
		checkCanI(t, "alice", []canI{
			{"list", "gpufractionautoscalers", "", other, true},
			{"get", "gpufractionrecommendations", "", other, true},
			{"create", "gpufractionautoscalers", "", other, false},
		})
		checkCanI(t, "bob", []canI{
			{"create", "gpufractionautoscalers", "", other, true},
			{"list", "gpufractionrecommendations", "", other, true},
			{"update", "gpufractionrecommendations", "", other, false},
			{"patch", "gpufractionrecommendations", "status", other, false},
		})
	})
}

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
	for _, c := range []struct {
		values string
		set    []string
		absent []string
	}{
		{"all-on", nil, nil},
		{"simulate", []string{"updater.enabled=false"}, []string{"GPUFracUpdaterDown", "GPUFracUpdaterBlocked", "GPUFracMetricSamplesDropped"}},
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

// TestChartFlags runs each binary with the arguments the chart renders for its
// container, plus -h: the flag package then rejects any flag the binary does not have or
// a value it cannot parse (exit 2), and exits 0 once all of them are accepted.
func TestChartFlags(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range chartValueSets {
		for _, o := range chartObjects(t, chartTemplate(t, "flags", "gpufrac-system", v)) {
			if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
				continue
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				c := c.(map[string]any)
				name := c["name"].(string)
				var args []string
				for _, a := range c["args"].([]any) {
					args = append(args, a.(string))
				}
				bin := filepath.Join(repoRoot, "bin", name)
				if _, err := os.Stat(bin); err != nil {
					if src, _ := filepath.Glob(filepath.Join(repoRoot, "cmd", name, "*.go")); len(src) == 0 {
						t.Logf("%s (%s values): no cmd/%s yet, flags not checked", o.GetName(), v, name)
						continue
					}
					t.Fatalf("bin/%s missing", name)
				}
				seen[name] = true
				if out, err := chartExec(nil, bin, append(args, "-h")...); err != nil {
					t.Errorf("%s (%s values) rejects the chart's arguments %q: %v\n%s", name, v, args, err, out)
				}
			}
		}
	}
	for _, name := range []string{"recommender", "admission", "agent"} {
		if !seen[name] {
			t.Errorf("no %s container checked", name)
		}
	}
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig that acts as user.
func impersonatingKubeconfig(t *testing.T, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(testCluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	// The copy really acts as user: it may not read Secrets, unlike the admin.
	if out, _ := chartExec(nil, "kubectl", "--kubeconfig="+path, "auth", "can-i", "list", "secrets", "--all-namespaces"); strings.TrimSpace(out) != "no" {
		t.Fatalf("kubeconfig impersonating %s may list Secrets (%q)", user, out)
	}
	return path
}

// chartContainerArgs returns the args of the first container of the named workload,
// without the flags whose names are in drop.
func chartContainerArgs(t *testing.T, objs []*unstructured.Unstructured, name string, drop ...string) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetName() != name || (o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet") {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		var args []string
	next:
		for _, a := range containers[0].(map[string]any)["args"].([]any) {
			s := a.(string)
			for _, d := range drop {
				if strings.HasPrefix(s, "--"+d+"=") || s == "--"+d {
					continue next
				}
			}
			args = append(args, s)
		}
		return args
	}
	t.Fatalf("no workload %s rendered", name)
	return nil
}

// waitHTTPOK waits until url answers 200.
func waitHTTPOK(t *testing.T, what, url string) {
	t.Helper()
	waitFor(t, time.Minute, what, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// noForbidden fails the test if a component's log shows an RBAC denial.
func noForbidden(t *testing.T, component, logPath string) {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "forbidden") || strings.Contains(line, "Forbidden") {
			t.Errorf("%s was denied by RBAC: %s", component, line)
		}
	}
}

// TestChartLive runs the binaries with the chart's own arguments as the chart's service
// accounts (impersonated), with only the chart's RBAC and pre-created objects installed:
// the recommender must win its pre-created Lease and write recommendations and status;
// the admission webhook must fill its pre-created certificate Secret, keep its status
// Lease, and register its CA bundle into the chart's webhook configurations (limited to
// a namespace label nobody carries, so other tests are unaffected) without rewriting
// anything else. Any "forbidden" in their logs fails the test.
func TestChartLive(t *testing.T) {
	const (
		ns      = "chart-live"
		work    = "chart-live-work"
		release = "live"
	)
	createNamespace(t, ns)
	createNamespace(t, work)
	rendered := chartTemplate(t, release, ns, "default",
		"prometheus.url="+testCluster.PrometheusURL,
		"admission.webhook.namespaceSelector.gpufrac-chart-live=never-set")
	objs := chartObjects(t, rendered)
	var install []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Lease", "Secret",
			"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			install = append(install, o)
		}
	}
	doc := chartYAML(t, install)
	if _, err := chartKubectl(doc, "apply", "--server-side", "--field-manager=helm", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = chartKubectl(doc, "delete", "--ignore-not-found", "--wait=false", "-f", "-") })
	sa := func(name string) string { return "system:serviceaccount:" + ns + ":" + release + "-gpufrac-" + name }
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	ctx := context.Background()

	t.Run("recommender", func(t *testing.T) {
		probe := addr()
		args := append(chartContainerArgs(t, objs, release+"-gpufrac-recommender", "metrics-bind-address", "health-probe-bind-address"),
			"--kubeconfig="+impersonatingKubeconfig(t, sa("recommender")),
			"--metrics-bind-address="+addr(), "--health-probe-bind-address="+probe,
			"--interval=3s", "--history-length=2h")
		_, logPath, stop := startProcess(t, "recommender", args...)
		waitHTTPOK(t, "recommender ready", "http://"+probe+"/readyz")
		create(t, gpuDeployment(work, "app", "main", 1), autoscaler(work, "app", "app"))
		waitFor(t, 90*time.Second, "recommendation and autoscaler status written", func() (bool, error) {
			var gfa gpufracv1.GPUFractionAutoscaler
			if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: work, Name: "app"}, &gfa); err != nil {
				return false, err
			}
			gfr := recommendation(t, work, "app")
			return gfr != nil && len(gfr.Status.Conditions) > 0 && len(gfa.Status.Conditions) > 0, nil
		})
		var lease coordinationv1.Lease
		if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gpufrac-recommender.autoscaling.gpufrac.io"}, &lease); err != nil {
			t.Fatal(err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("the recommender does not hold its pre-created Lease: %+v", lease.Spec)
		}
		stop()
		noForbidden(t, "recommender", logPath)
	})

	t.Run("admission", func(t *testing.T) {
		probe := addr()
		args := append(chartContainerArgs(t, objs, release+"-gpufrac-admission",
			"metrics-bind-address", "health-probe-bind-address", "webhook-port"),
			"--kubeconfig="+impersonatingKubeconfig(t, sa("admission")),
			"--identity=live-0", "--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", freePort(t)),
			"--metrics-bind-address="+addr(), "--health-probe-bind-address="+probe,
			"--cert-check-interval=1s", "--status-lease-renew-interval=1s")
		_, logPath, stop := startProcess(t, "admission", args...)
		// Ready means: caches synced, certificate loaded, webhooks registered.
		waitHTTPOK(t, "admission ready", "http://"+probe+"/readyz")

		var secret corev1.Secret
		if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: release + "-gpufrac-admission-tls"}, &secret); err != nil {
			t.Fatal(err)
		}
		if len(secret.Data["tls.crt"]) == 0 || len(secret.Data["tls.key"]) == 0 {
			t.Errorf("certificate Secret not filled: keys %v", chartKeys(secret.Data))
		}
		waitFor(t, 30*time.Second, "status Lease held", func() (bool, error) {
			var lease coordinationv1.Lease
			if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gpufrac-admission-status"}, &lease); err != nil {
				return false, err
			}
			return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "live-0", nil
		})
		name := types.NamespacedName{Name: release + "-gpufrac-admission"}
		var mw admissionregistrationv1.MutatingWebhookConfiguration
		var vw admissionregistrationv1.ValidatingWebhookConfiguration
		if err := testCluster.Client.Get(ctx, name, &mw); err != nil {
			t.Fatal(err)
		}
		if err := testCluster.Client.Get(ctx, name, &vw); err != nil {
			t.Fatal(err)
		}
		if len(mw.Webhooks[0].ClientConfig.CABundle) == 0 || len(vw.Webhooks[0].ClientConfig.CABundle) == 0 {
			t.Fatal("the admission webhook did not write the CA bundle into the chart's webhook configurations")
		}
		// Re-checked every second: nothing else of the chart's objects is rewritten.
		gen, vgen := mw.Generation, vw.Generation
		time.Sleep(4 * time.Second)
		if err := testCluster.Client.Get(ctx, name, &mw); err != nil {
			t.Fatal(err)
		}
		if err := testCluster.Client.Get(ctx, name, &vw); err != nil {
			t.Fatal(err)
		}
		if mw.Generation != gen || vw.Generation != vgen || gen > 2 || vgen > 2 {
			t.Errorf("webhook configurations keep changing: generations %d→%d, %d→%d (want 2: the chart's, then the CA bundle)",
				gen, mw.Generation, vgen, vw.Generation)
		}
		stop()
		noForbidden(t, "admission", logPath)
	})

	t.Run("updater", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(repoRoot, "bin", "updater")); err != nil {
			t.Skip("no bin/updater yet")
		}
		probe := addr()
		args := append(chartContainerArgs(t, objs, release+"-gpufrac-updater", "metrics-bind-address", "health-probe-bind-address"),
			"--kubeconfig="+impersonatingKubeconfig(t, sa("updater")),
			"--metrics-bind-address="+addr(), "--health-probe-bind-address="+probe)
		_, logPath, stop := startProcess(t, "updater", args...)
		waitHTTPOK(t, "updater ready", "http://"+probe+"/readyz")
		waitFor(t, 30*time.Second, "updater holds its pre-created Lease", func() (bool, error) {
			var lease coordinationv1.Lease
			if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gpufrac-updater.autoscaling.gpufrac.io"}, &lease); err != nil {
				return false, err
			}
			return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
		})
		time.Sleep(5 * time.Second) // a few cycles (reads of autoscalers, pods, the status Lease)
		stop()
		noForbidden(t, "updater", logPath)
	})
}

func chartKeys(m map[string][]byte) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package e2e

// Chart rendering validated by the API server, and webhook configurations as the admission binary registers them.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/admission"
)

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
			got := chartWebhooks(t, meta.Kind, raw, reg.Mutating(nil).Webhooks)
			if got[0].FailurePolicy == nil || *got[0].FailurePolicy != admissionregistrationv1.Ignore ||
				got[0].TimeoutSeconds == nil || *got[0].TimeoutSeconds != 3 {
				t.Errorf("pod webhook: failurePolicy %v timeoutSeconds %v, want Ignore and 3", got[0].FailurePolicy, got[0].TimeoutSeconds)
			}
			excluded := got[0].NamespaceSelector.MatchExpressions[0].Values
			if !chartContains(excluded, "kube-system") || !chartContains(excluded, ns) {
				t.Errorf("pod webhook excludes namespaces %v, want kube-system and %s", excluded, ns)
			}
		case "ValidatingWebhookConfiguration":
			seen++
			chartWebhooks(t, meta.Kind, raw, reg.Validating(nil).Webhooks)
		}
	}
	if seen != 2 {
		t.Errorf("found %d webhook configurations, want 2", seen)
	}
}

// chartWebhooks decodes the webhooks of the rendered configuration raw (of kind) and
// reports them when they differ from want, the admission binary's.
func chartWebhooks[W any](t *testing.T, kind string, raw []byte, want []W) []W {
	t.Helper()
	var got struct {
		Webhooks []W `json:"webhooks"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Webhooks, want) {
		t.Errorf("%s differs from the admission binary's:\nchart: %s\nbinary: %s", kind, chartJSON(got.Webhooks), chartJSON(want))
	}
	return got.Webhooks
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

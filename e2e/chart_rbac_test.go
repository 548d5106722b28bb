package e2e

// Chart RBAC: each component's permissions checked with `kubectl auth can-i`.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

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
	applyChartRBAC(t, chartTemplate(t, "rbac", ns, "default", "agent.enabled=true", "recommender.shardNamespaceSelector=team=a",
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
			{"list", "gpufractioncheckpoints", "", "", true}, // restored at start
			{"create", "gpufractioncheckpoints", "", other, true},
			{"patch", "gpufractioncheckpoints", "", other, true},
			{"create", "events", "", other, true},
			{"create", "events.events.k8s.io", "", other, true},
			{"get", "leases/gpufrac-recommender.autoscaling.gpufrac.io", "", ns, true},
			{"update", "leases/gpufrac-recommender.autoscaling.gpufrac.io", "", ns, true},
			{"update", "leases/gpufrac-recommender-status-default", "", ns, true}, // its status Lease
			{"watch", "gpusharingpolicies", "", "", true},                         // the sharing planner
			{"update", "gpusharingpolicies", "status", "", true},
			{"patch", "nodes", "", "", true}, // nvidia.com/device-plugin.config labels
			// --shard-namespace-selector: namespace labels from an informer (a list
			// without watch fails the informer's watch and relists every backoff).
			{"list", "namespaces", "", "", true},
			{"watch", "namespaces", "", "", true},
			// Not beyond its role:
			{"update", "gpusharingpolicies", "", "", false},
			{"delete", "nodes", "", "", false},
			{"patch", "namespaces", "", "", false},
			{"update", "gpufractionautoscalers", "", other, false},
			{"delete", "gpufractionautoscalers", "", other, false},
			{"delete", "gpufractioncheckpoints", "", other, false}, // garbage collection deletes them
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
			{"get", "leases/gpufrac-recommender-status-default", "", ns, true}, // recommenders' status Leases
			{"update", "leases/gpufrac-recommender-status-default", "", ns, false},
			{"update", "leases/gpufrac-updater.autoscaling.gpufrac.io", "", ns, true},
			{"create", "events", "", other, true},
			{"list", "nodes", "", "", true},                                    // the placement check before an eviction
			{"get", "resourceclaimtemplates.resource.k8s.io", "", other, true}, // dra backend: Read
			{"create", "resourceclaimtemplates.resource.k8s.io", "", other, false},
			{"list", "gpusharingpolicies", "", "", true}, // nvidia-timeslicing, nvidia-mps: a plan applies
			{"update", "gpusharingpolicies", "", "", false},
			// Not beyond its role: evictions only (never delete, unless
			// updater.replaceUnreadyPods), no writes to recommendations.
			{"delete", "pods", "", other, false},
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
			{"get", "resourceclaimtemplates.resource.k8s.io", "", other, true}, // dra backend
			{"create", "resourceclaimtemplates.resource.k8s.io", "", other, true},
			{"list", "gpusharingpolicies", "", "", true},  // nvidia-timeslicing, nvidia-mps: the plan
			{"watch", "gpusharingpolicies", "", "", true}, // from an informer
			// Not beyond its role:
			{"update", "gpusharingpolicies", "", "", false},
			{"update", "resourceclaimtemplates.resource.k8s.io", "", other, false},
			{"delete", "resourceclaimtemplates.resource.k8s.io", "", other, false},
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
			{"list", "gpufractioncheckpoints", "", other, true},
			{"create", "gpufractionautoscalers", "", other, false},
		})
		checkCanI(t, "bob", []canI{
			{"create", "gpufractionautoscalers", "", other, true},
			{"list", "gpufractionrecommendations", "", other, true},
			{"update", "gpufractionrecommendations", "", other, false},
			{"patch", "gpufractionrecommendations", "status", other, false},
			{"patch", "gpufractioncheckpoints", "", other, false},
		})
	})
}

package e2e

// The binaries run with the chart's own arguments and, live, as the chart's service accounts.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

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

// noForbidden fails the test if a component's log shows an RBAC denial.
func noForbidden(t *testing.T, component, logPath string) {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		// A write into a namespace that an earlier test is deleting is refused as
		// forbidden by the API server's namespace lifecycle check, not by RBAC.
		if strings.Contains(line, "because it is being terminated") {
			continue
		}
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
		// Its status Lease, renewed after its cycles with the chart's RBAC. A cycle renews
		// it after it wrote the statuses, so the cycle whose writes ended the wait above
		// (the first, where leader election took until the autoscaler existed) may not
		// have renewed it yet: wait for the renewal.
		waitFor(t, 30*time.Second, "the recommender renews its pre-created status Lease", func() (bool, error) {
			var status coordinationv1.Lease
			if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gpufrac-recommender-status-default"}, &status); err != nil {
				return false, err
			}
			return status.Spec.RenewTime != nil && time.Since(status.Spec.RenewTime.Time) <= time.Minute, fmt.Errorf("status Lease %+v", status.Spec)
		})
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

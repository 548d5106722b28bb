package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/e2e/framework"
	"github.com/gpufrac/gpufrac/trace"
)

// writeTraceCSV writes tr as a long-format CSV (trace.WriteLongCSV) into the test's
// temporary directory and returns the file's path.
func writeTraceCSV(t *testing.T, tr trace.Trace) string {
	t.Helper()
	csv := filepath.Join(t.TempDir(), "trace.csv")
	f, err := os.Create(csv)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.WriteLongCSV(f, tr); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return csv
}

// installCRDs creates gpufrac's CRDs from charts/gpufrac/crds and waits until the API
// server serves them.
func installCRDs(ctx context.Context) error {
	return testCluster.InstallCRDs(ctx, filepath.Join(repoRoot, "charts", "gpufrac", "crds"))
}

// freePort returns a free TCP port on 127.0.0.1 for a binary under test to bind, never
// the same twice nor one of the cluster's (framework.FreePorts: below the kernel's
// ephemeral range, since a port from port 0 is an ephemeral one, which an outgoing
// connection of any process may take between this call and the binary's bind; it failed
// now and then with "address already in use").
func freePort(t testing.TB) int {
	t.Helper()
	p, err := framework.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// startProcess runs a binary from bin/ with its output in the test's log directory and
// stops it by PID (SIGTERM, then SIGKILL after 10s) when the test ends, or kills it when
// the test binary dies first. The returned stop function does the same earlier.
func startProcess(t testing.TB, name string, args ...string) (cmd *exec.Cmd, logPath string, stop func()) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(filepath.Join(repoRoot, "bin", name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test binary (a -timeout panic, a SIGKILL), as the cluster's own
	// processes are (framework): the cleanups that stop it do not run then, and an
	// orphaned recommender or updater would run on, retrying a gone API server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("--- %s log (tail) ---\n%s", name, b)
			}
		}
	}
	t.Cleanup(stop)
	return cmd, logPath, stop
}

// startRecommender runs bin/recommender against the test cluster and Prometheus with a
// 5s cycle and waits until it is ready.
func startRecommender(t testing.TB, extra ...string) (stop func()) {
	t.Helper()
	probe := freePort(t)
	args := append([]string{
		"--kubeconfig=" + testCluster.Kubeconfig,
		"--prometheus-url=" + testCluster.PrometheusURL,
		"--interval=5s",
		"--max-backoff=10s",
		"--history-length=72h",
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
	}, extra...)
	_, _, stop = startProcess(t, "recommender", args...)
	waitHTTPOK(t, "recommender ready", fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
	return stop
}

// waitFor polls cond every 500ms until it is true, fails the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
}

// waitHTTPOK waits until url answers 200.
func waitHTTPOK(t testing.TB, what, url string) {
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

// createNamespace creates a namespace deleted when the test ends.
func createNamespace(t testing.TB, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := testCluster.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), ns) })
}

// gpuDeployment returns a Deployment whose pods request one whole GPU.
func gpuDeployment(ns, name, container string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  container,
					Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						"nvidia.com/gpu": resource.MustParse("1"),
					}},
				}}},
			},
		},
	}
}

// autoscaler returns a recommendation-only GPUFractionAutoscaler for a Deployment.
func autoscaler(ns, name, deployment string) *gpufracv1.GPUFractionAutoscaler {
	g := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Spec.TargetRef.APIVersion, g.Spec.TargetRef.Kind, g.Spec.TargetRef.Name = "apps/v1", "Deployment", deployment
	return g
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := testCluster.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// recommendation reads a GPUFractionRecommendation, or returns nil if it does not exist.
func recommendation(t testing.TB, ns, name string) *gpufracv1.GPUFractionRecommendation {
	t.Helper()
	var r gpufracv1.GPUFractionRecommendation
	err := testCluster.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &r)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &r
}

// waitRunning waits until n pods of the Deployment's namespace with app=name are Running.
func waitRunning(t testing.TB, ns, name string, n int) {
	t.Helper()
	waitFor(t, 90*time.Second, fmt.Sprintf("%d running pods of %s/%s", n, ns, name), func() (bool, error) {
		var pods corev1.PodList
		if err := testCluster.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, nil
	})
}

// Packing-aware memory sizing, as the recommender runs in these tests (default
// --gpu-memory 80Gi, --fit-memory-headroom 2Gi, --memory-peak-window 7 days): a memory
// target just above a whole share of one GPU (½, ⅓, …) is rounded down to that share
// when the recent peak plus the headroom still fits it (docs/recommender.md).
const (
	e2eGPUMemoryBytes   = float64(80 << 30)
	e2eFitHeadroomBytes = float64(2 << 30)
	e2ePeakWindow       = 7 * 24 * time.Hour
)

// expectedShare is the memory target (bytes) the recommender should write for an
// unrounded target and the recent peak (bytes), computed here independently of
// policy.FitShare: the largest share gpu/n (n ≥ 2, whole MiB) that is below the target
// and at least peak + headroom; the target itself when there is none; one GPU when the
// target is one GPU or more, as no recommendation exceeds one GPU (--gpu-memory, the
// "caps" row of docs/recommender.md: a young margin of 100 % on a 45 GiB peak is a
// target of one GPU, not 103 GiB).
func expectedShare(target, peak float64) float64 {
	if target >= e2eGPUMemoryBytes {
		return e2eGPUMemoryBytes
	}
	for n := 2; ; n++ {
		share := math.Floor(e2eGPUMemoryBytes/float64(n)/(1<<20)) * (1 << 20)
		if share < peak+e2eFitHeadroomBytes {
			return target // this share and every smaller one leave too little room
		}
		if share < target {
			return share // the largest share below the target
		}
	}
}

package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// TestSmoke starts a cluster with 2 fake GPU nodes and a backfilled Prometheus, runs a
// GPU Deployment to Running, queries history, and stops everything.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	if err := framework.CheckBinaries(""); err != nil {
		t.Skipf("e2e: %v", err)
	}
	ctx := t.Context()
	dir := t.TempDir()

	// 3h of history, one sample every 5 minutes; value 1000+i at now-3h+i*5m.
	now := time.Now().Truncate(time.Second)
	var om strings.Builder
	om.WriteString("# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n")
	for i := 0; i < 35; i++ {
		ts := now.Add(-3*time.Hour + time.Duration(i)*5*time.Minute)
		fmt.Fprintf(&om, "DCGM_FI_DEV_FB_USED{namespace=\"a\",pod=\"p\",container=\"c\"} %d %d\n", 1000+i, ts.Unix())
	}
	om.WriteString("# EOF\n")
	backfill := filepath.Join(dir, "history.om")
	if err := os.WriteFile(backfill, []byte(om.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	c, err := framework.Start(ctx, framework.Options{Dir: filepath.Join(dir, "cluster"), GPUNodes: 2, Backfill: []string{backfill}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %v", time.Since(begin))
	t.Cleanup(func() { _ = c.Stop() })

	labels := map[string]string{"app": "smoke"}
	gpu := corev1.ResourceList{framework.GPUResource: resource.MustParse("1")}
	replicas := int32(2)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:      "c",
					Image:     "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
				}}},
			},
		},
	}
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels)); err != nil {
			t.Fatal(err)
		}
		running := 0
		var phases []string
		for _, p := range pods.Items {
			phases = append(phases, fmt.Sprintf("%s=%s@%s", p.Name, p.Status.Phase, p.Spec.NodeName))
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == 2 {
			t.Logf("2 pods Running after %v: %v", time.Since(begin), phases)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods not Running after 90s: %v (logs in %s)", phases, c.LogPath(framework.Scheduler))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The backfilled sample at exactly now-2h is i=12.
	got, err := queryValue(ctx, c.PrometheusURL, `DCGM_FI_DEV_FB_USED{namespace="a",pod="p",container="c"}`, now.Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got != 1012 {
		t.Fatalf("DCGM_FI_DEV_FB_USED 2h ago = %v, want 1012", got)
	}

	pids := c.PIDs()
	if len(pids) != 6 {
		t.Errorf("running processes %v, want 6", pids)
	}
	begin = time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %v", time.Since(begin))
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop: kill(0) = %v", name, pid, err)
		}
	}
}

// queryValue runs an instant PromQL query at time at and returns the single value.
func queryValue(ctx context.Context, promURL, query string, at time.Time) (float64, error) {
	u := promURL + "/api/v1/query?" + url.Values{"query": {query}, "time": {strconv.FormatInt(at.Unix(), 10)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, fmt.Errorf("query %s: %w", u, err)
	}
	if r.Status != "success" || len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: status %q error %q, %d series", u, r.Status, r.Error, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// Package e2e runs gpufrac against a real cluster: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler built from k8s.io/kubernetes, KWOK fake GPU
// nodes, and a real Prometheus whose TSDB is backfilled with days of DCGM-format history
// before it starts (e2e/framework). One cluster serves every test; each test works in its
// own namespace. gpufrac's binaries run as processes, as they would in a cluster.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

var (
	// testCluster is the shared cluster, started by TestMain before any test runs.
	testCluster *framework.Cluster
	// repoRoot is the module root; bin/ holds the binaries under test.
	repoRoot string
	// dataEnd is when the backfilled histories end (TestMain's start).
	dataEnd time.Time
	keep    = flag.Bool("keep", false, "keep the cluster's directory (logs, data) after the run")
)

// backfill writes one OpenMetrics file of history ending at end into dir and returns
// its path. Test files register theirs in init(), so TestMain backfills everything
// before Prometheus starts.
type backfill func(dir string, end time.Time) (string, error)

var backfills = map[string]backfill{}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	var err error
	if repoRoot, err = framework.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	build := exec.Command("go", "build", "-o", filepath.Join(repoRoot, "bin")+"/", "./cmd/...")
	build.Dir, build.Stdout, build.Stderr = repoRoot, os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building gpufrac:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "gpufrac-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dataEnd = time.Now().Truncate(time.Second)
	var files []string
	for name, b := range backfills {
		f, err := b(dir, dataEnd)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: backfill %s: %v\n", name, err)
			return 1
		}
		files = append(files, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	testCluster, err = framework.Start(ctx, framework.Options{Dir: filepath.Join(dir, "cluster"), GPUNodes: 4, Backfill: files})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting cluster:", err)
		return 1
	}
	fmt.Printf("e2e: cluster up in %s (dir %s)\n", time.Since(start).Round(time.Millisecond), dir)
	code := 1
	if err := installCRDs(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: installing CRDs:", err)
	} else {
		code = m.Run()
	}
	if err := testCluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: stopping cluster:", err)
		code = 1
	}
	if code == 0 && !*keep {
		os.RemoveAll(dir)
	} else {
		fmt.Printf("e2e: logs and data kept in %s\n", dir)
	}
	return code
}

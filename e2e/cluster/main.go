// Command cluster starts and stops a detached local cluster (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, KWOK fake GPU nodes, Prometheus) for the
// demo and for manual testing:
//
//	go run ./e2e/cluster up --dir DIR [--gpu-nodes N] [--gpus-per-node N] [--backfill FILE]... [--scrape-target HOST:PORT]...
//	go run ./e2e/cluster down --dir DIR
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  cluster up --dir DIR [--gpu-nodes N] [--gpus-per-node N] [--backfill FILE]... [--scrape-target HOST:PORT]... [--bin-dir DIR]
  cluster down --dir DIR
`)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "", "working directory for certs, data, logs and kubeconfig (required)")
	binDir := fs.String("bin-dir", "", "directory of kube-apiserver, kube-controller-manager, kube-scheduler, kwok (default <repo>/bin)")
	nodes := fs.Int("gpu-nodes", 2, "number of KWOK fake GPU nodes")
	gpus := fs.Int("gpus-per-node", 8, "nvidia.com/gpu capacity per node")
	var backfill, targets stringList
	fs.Var(&backfill, "backfill", "OpenMetrics file to backfill into Prometheus (repeatable)")
	fs.Var(&targets, "scrape-target", "HOST:PORT for Prometheus to scrape every 1s (repeatable)")
	_ = fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("up: --dir is required")
	}
	if *nodes == 0 {
		*nodes = -1 // framework: negative means none
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	c, err := framework.Start(ctx, framework.Options{
		Dir: *dir, BinDir: *binDir, GPUNodes: *nodes, GPUsPerNode: *gpus,
		Backfill: backfill, ScrapeTargets: targets, Detach: true,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	fmt.Printf("cluster up in %.1fs\n", time.Since(begin).Seconds())
	fmt.Printf("kubeconfig: %s\nprometheus: %s\nlogs:       %s\nstop with:  go run ./e2e/cluster down --dir %s\n",
		c.Kubeconfig, c.PrometheusURL, filepath.Join(c.Dir, "logs"), c.Dir)
	fmt.Printf("export KUBECONFIG=%s\nexport PROMETHEUS_URL=%s\n", c.Kubeconfig, c.PrometheusURL)
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", "", "directory given to up (required)")
	_ = fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("down: --dir is required")
	}
	c, err := framework.Load(*dir)
	if err != nil {
		return fmt.Errorf("down: no cluster state in %s: %w", *dir, err)
	}
	pids := c.PIDs()
	begin := time.Now()
	if err := c.Stop(); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(pids))
	fmt.Printf("cluster stopped: %d process(es) (%s) in %.1fs\n", len(pids), strings.Join(names, ", "), time.Since(begin).Seconds())
	return nil
}

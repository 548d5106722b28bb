// Command benchscale is `make bench-scale`: gpufrac's recommender at scale on real
// parts. It starts the local cluster of e2e/framework (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, KWOK fake GPU nodes, Prometheus), creates
// --workloads Deployments of --pods pods in all with one GPUFractionAutoscaler each
// (the manifests `gpufrac trace synth --manifests` writes), backfills Prometheus with
// --history of per-minute synthetic DCGM and kube-state-metrics series of those workloads
// (the series `gpufrac trace synth --output` writes, appended straight into a TSDB
// block), runs bin/recommender (one process, or --shards 2 processes that split the
// namespaces with --shard-namespace-selector) and reports, per process: history
// bootstrap time, CPU and Prometheus bytes read; steady-state cycle wall and CPU time;
// peak RSS; API writes, recommendations written and Prometheus queries per cycle. With
// --restart it then stops the recommender and starts it again, to measure the bootstrap
// from its GPUFractionCheckpoints (restart.go).
//
// Every flag defaults to an environment variable of the same name in capitals (PODS,
// WORKLOADS, HISTORY or DAYS, SHARDS, ...), so `make bench-scale PODS=1000 WORKLOADS=200 DAYS=1`
// runs it small. Processes are stopped by PID, ports are free loopback ports, and the
// cluster's data (etcd, Prometheus' TSDB) is removed at the end; logs, profiles and
// report.md stay in --out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// options are the bench's knobs.
type options struct {
	Pods, Workloads, Namespaces int
	// History is the backfilled history before the start and the recommender's
	// --history-length.
	History time.Duration
	// Modes are the shard counts run one after the other on the same cluster.
	Modes                       []int
	Cycles, WarmUp, GPUsPerNode int
	Interval, Lead, Scrape      time.Duration
	// ProfileFor is the CPU profile's window from the start of the first measured cycle.
	ProfileFor time.Duration
	// BootstrapProfile is the CPU profile's window from each recommender's start (0:
	// none).
	BootstrapProfile         time.Duration
	Guardrail, Profile, Keep bool
	// Restart stops the single recommender after its steady cycles, once every
	// workload has a checkpoint, and starts it again (restart.go).
	Restart bool
	// CheckpointInterval is the recommender's --checkpoint-interval; 0: its default.
	CheckpointInterval time.Duration
	Out, BinDir        string
	// MemoryLimit is the recommender processes' GOMEMLIMIT (as the chart sets it from
	// the container's memory limit); empty: none.
	MemoryLimit string
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envBool(name string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseOptions() (options, error) {
	var o options
	flag.IntVar(&o.Pods, "pods", envInt("PODS", 10000), "GPU pods in all (env PODS); a multiple of --workloads")
	flag.IntVar(&o.Workloads, "workloads", envInt("WORKLOADS", 2000), "Deployments, one GPUFractionAutoscaler each (env WORKLOADS)")
	flag.IntVar(&o.Namespaces, "namespaces", envInt("NAMESPACES", 10), "namespaces the workloads are spread over (env NAMESPACES)")
	flag.DurationVar(&o.History, "history", envDuration("HISTORY", time.Duration(envInt("DAYS", 8))*24*time.Hour), "per-minute history backfilled before the start, and the recommender's --history-length (env HISTORY, or DAYS in days)")
	modes := flag.String("shards", envString("SHARDS", "1"), "recommender processes: 1, 2 (splitting the namespaces by label), or 1,2 (one, then two, on the same cluster) (env SHARDS)")
	flag.IntVar(&o.Cycles, "cycles", envInt("CYCLES", 3), "steady-state cycles measured (env CYCLES)")
	flag.IntVar(&o.WarmUp, "warm-up", envInt("WARM_UP", 1), "cycles after the bootstrap left out of the steady state (env WARM_UP)")
	flag.IntVar(&o.GPUsPerNode, "gpus-per-node", envInt("GPUS_PER_NODE", 64), "nvidia.com/gpu per KWOK node, at most 110 (the nodes' pod capacity) (env GPUS_PER_NODE)")
	flag.DurationVar(&o.Interval, "interval", envDuration("INTERVAL", time.Minute), "the recommender's --interval (env INTERVAL)")
	flag.DurationVar(&o.Scrape, "scrape-interval", envDuration("SCRAPE_INTERVAL", 15*time.Second), "how often the recommender's /metrics is read in the steady state, as a Prometheus would scrape it: each read gathers every per-autoscaler series, a cost inside the measured cycle CPU (env SCRAPE_INTERVAL)")
	flag.DurationVar(&o.Lead, "lead", envDuration("LEAD", 3*time.Hour), "how far past the start the synthetic series run, so each cycle reads a new minute of samples as a live Prometheus would hold (env LEAD)")
	flag.BoolVar(&o.Guardrail, "guardrail", envBool("GUARDRAIL", false), "keep the latency guardrail of the synthesized autoscalers: one more query per autoscaler per cycle (env GUARDRAIL)")
	flag.BoolVar(&o.Profile, "profile", envBool("PROFILE", true), "save a CPU profile of one steady cycle and a heap profile per recommender (env PROFILE)")
	flag.DurationVar(&o.ProfileFor, "profile-for", envDuration("PROFILE_FOR", 0), "the CPU profile's window from the start of the first measured cycle (default --interval; at most --cycles × --interval is useful: cycles that write many statuses run longer than the interval) (env PROFILE_FOR)")
	flag.StringVar(&o.MemoryLimit, "memory-limit", envString("MEMORY_LIMIT", ""), "GOMEMLIMIT of the recommender processes only, e.g. 1GiB as the chart sets it from the default container limit; empty: none, Go's default (env MEMORY_LIMIT)")
	flag.DurationVar(&o.BootstrapProfile, "bootstrap-profile", envDuration("BOOTSTRAP_PROFILE", 0), "save a CPU profile of each recommender, and one of Prometheus, over this window from the recommender's start (the bootstrap; bootstrap-profile-<name>.pprof, bootstrap-profile-prometheus-<name>.pprof; 0: none) (env BOOTSTRAP_PROFILE)")
	flag.BoolVar(&o.Restart, "restart", envBool("RESTART", false), "with --shards 1: after the steady cycles, wait until every workload has a GPUFractionCheckpoint, stop the recommender and start it again, and measure its bootstrap from the checkpoints and as many steady cycles (env RESTART)")
	flag.DurationVar(&o.CheckpointInterval, "checkpoint-interval", envDuration("CHECKPOINT_INTERVAL", 0), "the recommender's --checkpoint-interval (0: its default, 30m; with --restart every workload's first checkpoint is written within half of it) (env CHECKPOINT_INTERVAL)")
	flag.BoolVar(&o.Keep, "keep", envBool("KEEP", false), "keep the cluster's etcd and Prometheus data (env KEEP)")
	flag.StringVar(&o.Out, "out", envString("OUT", "_out/bench-scale"), "directory of the cluster, logs, profiles and report.md (env OUT)")
	flag.StringVar(&o.BinDir, "bin-dir", envString("BIN_DIR", ""), "directory of recommender and the cluster's binaries (default <repo>/bin) (env BIN_DIR)")
	flag.Parse()
	for _, m := range strings.Split(*modes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(m))
		if err != nil || (n != 1 && n != 2) {
			return o, fmt.Errorf("--shards %q: want 1, 2 or 1,2", *modes)
		}
		o.Modes = append(o.Modes, n)
	}
	switch {
	case o.Workloads < 1 || o.Pods < o.Workloads || o.Pods%o.Workloads != 0:
		return o, fmt.Errorf("--pods %d must be a positive multiple of --workloads %d", o.Pods, o.Workloads)
	case o.Namespaces < 1 || o.Namespaces > o.Workloads:
		return o, fmt.Errorf("--namespaces %d: want 1 to --workloads", o.Namespaces)
	case slices.Contains(o.Modes, 2) && o.Namespaces < 2:
		return o, errors.New("--shards 2 needs at least 2 namespaces")
	case o.History < time.Hour || o.Cycles < 1 || o.WarmUp < 0 || o.Interval < time.Second || o.Lead < 0 || o.Scrape < time.Second:
		return o, errors.New("--history must be at least 1h, --cycles positive, --warm-up and --lead not negative, --interval and --scrape-interval at least 1s")
	case o.GPUsPerNode < 1 || o.GPUsPerNode > 110:
		return o, fmt.Errorf("--gpus-per-node %d: want 1 to 110", o.GPUsPerNode)
	}
	if o.ProfileFor <= 0 {
		o.ProfileFor = o.Interval
	}
	return o, nil
}

func main() {
	ctrllog.SetLogger(logr.Discard()) // the bench's clients log nothing worth reading
	o, err := parseOptions()
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, o options) (err error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if o.BinDir == "" {
		o.BinDir = filepath.Join(root, "bin")
	}
	if o.Out, err = filepath.Abs(o.Out); err != nil {
		return err
	}
	clusterDir := filepath.Join(o.Out, "cluster")
	if c, lerr := framework.Load(clusterDir); lerr == nil && len(c.PIDs()) > 0 {
		return fmt.Errorf("a cluster from an earlier run still runs in %s: go run ./e2e/cluster down --dir %s", clusterDir, clusterDir)
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	begin := time.Now()
	plan := newPlan(o, begin)
	logf("bench-scale: %d pods in %d Deployments over %d namespaces, %s of per-minute history, recommender shards %v",
		o.Pods, o.Workloads, o.Namespaces, o.History, o.Modes)

	var manifests [][]byte
	c, err := framework.Start(ctx, framework.Options{
		Dir: clusterDir, BinDir: o.BinDir, GPUNodes: (o.Pods+o.GPUsPerNode-1)/o.GPUsPerNode + 1, GPUsPerNode: o.GPUsPerNode,
		ClientQPS: 200, ReadyTimeout: 5 * time.Minute, QueryLog: true, DisabledControllers: ControllersOff,
		WriteTSDB: func(ctx context.Context, dataDir string) error {
			t0 := time.Now()
			var err error
			manifests, err = plan.backfill(ctx, dataDir)
			if err == nil {
				logf("backfill: %d series, %d samples written in %.0fs", plan.series, plan.samples, time.Since(t0).Seconds())
			}
			return err
		},
		Logf: func(format string, args ...any) { logf("cluster: "+format, args...) },
	})
	if err != nil {
		return err
	}
	defer func() {
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		if !o.Keep {
			for _, d := range []string{"etcd", "prometheus"} {
				err = errors.Join(err, os.RemoveAll(filepath.Join(clusterDir, d)))
			}
		}
		logf("cluster stopped; logs in %s", filepath.Join(clusterDir, "logs"))
	}()
	logf("cluster up in %.0fs", time.Since(begin).Seconds())

	if err := c.InstallCRDs(ctx, filepath.Join(root, "charts", "gpufrac", "crds")); err != nil {
		return err
	}
	t0 := time.Now()
	if err := plan.create(ctx, c, manifests); err != nil {
		return err
	}
	if err := plan.waitRunning(ctx, c); err != nil {
		return err
	}
	logf("%d pods Running in %.0fs", o.Pods, time.Since(t0).Seconds())

	res := &results{}
	for _, n := range o.Modes {
		if err := measure(ctx, o, c, n, res); err != nil {
			return err
		}
	}
	report := res.markdown(o, time.Since(begin))
	fmt.Print(report)
	return os.WriteFile(filepath.Join(o.Out, "report.md"), []byte(report), 0o644)
}

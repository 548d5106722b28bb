package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// metricNames are the recommender metrics a snapshot reads: the /metrics handler
// (client_golang's promhttp) encodes only these, so polling does not pay for the
// per-autoscaler series (tens of thousands at 2,000 autoscalers).
var metricNames = url.Values{"name[]": {
	"gpufrac_recommender_cycle_duration_seconds", "gpufrac_recommender_prometheus_queries_total",
	"rest_client_requests_total", "gpufrac_recommender_recommendations_written_total", "gpufrac_recommender_cycle_errors_total",
	"gpufrac_recommender_workloads_tracked", "gpufrac_recommender_checkpoints_written_total", "gpufrac_recommender_checkpoints_restored_total",
	"gpufrac_recommender_checkpoints_ignored_total", "gpufrac_recommender_cycle_step_duration_seconds",
	"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
	"go_memstats_next_gc_bytes", "go_memstats_sys_bytes",
}}

// proc is one recommender process (a shard).
type proc struct {
	Name       string // shard: "all", or the ShardLabel value it owns
	cmd        *exec.Cmd
	done       chan struct{}
	metricsURL string
	pprofURL   string
	started    time.Time
	// peakHeap is where the heap profile taken as the peak RSS last rose above the
	// goal is saved (waitFor): what was live at about the bootstrap's peak. hwm is the
	// peak RSS last said, bytes.
	peakHeap string
	hwm      float64
}

// startRecommender starts bin/recommender against the cluster; selector, when not
// empty, is its --shard-namespace-selector. Its log is <out>/recommender-<name>.log.
func startRecommender(o options, c *framework.Cluster, name, selector string) (*proc, error) {
	ports, err := framework.FreePorts(3)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--prometheus-url=" + c.PrometheusURL,
		"--interval=" + o.Interval.String(),
		"--history-length=" + o.History.String(),
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports[2]),
	}
	if selector != "" {
		args = append(args, "--shard-namespace-selector="+selector)
	}
	if o.CheckpointInterval > 0 {
		args = append(args, "--checkpoint-interval="+o.CheckpointInterval.String())
	}
	log, err := os.Create(filepath.Join(o.Out, "recommender-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(o.BinDir, "recommender"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if o.MemoryLimit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+o.MemoryLimit) // this process only, not the cluster's
	}
	// Dies with the bench even when the deferred stop is never reached.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start recommender: %w", err)
	}
	p := &proc{Name: name, cmd: cmd, done: make(chan struct{}), started: time.Now(), peakHeap: filepath.Join(o.Out, "heap-peak-"+name+".pprof"),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics?%s", ports[0], metricNames.Encode()),
		pprofURL:   fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", ports[2])}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	logf("started recommender %s (pid %d, GOMEMLIMIT %q): %v", name, cmd.Process.Pid, o.MemoryLimit, args)
	return p, nil
}

// stop sends SIGTERM to the process (by PID) and SIGKILL after 15 seconds.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// snapshot reads the process' counters and Prometheus'.
func (p *proc) snapshot(c *framework.Cluster) (snapshot, error) {
	select {
	case <-p.done:
		return snapshot{}, fmt.Errorf("recommender %s exited: %s", p.Name, p.cmd.ProcessState)
	default:
	}
	return takeSnapshot(p.pid(), p.metricsURL, c.PIDs()[framework.Prometheus], c.PrometheusURL)
}

// waitCycles polls every poll until the process has completed at least n cycles that
// read Prometheus (a cycle that could not is retried and not counted) and returns the
// snapshot taken then, up to timeout. Metrics not served yet (the process
// starting) are retried.
func (p *proc) waitCycles(ctx context.Context, c *framework.Cluster, n float64, poll, timeout time.Duration) (snapshot, error) {
	return p.waitFor(ctx, c, func(s snapshot) bool { return s.Cycles-s.Failed >= n }, fmt.Sprintf("%v cycles", n), poll, timeout)
}

// waitFor polls every poll until done holds for the process' snapshot and returns it, up
// to timeout (want names what is waited for in the error). Metrics not served yet (the
// process starting) are retried.
func (p *proc) waitFor(ctx context.Context, c *framework.Cluster, done func(snapshot) bool, want string, poll, timeout time.Duration) (snapshot, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		s, err := p.snapshot(c)
		// When the peak RSS rises (by 16 MiB or more since last said): where in the
		// bootstrap or cycle the peak is reached, next to the recommender's log and
		// Prometheus' query log.
		if err == nil && s.HWM >= p.hwm+16<<20 {
			p.hwm = s.HWM
			logf("recommender %s: peak RSS %s at +%.0fs (RSS %s; Go: %s)", p.Name, mib(s.HWM), time.Since(p.started).Seconds(), mib(s.RSS), s.Go)
			if s.HWM > goalRSSBytes {
				if err := fetchProfile(ctx, p.pprofURL, "heap", 0, p.peakHeap); err != nil {
					logf("recommender %s: heap profile at the peak: %v", p.Name, err)
				}
			}
		}
		if err == nil && done(s) {
			return s, nil
		}
		if err != nil {
			last = err
			select {
			case <-p.done:
				return s, err
			default:
			}
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("recommender %s: %v cycles and %v checkpoints written after %s, want %s (last error: %v)", p.Name, s.Cycles, s.CheckpointsWritten, timeout, want, last)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// saveProfile writes <out>/<file>-<name>.pprof from the pprof endpoint's kind
// ("profile" with seconds for CPU, "heap").
func (p *proc) saveProfile(ctx context.Context, o options, kind, file string, seconds int) error {
	return fetchProfile(ctx, p.pprofURL, kind, seconds, filepath.Join(o.Out, file+"-"+p.Name+".pprof"))
}

// fetchProfile writes path from the net/http/pprof endpoint under base (…/debug/pprof):
// kind ("profile" with seconds for CPU, "heap"). Prometheus serves the same endpoint.
func fetchProfile(ctx context.Context, base, kind string, seconds int, path string) error {
	u := base + "/" + kind
	if seconds > 0 {
		u += "?seconds=" + strconv.Itoa(seconds)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// Goals of issue 17 on the project's 2-core machine.
const (
	goalCycleCPUSeconds = 2.0
	goalRSSBytes        = 300 << 20
	goalBootstrap       = 2 * time.Minute
)

// shardResult is what one recommender process cost.
type shardResult struct {
	Name    string
	Tracked float64
	// Bootstrap: from the process start to the end of its first cycle that read
	// Prometheus (informer sync, history load of every autoscaler, first statuses);
	// failed cycles before it count in. Its PromBytes and
	// PromCPUSeconds are Prometheus' over that time (with two shards the second
	// bootstraps while the first runs steady cycles).
	Bootstrap     time.Duration
	BootstrapCost snapshot
	// Cycles are the steady-state cycles, one delta each.
	Cycles []snapshot
	// Changes are the status changes of each steady cycle (statusdiff.go).
	Changes []statusChange
	// HWM is the peak RSS at the end, bytes.
	HWM, RSS float64

	namespaces []string
}

// results are a run's figures.
type results struct {
	Shards []*shardResult
	// Checkpoints: what the first recommender wrote before the restart (restart.go);
	// nil without --restart.
	Checkpoints *checkpointFigures
}

// measure runs the recommender shards one after the other up to their first cycle,
// then measures o.Cycles steady cycles of every shard at once.
func measure(ctx context.Context, o options, c *framework.Cluster, shards int, res *results) error {
	type spec struct{ name, label string }
	specs := []spec{{"one", ""}}
	if shards == 2 {
		specs = []spec{{"shard-a", "a"}, {"shard-b", "b"}}
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	first := len(res.Shards)
	boots := map[*proc]snapshot{}
	for _, s := range specs {
		before, err := promSnapshot(c)
		if err != nil {
			return err
		}
		selector := ""
		if s.label != "" {
			selector = ShardLabel + "=" + s.label
		}
		p, err := startRecommender(o, c, s.name, selector)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		var bootProf sync.WaitGroup
		if o.BootstrapProfile > 0 {
			bootProf.Go(func() {
				// The endpoint is served once the manager has started: retried until then.
				var err error
				for range 60 {
					if err = p.saveProfile(ctx, o, "profile", "bootstrap-profile", int(max(o.BootstrapProfile.Seconds(), 1))); err == nil {
						return
					}
					time.Sleep(500 * time.Millisecond)
				}
				logf("recommender %s: bootstrap profile: %v", s.name, err)
			})
			// Prometheus' side of the same window: what its share of the bootstrap's
			// CPU is spent on (serving chunks, evaluating queries).
			bootProf.Go(func() {
				path := filepath.Join(o.Out, "bootstrap-profile-prometheus-"+s.name+".pprof")
				if err := fetchProfile(ctx, c.PrometheusURL+"/debug/pprof", "profile", int(max(o.BootstrapProfile.Seconds(), 1)), path); err != nil {
					logf("recommender %s: Prometheus' bootstrap profile: %v", s.name, err)
				}
			})
		}
		// Polled every second: until the first cycle ends there are no per-autoscaler
		// metrics, so a scrape costs the recommender next to nothing.
		boot, err := p.waitCycles(ctx, c, 1, time.Second, 60*time.Minute)
		if err != nil {
			return err
		}
		boots[p] = boot
		bootProf.Wait()
		cost := boot
		cost.PromBytes -= before.PromBytes
		cost.PromCPUSeconds -= before.PromCPUSeconds
		r := &shardResult{Name: s.name, namespaces: shardNamespaces(o, s.label), Tracked: boot.Tracked, Bootstrap: boot.At.Sub(p.started), BootstrapCost: cost}
		res.Shards = append(res.Shards, r)
		logf("recommender %s: bootstrap %.1fs, %.1f s CPU, %s from Prometheus, %.0f queries, %.0f API writes, peak RSS %s",
			s.name, r.Bootstrap.Seconds(), cost.CPUSeconds, mib(cost.PromBytes), cost.Queries, cost.APIWrites, mib(cost.HWM))
	}

	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Go(func() { errs[i] = steady(ctx, o, c, p, boots[p], res.Shards[first+i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || !o.Restart || shards != 1 {
		return err
	}
	p, err := restart(ctx, o, c, procs[0], boots[procs[0]], res)
	if p != nil {
		procs = append(procs, p)
	}
	return err
}

// steady waits out the warm-up cycles, then records one delta per cycle for o.Cycles
// cycles, with a CPU profile of the first measured cycle.
func steady(ctx context.Context, o options, c *framework.Cluster, p *proc, boot snapshot, r *shardResult) error {
	wait := 3*o.Interval + 10*time.Minute
	prev, err := p.waitCycles(ctx, c, boot.Cycles-boot.Failed+float64(o.WarmUp), o.Scrape, time.Duration(o.WarmUp+1)*wait)
	if err != nil {
		return err
	}
	before, err := readStatuses(ctx, c, r.namespaces)
	if err != nil {
		return err
	}
	var prof sync.WaitGroup
	var profErr error
	if o.Profile {
		prof.Go(func() { profErr = p.saveProfile(ctx, o, "profile", "profile", int(max(o.ProfileFor.Seconds(), 1))) })
	}
	for range o.Cycles {
		s, err := p.waitCycles(ctx, c, prev.Cycles-prev.Failed+1, o.Scrape, wait)
		if err != nil {
			return err
		}
		d := delta(prev, s)
		r.Cycles = append(r.Cycles, d)
		after, err := readStatuses(ctx, c, r.namespaces)
		if err != nil {
			return err
		}
		ch := diff(before, after)
		r.Changes = append(r.Changes, ch)
		before = after
		logf("recommender %s: cycle %.1fs wall, %.2f s CPU, %.0f queries, %.0f API writes, %.0f recommendations written, %d statuses changed (%s), RSS %s",
			p.Name, d.CycleSeconds/d.Cycles, d.CPUSeconds/d.Cycles, d.Queries, d.APIWrites, d.Written, ch.Objects, ch, mib(d.RSS))
		for _, f := range slices.Sorted(maps.Keys(ch.Examples)) {
			e := ch.Examples[f]
			logf("  %s of %s was %s, now %s", f, e[0], around(e[1], e[2]), around(e[2], e[1]))
		}
		prev = s
	}
	prof.Wait()
	r.HWM, r.RSS = prev.HWM, prev.RSS
	if o.Profile {
		profErr = errors.Join(profErr, p.saveProfile(ctx, o, "heap", "heap", 0))
	}
	return profErr
}

// promSnapshot reads Prometheus' response bytes and CPU.
func promSnapshot(c *framework.Cluster) (snapshot, error) {
	s := snapshot{At: time.Now()}
	p, err := scrape(c.PrometheusURL + "/metrics")
	if err != nil {
		return s, err
	}
	s.PromBytes = p.sum("prometheus_http_response_size_bytes_sum", func(l map[string]string) bool { return l["handler"] != "/metrics" })
	s.PromCPUSeconds, err = procCPU(c.PIDs()[framework.Prometheus])
	return s, err
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

func seconds(v float64) string { return fmt.Sprintf("%.2f s", v) }

// perCycle returns mean and max of f over the steady cycles.
func (r *shardResult) perCycle(f func(snapshot) float64) (mean, maxV float64) {
	var vs []float64
	for _, c := range r.Cycles {
		vs = append(vs, f(c)/c.Cycles)
		mean += f(c)
	}
	n := 0.0
	for _, c := range r.Cycles {
		n += c.Cycles
	}
	if n == 0 {
		return 0, 0
	}
	return mean / n, slices.Max(vs)
}

// meanSteps is a snapshot whose Steps are the measured cycles' mean seconds per step.
func (r *shardResult) meanSteps() snapshot {
	mean := snapshot{Steps: map[string]float64{}}
	n := 0.0
	for _, c := range r.Cycles {
		n += c.Cycles
		for step, v := range c.Steps {
			mean.Steps[step] += v
		}
	}
	for step := range mean.Steps {
		mean.Steps[step] /= max(n, 1)
	}
	return mean
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// markdown renders the report: the run, a table per goal and shard, and per cycle.
func (res *results) markdown(o options, took time.Duration) string {
	var b strings.Builder
	commit, _ := exec.Command("git", "describe", "--always", "--dirty").Output()
	fmt.Fprintf(&b, "## bench-scale: %d pods, %d autoscalers, %s of history, shards %v\n\n", o.Pods, o.Workloads, o.History, o.Modes)
	limit := o.MemoryLimit
	if limit == "" {
		limit = "none"
	}
	fmt.Fprintf(&b, "Commit %s, %s, %d CPUs, %s, interval %s, recommender GOMEMLIMIT %s, run took %s.\n\n",
		strings.TrimSpace(string(commit)), runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339), o.Interval, limit, took.Round(time.Second))
	fmt.Fprintf(&b, "| Figure | Goal |")
	for _, r := range res.Shards {
		fmt.Fprintf(&b, " %s |", r.Name)
	}
	b.WriteString("\n|---|---|")
	for range res.Shards {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	row := func(name, goal string, cell func(*shardResult) string) {
		fmt.Fprintf(&b, "| %s | %s |", name, goal)
		for _, r := range res.Shards {
			fmt.Fprintf(&b, " %s |", cell(r))
		}
		b.WriteString("\n")
	}
	row("autoscalers tracked", "", func(r *shardResult) string { return fmt.Sprintf("%.0f", r.Tracked) })
	row("bootstrap (start to first cycle done)", "≤ 2 min", func(r *shardResult) string {
		return fmt.Sprintf("%.0f s (%s)", r.Bootstrap.Seconds(), verdict(r.Bootstrap <= goalBootstrap))
	})
	row("cycles failed before it (Prometheus)", "", func(r *shardResult) string { return fmt.Sprintf("%.0f", r.BootstrapCost.Failed) })
	row("bootstrap CPU, recommender", "", func(r *shardResult) string { return seconds(r.BootstrapCost.CPUSeconds) })
	row("bootstrap: Prometheus bytes sent", "", func(r *shardResult) string { return mib(r.BootstrapCost.PromBytes) })
	row("bootstrap: Prometheus CPU", "", func(r *shardResult) string { return seconds(r.BootstrapCost.PromCPUSeconds) })
	row("bootstrap: queries", "", func(r *shardResult) string { return fmt.Sprintf("%.0f", r.BootstrapCost.Queries) })
	row("bootstrap: checkpoints restored (ignored)", "", func(r *shardResult) string {
		return fmt.Sprintf("%.0f (%.0f)", r.BootstrapCost.CheckpointsRestored, r.BootstrapCost.CheckpointsIgnored)
	})
	row("bootstrap: its cycles' steps (wall)", "", func(r *shardResult) string { return r.BootstrapCost.stepsText() })
	row("steady cycle wall, mean (max)", "", func(r *shardResult) string {
		m, x := r.perCycle(func(s snapshot) float64 { return s.CycleSeconds })
		return fmt.Sprintf("%.2f s (%.2f)", m, x)
	})
	row("steady cycle: its steps (wall), mean", "", func(r *shardResult) string { return r.meanSteps().stepsText() })
	row("steady cycle CPU, mean (max)", "≤ 2 s", func(r *shardResult) string {
		m, x := r.perCycle(func(s snapshot) float64 { return s.CPUSeconds })
		return fmt.Sprintf("%.2f s (%.2f) (%s)", m, x, verdict(x <= goalCycleCPUSeconds))
	})
	row("peak RSS (VmHWM)", "≤ 300 MiB", func(r *shardResult) string {
		return fmt.Sprintf("%s (%s)", mib(r.HWM), verdict(r.HWM <= goalRSSBytes))
	})
	row("RSS at the end", "", func(r *shardResult) string { return mib(r.RSS) })
	row("queries per cycle, mean (max)", "independent of workloads", func(r *shardResult) string {
		m, x := r.perCycle(func(s snapshot) float64 { return s.Queries })
		return fmt.Sprintf("%.1f (%.0f)", m, x)
	})
	row("API writes per cycle, mean (max)", "0 when nothing changed", func(r *shardResult) string {
		m, x := r.perCycle(func(s snapshot) float64 { return s.APIWrites })
		return fmt.Sprintf("%.1f (%.0f)", m, x)
	})
	row("recommendations written per cycle, mean (max)", "", func(r *shardResult) string {
		m, x := r.perCycle(func(s snapshot) float64 { return s.Written })
		return fmt.Sprintf("%.1f (%.0f)", m, x)
	})
	row("checkpoints written per cycle, mean (max)", "", func(r *shardResult) string {
		m, x := r.perCycle(func(s snapshot) float64 { return s.CheckpointsWritten })
		return fmt.Sprintf("%.1f (%.0f)", m, x)
	})
	row("Prometheus bytes sent per cycle (all shards)", "", func(r *shardResult) string {
		m, _ := r.perCycle(func(s snapshot) float64 { return s.PromBytes })
		return mib(m)
	})
	row("Prometheus CPU per cycle (all shards)", "", func(r *shardResult) string {
		m, _ := r.perCycle(func(s snapshot) float64 { return s.PromCPUSeconds })
		return seconds(m)
	})
	if res.Checkpoints != nil {
		b.WriteString(res.Checkpoints.markdown())
	}
	b.WriteString("\nSteady cycles, one row each (statuses changed: objects whose status differs between the cycle's ends, and the fields that changed):\n\n" +
		"| Shard | Cycle | Wall | CPU | Queries | API writes | Recommendations written | Statuses changed | Fields changed | RSS |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Shards {
		for i, c := range r.Cycles {
			fmt.Fprintf(&b, "| %s | %d | %.2f s | %.2f s | %.0f | %.0f | %.0f | %d | %s | %s |\n", r.Name, i+1, c.CycleSeconds/c.Cycles,
				c.CPUSeconds/c.Cycles, c.Queries, c.APIWrites, c.Written, r.Changes[i].Objects, r.Changes[i], mib(c.RSS))
		}
	}
	return b.String()
}

// around returns a's text around its first byte that differs from b: up to 100 bytes
// before it and 200 from it, with "…" where cut.
func around(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from, to := max(0, i-100), min(len(a), i+200)
	out := a[from:to]
	if from > 0 {
		out = "…" + out
	}
	if to < len(a) {
		out += "…"
	}
	return out
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/e2e/framework"
)

// The restart phase (--restart): the single recommender, after its steady cycles, runs
// on until every tracked workload has a GPUFractionCheckpoint; it is then stopped and
// started again, and the new process' bootstrap (from the checkpoints: only the history
// after them is read from Prometheus) and steady cycles are measured as the first's.

// checkpointFigures are the checkpoints the first recommender wrote before the restart.
type checkpointFigures struct {
	// Objects, Bytes and Largest: the GPUFractionCheckpoints listed, their JSON size in
	// all and the largest one's, bytes.
	Objects       int
	Bytes         float64
	Largest       float64
	Written       float64       // checkpoint writes of the first process up to then
	AfterBoot     time.Duration // from the end of its bootstrap until every workload had one
	CyclesToWrite float64       // cycles run from the end of its bootstrap until then
}

func (f *checkpointFigures) markdown() string {
	return fmt.Sprintf("\nCheckpoints before the restart: %d GPUFractionCheckpoints, %s in all (largest %.1f KiB, mean %.1f KiB), "+
		"%.0f writes, every workload's written %.0f s (%.0f cycles) after the first bootstrap ended.\n",
		f.Objects, mib(f.Bytes), f.Largest/1024, f.Bytes/float64(max(f.Objects, 1))/1024, f.Written, f.AfterBoot.Seconds(), f.CyclesToWrite)
}

// restart waits until old has written a checkpoint for every workload it tracks, measures
// them, stops old and starts a new recommender ("restart"), whose bootstrap and steady
// cycles are measured as the first's. It returns the new process (nil when it was not
// started), for the caller to stop.
func restart(ctx context.Context, o options, c *framework.Cluster, old *proc, boot snapshot, res *results) (*proc, error) {
	s, err := old.waitFor(ctx, c, func(s snapshot) bool { return s.CheckpointsWritten >= s.Tracked && s.Tracked > 0 },
		"a checkpoint per workload", o.Scrape, 20*o.Interval+10*time.Minute)
	if err != nil {
		return nil, err
	}
	figs := &checkpointFigures{Written: s.CheckpointsWritten, AfterBoot: s.At.Sub(boot.At), CyclesToWrite: s.Cycles - boot.Cycles}
	if err := figs.list(ctx, c.Client); err != nil {
		return nil, err
	}
	res.Checkpoints = figs
	logf("recommender %s: %.0f checkpoints written, %d objects of %s (largest %.1f KiB); restarting it",
		old.Name, s.CheckpointsWritten, figs.Objects, mib(figs.Bytes), figs.Largest/1024)
	old.stop()

	before, err := promSnapshot(c)
	if err != nil {
		return nil, err
	}
	p, err := startRecommender(o, c, "restart", "")
	if err != nil {
		return nil, err
	}
	nboot, err := p.waitCycles(ctx, c, 1, time.Second, 60*time.Minute)
	if err != nil {
		return p, err
	}
	cost := nboot
	cost.PromBytes -= before.PromBytes
	cost.PromCPUSeconds -= before.PromCPUSeconds
	r := &shardResult{Name: p.Name, namespaces: shardNamespaces(o, ""), Tracked: nboot.Tracked, Bootstrap: nboot.At.Sub(p.started), BootstrapCost: cost}
	res.Shards = append(res.Shards, r)
	logf("recommender %s: bootstrap %.1fs, %.1f s CPU, %s from Prometheus, %.0f queries, %.0f API writes, %.0f checkpoints restored (%.0f ignored), peak RSS %s",
		p.Name, r.Bootstrap.Seconds(), cost.CPUSeconds, mib(cost.PromBytes), cost.Queries, cost.APIWrites, cost.CheckpointsRestored, cost.CheckpointsIgnored, mib(cost.HWM))
	return p, steady(ctx, o, c, p, nboot, r)
}

// list counts the GPUFractionCheckpoints and their JSON sizes, a page at a time.
func (f *checkpointFigures) list(ctx context.Context, c client.Client) error {
	opts := []client.ListOption{client.Limit(200)}
	for {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gpufracv1.GroupVersion.WithKind("GPUFractionCheckpointList"))
		if err := c.List(ctx, l, opts...); err != nil {
			return fmt.Errorf("listing checkpoints: %w", err)
		}
		for i := range l.Items {
			b, err := json.Marshal(l.Items[i].Object)
			if err != nil {
				return err
			}
			f.Objects++
			f.Bytes += float64(len(b))
			f.Largest = max(f.Largest, float64(len(b)))
		}
		if l.GetContinue() == "" {
			return nil
		}
		opts = []client.ListOption{client.Limit(200), client.Continue(l.GetContinue())}
	}
}

package recommender

import (
	"context"
	"time"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// ReasonWrongDevice: MetricsUnavailable True; series of the source named a GPU that the
// pod was not on, as gpufrac's agent (or the sharing backend's annotation) saw it: with
// MPS on two GPUs, dcgm-exporter labels some pods with the other GPU, where they read 0
// (issue 13 kind 10). Those samples were not used; the agent's own were where it had
// them.
const ReasonWrongDevice = "WrongDevice"

// allocation returns the GPUs each pod was seen on by an authority other than the data
// source, for the load (from, to]: the live pods' sharing-backend annotations
// (workload.AllocatedGPUs), which speak of samples of the live pod only (from its
// creation, metrics.Allocated.From), replaced by what gpufrac's agent saw where it saw the pod
// (metrics.AllocationQuery, one range query at the memory aggregation interval). Nil
// when every source read is the agent itself: it measures the pods' own processes.
func (r *Recommender) allocation(ctx context.Context, sel metrics.Selector, from, to time.Time) (metrics.Allocation, error) {
	needed := false
	for _, s := range r.order() {
		needed = needed || !metrics.PerProcess(s.MemoryMetric())
	}
	if !needed {
		return nil, nil
	}
	alloc := metrics.Allocation{}
	for k, p := range r.cur.livePods {
		gpus, by := workload.AllocatedGPUs(p)
		for _, uuid := range gpus {
			alloc.Add(k[0], k[1], by, uuid, "")
		}
		if al, ok := alloc[k]; ok {
			// The annotation is this pod's: an earlier pod of its name (a StatefulSet
			// replica replaced onto another GPU) is the workload's history.
			al.From = p.CreationTimestamp.Time
			alloc[k] = al
		}
	}
	agg := r.model.Options().MemoryAggregationInterval
	steps := max(1, int((to.Sub(from)+agg-1)/agg))
	seen, err := r.Reader.Allocated(ctx, metrics.AllocationQuery(sel, agg), to.Add(-time.Duration(steps-1)*agg), to, agg)
	if err != nil {
		return nil, err
	}
	for k, al := range seen {
		for uuid, instances := range al.GPUs {
			for i := range instances {
				alloc.Add(k[0], k[1], al.By, uuid, i)
			}
		}
	}
	return alloc, nil
}

// agentWins replaces the series of pods that named a GPU the agent did not see them on
// (metrics.Series.WrongDevice, with the agent as the pod's authority) by the agent's own
// series of those pods, read with readData over the same slice (compute at cpu): for them the agent source
// wins. (Where the agent is read as a source too, the per-pod choice does this already:
// sources.go.) The source's series of those pods are kept without samples, to say what was not
// used. Pods whose authority is an annotation keep what was left of them. It returns
// the series unchanged, without a query, when no pod needs the agent.
func (r *Recommender) agentWins(ctx context.Context, alloc metrics.Allocation, sel metrics.Selector, from, to time.Time, cpu computeSpan,
	memory, flat, compute []metrics.Series) ([]metrics.Series, []metrics.Series, []metrics.Series, error) {
	why := map[[2]string]string{}
	for _, list := range [][]metrics.Series{memory, flat, compute} {
		for _, s := range list {
			k := [2]string{s.ID.Namespace, s.ID.Pod}
			if s.WrongDevice != "" && alloc[k].By == metrics.AllocatedByAgent {
				why[k] = s.WrongDevice + "; the agent's own series were used instead"
			}
		}
	}
	if len(why) == 0 {
		return memory, flat, compute, nil
	}
	asel := sel
	asel.Device = metrics.Agent.DeviceLabels()
	ard := *r.Reader
	ard.Device = asel.Device
	a, err := r.readData(ctx, &ard, metrics.Agent, asel, from, to, cpu, nil, false)
	if err != nil {
		return nil, nil, nil, err
	}
	am, af, ac := a.memory, a.flat, a.compute
	replace := func(src, agent []metrics.Series) []metrics.Series {
		out := make([]metrics.Series, 0, len(src))
		for _, s := range src {
			if w, ok := why[[2]string{s.ID.Namespace, s.ID.Pod}]; ok {
				s.Samples, s.Sources, s.WrongDevice, s.SharedSamples = nil, nil, w, 0
			}
			out = append(out, s)
		}
		for _, s := range agent {
			if w, ok := why[[2]string{s.ID.Namespace, s.ID.Pod}]; ok {
				s.WrongDevice = w
				out = append(out, s)
			}
		}
		return out
	}
	return replace(memory, am), replace(flat, af), replace(compute, ac), nil
}

// wrongDevice names the pods whose series named a GPU they were not on this cycle
// (ReasonWrongDevice), or "".
func (r *Recommender) wrongDevice(w history.WorkloadKey) string {
	if t := r.tracked[w]; t != nil {
		return firstOfPods(t.gaps.wrongDevice)
	}
	return ""
}

package metrics

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Allocation says, per pod (namespace, pod), which GPUs an authority other than the data
// source saw it on: gpufrac's agent (the GPUs its processes run on, from NVML and the
// pod's cgroups) or the sharing backend's pod annotation (HAMi's
// hami.io/vgpu-devices-allocated). A data series that names another GPU for the pod
// contradicts it (issue 13 kind 10: with MPS on two GPUs, dcgm-exporter labels some pods
// with the other GPU, where they read 0); Reader.decode drops its samples
// (DropWrongDevice) and says so (Series.WrongDevice). A pod it does not list is not
// checked.
type Allocation map[[2]string]Allocated

// Allocated is the GPUs of one pod as one authority saw them.
type Allocated struct {
	// By names the authority: AllocatedByAgent or the annotation's name.
	By string
	// GPUs maps a GPU's UUID to the MIG GPU instance IDs seen on it ("" for the whole GPU
	// or an authority that does not say).
	GPUs map[string]map[string]bool
	// From is when the pod the authority speaks of was created: a live pod's annotation
	// says nothing of an earlier pod of its name (a StatefulSet replica before it was
	// replaced onto another GPU), whose samples are the workload's history. Samples
	// stamped at or before From are not checked (earlier). Zero: the authority speaks of
	// every pod of the name (the agent's GPUs are those it saw a process of the name on
	// over the load).
	From time.Time
}

// earlier reports whether a sample stamped at t may aggregate usage of an earlier pod
// of the name, which the authority does not speak of: all of it (stamped at or before
// From), or part of it (its window, and Prometheus' lookback before it, AgentCoverage,
// reach back before From: straddles).
func (al Allocated) earlier(t model.Time, window time.Duration) (all, straddles bool) {
	if al.From.IsZero() {
		return false, false
	}
	from := model.TimeFromUnixNano(al.From.UnixNano())
	return t <= from, t.Add(-window-AgentCoverage) < from
}

// AllocatedByAgent names gpufrac's agent as the authority of an Allocated.
const AllocatedByAgent = "the gpufrac agent"

// Add records that authority by saw the pod on the GPU uuid, MIG instance instance (""
// for none). A pod the agent saw keeps the agent's word only: it measures the pod's own
// processes, where an annotation records what a scheduler meant.
func (a Allocation) Add(namespace, pod, by, uuid, instance string) {
	k := [2]string{namespace, pod}
	al, ok := a[k]
	if !ok || (al.By != by && by == AllocatedByAgent) {
		al = Allocated{By: by, GPUs: map[string]map[string]bool{}}
	} else if al.By != by {
		return // the agent's word stands
	}
	if al.GPUs[uuid] == nil {
		al.GPUs[uuid] = map[string]bool{}
	}
	al.GPUs[uuid][instance] = true
	a[k] = al
}

// String lists the GPUs (UUID, or UUID/instance on MIG), sorted.
func (al Allocated) String() string {
	var out []string
	for uuid, inst := range al.GPUs {
		for i := range inst {
			if i == "" {
				out = append(out, uuid)
			} else {
				out = append(out, uuid+"/"+i)
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// contradicts reports whether the series of the pod names a GPU (or MIG instance) the
// pod's authority did not see it on, with the device it names; a series that names no
// device, or a pod without an allocation, contradicts nothing. Which of its samples the
// authority speaks of is Allocated.earlier's.
func (a Allocation) contradicts(id ContainerID, m model.Metric) (Allocated, string, bool) {
	al, ok := a[[2]string{id.Namespace, id.Pod}]
	if !ok {
		return Allocated{}, "", false
	}
	uuid := ""
	for _, l := range DeviceUUIDLabels {
		if v := m[model.LabelName(l)]; v != "" {
			uuid = string(v)
			break
		}
	}
	if uuid == "" {
		return Allocated{}, "", false
	}
	inst, ok := al.GPUs[uuid]
	if !ok {
		return al, uuid, true
	}
	gi := string(m[MIGInstanceLabel])
	if gi == "" || inst[""] || inst[gi] {
		return Allocated{}, "", false
	}
	return al, uuid + "/" + gi, true
}

// AllocationQuery returns PromQL whose result has one series per (namespace, pod, UUID,
// GPU_I_ID) on which gpufrac's agent reported the pod's processes
// (gpufrac_pod_gpu_memory_used_bytes) in the window ending at the evaluation time, in
// the selector's label names (exported_* read as in Series).
func AllocationQuery(sel Selector, window time.Duration) string {
	f := Agent.Fields(SignalMemory)[0]
	by := append([]string{sel.Labels.Namespace, sel.Labels.Pod}, Agent.DeviceLabels()...)
	return fmt.Sprintf("group by (%s) (%s)", strings.Join(by, ", "), sel.Series("last_over_time", f.Metric, f.Unit.max(), window))
}

// Allocated runs AllocationQuery's PromQL (query) over [start, end] at step and returns
// the GPUs the agent saw each pod on. Errors (including partial answers) are returned
// like any query's.
func (r *Reader) Allocated(ctx context.Context, query string, start, end time.Time, step time.Duration) (Allocation, error) {
	m, err := r.rangeMatrix(ctx, query, start, end, step)
	if err != nil {
		return nil, err
	}
	out := Allocation{}
	for _, s := range m {
		ns, pod := string(s.Metric[model.LabelName(r.Labels.Namespace)]), string(s.Metric[model.LabelName(r.Labels.Pod)])
		uuid := string(s.Metric["UUID"])
		if ns == "" || pod == "" || uuid == "" || len(s.Values) == 0 {
			continue
		}
		out.Add(ns, pod, AllocatedByAgent, uuid, string(s.Metric[MIGInstanceLabel]))
	}
	return out, nil
}

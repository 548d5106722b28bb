// Package trace holds an in-memory model of GPU usage traces of inference pods,
// readers for public and user-exported traces, a seeded synthetic trace generator,
// and writers that turn a trace into what a cluster would show: OpenMetrics text as
// dcgm-exporter and kube-state-metrics expose it (for promtool backfill), Kubernetes
// manifests of the workloads, and a plain long CSV.
//
// Units are fixed throughout the package: GPU memory in bytes, GPU compute as a
// ratio of one GPU's activity in [0, 1] (DCGM duty cycle / 100), latency in seconds,
// and absolute times (time.Time, UTC).
package trace

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Point is one sample of a signal. T is the absolute sample time; V is the value in
// the unit of the series that holds it (see Pod).
type Point struct {
	T time.Time
	V float64
}

// Pod is one pod (one container of it) of a trace: its workload identity and its
// samples. Every series is sorted by time with strictly increasing times.
type Pod struct {
	// Namespace is the Kubernetes namespace of the pod.
	Namespace string
	// Workload is the name of the Deployment that owns the pod.
	Workload string
	// ReplicaSet is the name of the ReplicaSet between the Deployment and the pod,
	// "<Workload>-<pod-template-hash>".
	ReplicaSet string
	// Pod is the pod name, "<ReplicaSet>-<suffix>" by the Deployment convention.
	Pod string
	// Container is the name of the container that uses the GPU.
	Container string
	// ID is the pod's identity in its source, for tracing it back (GenTD26:
	// container_ip, the publishers' MD5 hash of the pod; synthetic:
	// "synth/<seed>/<workload>/<replica>"; long CSV: empty). Writers do not use it:
	// they derive the fake GPU UUID, pod UID and node name from namespace, pod and
	// container, so a trace gives the same output after a long CSV round trip.
	ID string
	// Memory is the GPU memory used by the container, bytes.
	Memory []Point
	// Compute is the GPU activity of the container as a ratio 0–1 of one GPU
	// (DCGM duty cycle in percent / 100).
	Compute []Point
	// LatencyP95 is the per-minute 95th percentile inference latency, seconds; a
	// point at T covers requests in [T-1m, T). It may be empty.
	LatencyP95 []Point
}

// Trace is a set of pods with their samples.
type Trace struct {
	Pods []Pod
}

// Workload is one Deployment of a trace: its namespace and name, and the indexes
// into Trace.Pods of its pods, in trace order.
type Workload struct {
	Namespace string
	Name      string
	Pods      []int
}

// Workloads groups the trace's pods by (namespace, workload) in order of first
// appearance.
func (t *Trace) Workloads() []Workload {
	idx := map[[2]string]int{}
	var out []Workload
	for i, p := range t.Pods {
		k := [2]string{p.Namespace, p.Workload}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Workload{Namespace: p.Namespace, Name: p.Workload})
		}
		out[j].Pods = append(out[j].Pods, i)
	}
	return out
}

// Summary is a short description of a trace.
type Summary struct {
	// Pods is the number of trace pods (containers) and Workloads the number of
	// distinct (namespace, workload) pairs.
	Pods, Workloads int
	// MemorySamples, ComputeSamples and LatencySamples count points per signal.
	MemorySamples, ComputeSamples, LatencySamples int
	// Start and End are the earliest and latest sample times of any signal; both are
	// zero for an empty trace.
	Start, End time.Time
}

// Summarize counts the trace's pods, workloads and samples and finds its time range.
func (t *Trace) Summarize() Summary {
	s := Summary{Pods: len(t.Pods), Workloads: len(t.Workloads())}
	see := func(ps []Point) {
		if len(ps) == 0 {
			return
		}
		if s.Start.IsZero() || ps[0].T.Before(s.Start) {
			s.Start = ps[0].T
		}
		if last := ps[len(ps)-1].T; s.End.IsZero() || last.After(s.End) {
			s.End = last
		}
	}
	for _, p := range t.Pods {
		s.MemorySamples += len(p.Memory)
		s.ComputeSamples += len(p.Compute)
		s.LatencySamples += len(p.LatencyP95)
		see(p.Memory)
		see(p.Compute)
		see(p.LatencyP95)
	}
	return s
}

// String renders the summary on one line, e.g.
// "90 pods, 90 workloads, samples memory=100375 compute=98859 latency=1843, first sample 2026-01-01T00:00:00Z, last sample 2026-01-01T22:48:00Z (22h48m0s)".
// The times are the samples' own, labelled so: gpufrac simulate's report gives the
// bounds of its steps instead, whose first ends at the first sample (one step earlier).
func (s Summary) String() string {
	r := "no samples"
	if !s.Start.IsZero() {
		r = fmt.Sprintf("first sample %s, last sample %s (%s)", s.Start.UTC().Format(time.RFC3339), s.End.UTC().Format(time.RFC3339), s.End.Sub(s.Start))
	}
	return fmt.Sprintf("%d pods, %d workloads, samples memory=%d compute=%d latency=%d, %s",
		s.Pods, s.Workloads, s.MemorySamples, s.ComputeSamples, s.LatencySamples, r)
}

// MinTime and MaxTime bound the sample times a trace can be written with and read back:
// the long CSV reader takes Unix seconds 0 to 1e11 (1970 to the year 5138), and
// Prometheus and promtool backfill no time before 1970.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Unix(1e11, 0).UTC()
)

// ShiftToEnd moves every sample by one whole number of seconds so that the last
// sample of the trace lies at end truncated to the second. The shift is counted in
// milliseconds, so it may span more than a time.Duration's 292 years. An empty trace
// is left as is.
func (t *Trace) ShiftToEnd(end time.Time) {
	last := t.Summarize().End
	if last.IsZero() {
		return
	}
	d := end.Truncate(time.Second).UnixMilli() - last.UnixMilli()
	d -= d % 1000 // whole seconds, so second-aligned input stays aligned
	for i := range t.Pods {
		for _, s := range []([]Point){t.Pods[i].Memory, t.Pods[i].Compute, t.Pods[i].LatencyP95} {
			for j := range s {
				s[j].T = time.UnixMilli(s[j].T.UnixMilli() + d).UTC()
			}
		}
	}
}

// Validate checks what every writer relies on: names are set, (namespace, pod,
// container) is unique, a pod name belongs to one workload and ReplicaSet, every
// series has strictly increasing times at millisecond resolution (what Prometheus
// stores), and values are finite and in range (memory
// ≥ 0 bytes, compute in [0, 1], latency ≥ 0 s). The error names the pod and series.
func (t *Trace) Validate() error {
	type podKey struct{ ns, pod string }
	owners := map[podKey][2]string{}
	seen := map[[3]string]bool{}
	for i := range t.Pods {
		p := &t.Pods[i]
		if p.Namespace == "" || p.Workload == "" || p.ReplicaSet == "" || p.Pod == "" || p.Container == "" {
			return fmt.Errorf("trace pod %d (%s/%s): namespace, workload, replicaset, pod and container must all be set", i, p.Namespace, p.Pod)
		}
		ck := [3]string{p.Namespace, p.Pod, p.Container}
		if seen[ck] {
			return fmt.Errorf("trace pod %s/%s container %s appears twice", p.Namespace, p.Pod, p.Container)
		}
		seen[ck] = true
		pk := podKey{p.Namespace, p.Pod}
		o := [2]string{p.Workload, p.ReplicaSet}
		if prev, ok := owners[pk]; ok && prev != o {
			return fmt.Errorf("trace pod %s/%s has two owners: %s/%s and %s/%s", p.Namespace, p.Pod, prev[0], prev[1], o[0], o[1])
		}
		owners[pk] = o
		for _, s := range []struct {
			name string
			ps   []Point
			max  float64
		}{{"memory", p.Memory, math.Inf(1)}, {"compute", p.Compute, 1}, {"latency", p.LatencyP95, math.Inf(1)}} {
			for j, pt := range s.ps {
				if math.IsNaN(pt.V) || math.IsInf(pt.V, 0) || pt.V < 0 || pt.V > s.max {
					return fmt.Errorf("trace pod %s/%s %s sample %d at %s: value %v out of range", p.Namespace, p.Pod, s.name, j, pt.T.UTC().Format(time.RFC3339Nano), pt.V)
				}
				if j > 0 && pt.T.UnixMilli() <= s.ps[j-1].T.UnixMilli() {
					return fmt.Errorf("trace pod %s/%s %s sample %d at %s: times not strictly increasing at millisecond resolution", p.Namespace, p.Pod, s.name, j, pt.T.UTC().Format(time.RFC3339Nano))
				}
			}
		}
	}
	return nil
}

// sortedPodTimes returns the union of the memory and compute sample times of the
// given pods, sorted and without duplicates, as Unix milliseconds.
func sortedPodTimes(pods []*Pod) []int64 {
	var ts []int64
	for _, p := range pods {
		for _, pt := range p.Memory {
			ts = append(ts, pt.T.UnixMilli())
		}
		for _, pt := range p.Compute {
			ts = append(ts, pt.T.UnixMilli())
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	out := ts[:0]
	for i, v := range ts {
		if i == 0 || v != ts[i-1] {
			out = append(out, v)
		}
	}
	return out
}

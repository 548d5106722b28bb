package trace

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Column names of the long CSV format (one row per pod and timestamp).
const (
	// LongTimestamp is the sample time: Unix seconds (fraction allowed) or RFC 3339.
	LongTimestamp = "timestamp"
	// LongNamespace is the pod's namespace.
	LongNamespace = "namespace"
	// LongPod is the pod name.
	LongPod = "pod"
	// LongContainer is the container name.
	LongContainer = "container"
	// LongWorkload is the optional Deployment name of the pod.
	LongWorkload = "workload"
	// LongMemory is GPU memory used, bytes (an empty cell: no sample).
	LongMemory = "memory_bytes"
	// LongCompute is GPU activity as a ratio 0–1 (an empty cell: no sample).
	LongCompute = "compute_ratio"
	// LongLatency is the optional per-minute p95 inference latency, seconds.
	LongLatency = "latency_p95_seconds"
)

// ReadLongCSV reads the plain long format, the CSV with header
// "timestamp,namespace,pod,container,memory_bytes,compute_ratio" (any column order,
// found by name) and the optional columns "workload" and "latency_p95_seconds". name
// labels errors and Stats. An empty memory, compute or latency cell means no sample
// of that signal at that time.
//
// The workload (Deployment) and ReplicaSet come from the pod name by the Deployment
// convention "<deployment>-<pod-template-hash>-<suffix>" (SplitDeploymentPodName).
// With a workload column the cell names the Deployment; the ReplicaSet is then the
// pod name's prefix when the name is "<workload>-<hash>-<suffix>", otherwise
// "<workload>-<TemplateHash(namespace/workload)>". A pod name that does not follow
// the convention without a workload column is an error.
//
// Pods appear in order of their first row. Bad input is an *InputError naming name
// and line: a missing column, an empty namespace, pod or container, a value or
// timestamp that is not a number, a negative value, a pod with two workloads, or two
// different values of one signal of one container at one time. Unsorted rows are
// sorted, exact duplicates dropped, compute above 1 and memory above MaxMemoryBytes
// skipped; Stats counts each (Trimmed and Orphans stay 0).
func ReadLongCSV(r io.Reader, name string) (Trace, Stats, error) {
	st := Stats{Memory: SignalStats{File: name}, Compute: SignalStats{File: name}, Latency: SignalStats{File: name}}
	t, err := newCSVTable(r, name, LongTimestamp, LongNamespace, LongPod, LongContainer, LongMemory, LongCompute)
	if err != nil {
		return Trace{}, st, err
	}
	st.Latency.Missing = !t.has(LongLatency)
	type key struct{ ns, pod, container string }
	type acc struct {
		pod           Pod
		line          int
		mem, cpu, lat rawSeries
	}
	var order []*acc
	byKey := map[key]*acc{}
	type owner struct{ workload, rs string }
	owners := map[[2]string]owner{}
	for {
		ok, err := t.next()
		if err != nil {
			return Trace{}, st, err
		}
		if !ok {
			break
		}
		k := key{t.get(LongNamespace), t.get(LongPod), t.get(LongContainer)}
		if k.ns == "" || k.pod == "" || k.container == "" {
			return Trace{}, st, t.errf("empty namespace, pod or container")
		}
		ms, err := t.timestamp(LongTimestamp)
		if err != nil {
			return Trace{}, st, err
		}
		a := byKey[k]
		if a == nil {
			var o owner
			var ok bool
			if w := t.get(LongWorkload); w != "" {
				o.workload = w
				d, rs, split := SplitDeploymentPodName(k.pod)
				if split && d == w {
					o.rs = rs
				} else {
					o.rs = w + "-" + TemplateHash(k.ns+"/"+w)
				}
			} else if o.workload, o.rs, ok = SplitDeploymentPodName(k.pod); !ok {
				return Trace{}, st, t.errf("pod %q does not follow the Deployment naming <deployment>-<pod-template-hash>-<suffix>; add a %q column", k.pod, LongWorkload)
			}
			pk := [2]string{k.ns, k.pod}
			if prev, seen := owners[pk]; seen && prev != o {
				return Trace{}, st, t.errf("pod %s/%s has workload %q here and %q before", k.ns, k.pod, o.workload, prev.workload)
			}
			owners[pk] = o
			a = &acc{line: t.line, pod: Pod{Namespace: k.ns, Workload: o.workload, ReplicaSet: o.rs, Pod: k.pod, Container: k.container}}
			byKey[k] = a
			order = append(order, a)
		} else if w := t.get(LongWorkload); w != "" && w != a.pod.Workload {
			return Trace{}, st, t.errf("pod %s/%s has workload %q here and %q before", k.ns, k.pod, w, a.pod.Workload)
		}
		for _, c := range []struct {
			col string
			max float64
			rs  *rawSeries
			st  *SignalStats
		}{
			{LongMemory, MaxMemoryBytes, &a.mem, &st.Memory},
			{LongCompute, 1, &a.cpu, &st.Compute},
			{LongLatency, 0, &a.lat, &st.Latency},
		} {
			if t.get(c.col) == "" {
				continue
			}
			c.st.Values++
			v, err := t.number(c.col)
			if err != nil {
				return Trace{}, st, err
			}
			if c.max > 0 && v > c.max {
				c.st.OutOfRange++
				continue
			}
			c.rs.add(rawPoint{ms: ms, v: v, line: t.line}, c.st)
		}
	}
	var tr Trace
	for _, a := range order {
		id := a.pod.Namespace + "/" + a.pod.Pod + " container " + a.pod.Container
		for _, c := range []struct {
			rs  *rawSeries
			st  *SignalStats
			dst *[]Point
		}{{&a.mem, &st.Memory, &a.pod.Memory}, {&a.cpu, &st.Compute, &a.pod.Compute}, {&a.lat, &st.Latency, &a.pod.LatencyP95}} {
			pts, err := c.rs.finish(name, id, false, c.st)
			if err != nil {
				return Trace{}, st, err
			}
			*c.dst = toPoints(pts, 0, 1)
			c.st.Kept += len(pts)
			c.st.Samples += len(pts)
		}
		tr.Pods = append(tr.Pods, a.pod)
	}
	return tr, st, nil
}

// WriteLongCSV writes the trace in the long format that ReadLongCSV reads, with a
// workload column, and a latency_p95_seconds column when any pod has latency. Rows
// go pod by pod, in time order; a row holds every signal sampled at that time and
// leaves the others empty. Times are Unix seconds (with milliseconds when not
// whole), memory in bytes, compute as a ratio 0–1, latency in seconds. The trace
// must pass Validate.
func WriteLongCSV(w io.Writer, t Trace) error {
	if err := t.Validate(); err != nil {
		return err
	}
	hasLat := false
	for _, p := range t.Pods {
		hasLat = hasLat || len(p.LatencyP95) > 0
	}
	bw := bufio.NewWriter(w)
	cols := []string{LongTimestamp, LongNamespace, LongPod, LongContainer, LongWorkload, LongMemory, LongCompute}
	if hasLat {
		cols = append(cols, LongLatency)
	}
	bw.WriteString(strings.Join(cols, ",") + "\n")
	var buf []byte
	for _, p := range t.Pods {
		series := [][]Point{p.Memory, p.Compute, p.LatencyP95}
		if !hasLat {
			series = series[:2]
		}
		var ts []int64
		for _, s := range series {
			for _, pt := range s {
				ts = append(ts, pt.T.UnixMilli())
			}
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		idx := make([]int, len(series))
		prefix := "," + csvField(p.Namespace) + "," + csvField(p.Pod) + "," + csvField(p.Container) + "," + csvField(p.Workload)
		for i, ms := range ts {
			if i > 0 && ms == ts[i-1] {
				continue
			}
			buf = appendUnixSeconds(buf[:0], ms)
			buf = append(buf, prefix...)
			for k, s := range series {
				buf = append(buf, ',')
				if idx[k] < len(s) && s[idx[k]].T.UnixMilli() == ms {
					buf = strconv.AppendFloat(buf, s[idx[k]].V, 'f', -1, 64)
					idx[k]++
				}
			}
			buf = append(buf, '\n')
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// appendUnixSeconds appends Unix milliseconds as seconds: "1662858720" or
// "1662858720.5" (shortest exact decimal).
func appendUnixSeconds(b []byte, ms int64) []byte {
	sec, frac := floorDiv(ms, 1000), ms-floorDiv(ms, 1000)*1000
	b = strconv.AppendInt(b, sec, 10)
	if frac != 0 {
		f := fmt.Sprintf("%03d", frac)
		b = append(b, '.')
		b = append(b, strings.TrimRight(f, "0")...)
	}
	return b
}

// csvField quotes s when CSV needs it.
func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

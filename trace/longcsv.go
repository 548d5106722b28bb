package trace

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
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
// and line: a missing column, an empty namespace, pod or container, a namespace, pod,
// container or workload (or the ReplicaSet made from it) the API server would refuse
// as a name, a value or timestamp that is not a number, a negative value, a pod with
// two workloads, or two different values of one signal of one container at one time. Unsorted rows are
// sorted, exact duplicates dropped, compute above 1 and memory above MaxMemoryBytes
// skipped; Stats counts each (Trimmed and Orphans stay 0).
func ReadLongCSV(r io.Reader, name string) (Trace, Stats, error) {
	st := Stats{Memory: SignalStats{File: name}, Compute: SignalStats{File: name}, Latency: SignalStats{File: name}}
	t, err := newCSVTable(r, name, LongTimestamp, LongNamespace, LongPod, LongContainer, LongMemory, LongCompute)
	if err != nil {
		return Trace{}, st, err
	}
	st.Latency.Missing = !t.has(LongLatency)
	lr := &longReader{t: t, st: &st, byKey: map[longKey]*longContainer{}, owners: map[[2]string]longOwner{}}
	for {
		ok, err := t.next()
		if err != nil {
			return Trace{}, st, err
		}
		if !ok {
			break
		}
		if err := lr.row(); err != nil {
			return Trace{}, st, err
		}
	}
	tr, err := lr.trace(name)
	return tr, st, err
}

// longReader gathers the rows of a long CSV per container, in the order of their first
// rows.
type longReader struct {
	t      *csvTable
	st     *Stats
	order  []*longContainer
	byKey  map[longKey]*longContainer
	owners map[[2]string]longOwner // by namespace and pod
}

type longKey struct{ ns, pod, container string }

// longOwner is a pod's Deployment (workload) and ReplicaSet.
type longOwner struct{ workload, rs string }

// longContainer is one container's pod and raw series, first seen at line.
type longContainer struct {
	pod           Pod
	line          int
	mem, cpu, lat rawSeries
}

// row adds the current row's samples to its container.
func (lr *longReader) row() error {
	t := lr.t
	k := longKey{t.get(LongNamespace), t.get(LongPod), t.get(LongContainer)}
	if k.ns == "" || k.pod == "" || k.container == "" {
		return t.errf("empty namespace, pod or container")
	}
	ms, err := t.timestamp(LongTimestamp)
	if err != nil {
		return err
	}
	a, err := lr.container(k)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		col  string
		max  float64
		rule string
		rs   *rawSeries
		st   *SignalStats
	}{
		{LongMemory, MaxMemoryBytes, memoryRule, &a.mem, &lr.st.Memory},
		{LongCompute, 1, "above 1: compute_ratio is a ratio 0–1, not percent", &a.cpu, &lr.st.Compute},
		{LongLatency, 0, "", &a.lat, &lr.st.Latency},
	} {
		if t.get(c.col) == "" {
			continue
		}
		c.st.Values++
		v, err := t.number(c.col)
		if err != nil {
			return err
		}
		if c.max > 0 && v > c.max {
			c.st.outOfRange(t.file, t.line, c.col, v, c.rule)
			continue
		}
		c.rs.add(rawPoint{ms: ms, v: v, line: t.line}, c.st)
	}
	return nil
}

// container returns the container of k, created at its first row with the pod's owner;
// a row whose workload differs from the pod's earlier rows is an error.
func (lr *longReader) container(k longKey) (*longContainer, error) {
	t := lr.t
	if a := lr.byKey[k]; a != nil {
		if w := t.get(LongWorkload); w != "" && w != a.pod.Workload {
			return nil, t.errf("pod %s/%s has workload %q here and %q before", k.ns, k.pod, w, a.pod.Workload)
		}
		return a, nil
	}
	o, err := lr.owner(k)
	if err != nil {
		return nil, err
	}
	if err := lr.checkNames(k, o); err != nil {
		return nil, err
	}
	pk := [2]string{k.ns, k.pod}
	if prev, seen := lr.owners[pk]; seen && prev != o {
		return nil, t.errf("pod %s/%s has workload %q here and %q before", k.ns, k.pod, o.workload, prev.workload)
	}
	lr.owners[pk] = o
	a := &longContainer{line: t.line, pod: Pod{Namespace: k.ns, Workload: o.workload, ReplicaSet: o.rs, Pod: k.pod, Container: k.container}}
	lr.byKey[k] = a
	lr.order = append(lr.order, a)
	return a, nil
}

// checkNames reports, at the container's first row, a namespace, pod, container,
// workload or derived ReplicaSet name the API server would refuse (apimachinery's
// validation: namespace and container a DNS-1123 label, the others a DNS-1123
// subdomain): the manifests and series written from the trace would name objects that
// cannot exist.
func (lr *longReader) checkNames(k longKey, o longOwner) error {
	err := invalidName(
		nameCheck{LongNamespace, k.ns, validation.IsDNS1123Label},
		nameCheck{LongPod, k.pod, validation.IsDNS1123Subdomain},
		nameCheck{LongContainer, k.container, validation.IsDNS1123Label},
		nameCheck{LongWorkload, o.workload, validation.IsDNS1123Subdomain},
		nameCheck{"ReplicaSet (workload-hash)", o.rs, validation.IsDNS1123Subdomain},
	)
	if err != nil {
		return lr.t.errf("%v", err)
	}
	return nil
}

// owner is the current row's workload column, with the ReplicaSet from the pod's name
// when it names that Deployment and else a stable made-up one; without the column both
// come from the pod's name, which must then follow the Deployment naming.
func (lr *longReader) owner(k longKey) (longOwner, error) {
	if w := lr.t.get(LongWorkload); w != "" {
		if d, rs, split := SplitDeploymentPodName(k.pod); split && d == w {
			return longOwner{w, rs}, nil
		}
		return longOwner{w, w + "-" + TemplateHash(k.ns+"/"+w)}, nil
	}
	w, rs, ok := SplitDeploymentPodName(k.pod)
	if !ok {
		return longOwner{}, lr.t.errf("pod %q does not follow the Deployment naming <deployment>-<pod-template-hash>-<suffix>; add a %q column", k.pod, LongWorkload)
	}
	return longOwner{w, rs}, nil
}

// trace finishes every container's series (sorted, duplicates checked) into the trace.
func (lr *longReader) trace(name string) (Trace, error) {
	var tr Trace
	for _, a := range lr.order {
		id := a.pod.Namespace + "/" + a.pod.Pod + " container " + a.pod.Container
		for _, c := range []struct {
			rs  *rawSeries
			st  *SignalStats
			dst *[]Point
		}{{&a.mem, &lr.st.Memory, &a.pod.Memory}, {&a.cpu, &lr.st.Compute, &a.pod.Compute}, {&a.lat, &lr.st.Latency, &a.pod.LatencyP95}} {
			pts, err := c.rs.finish(name, id, false, c.st)
			if err != nil {
				return Trace{}, err
			}
			*c.dst = toPoints(pts, 0, 1)
			c.st.Kept += len(pts)
			c.st.Samples += len(pts)
		}
		tr.Pods = append(tr.Pods, a.pod)
	}
	return tr, nil
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

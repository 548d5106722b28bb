package trace

import (
	"bufio"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
)

// Metric names WriteOpenMetrics emits.
const (
	// MetricFBUsed is dcgm-exporter's GPU framebuffer memory used, MiB.
	MetricFBUsed = "DCGM_FI_DEV_FB_USED"
	// MetricFBFree is dcgm-exporter's GPU framebuffer memory free, MiB
	// (capacity − used).
	MetricFBFree = "DCGM_FI_DEV_FB_FREE"
	// MetricGPUUtil is dcgm-exporter's GPU utilisation (duty cycle), percent 0–100.
	MetricGPUUtil = "DCGM_FI_DEV_GPU_UTIL"
	// MetricLatencyP95 is the replayed per-minute p95 inference latency, seconds
	// (labels namespace, pod, container).
	MetricLatencyP95 = "inference_latency_p95_seconds"
	// MetricPodOwner is kube-state-metrics' pod ownership series (value 1).
	MetricPodOwner = "kube_pod_owner"
	// MetricReplicaSetOwner is kube-state-metrics' ReplicaSet ownership series (value 1).
	MetricReplicaSetOwner = "kube_replicaset_owner"
)

// DefaultGPUMemoryBytes is the default GPU memory capacity, 80 GiB (an H800 or
// H100 80GB), used to compute DCGM_FI_DEV_FB_FREE.
const DefaultGPUMemoryBytes = 80 << 30

// DefaultGPUModelName is the default dcgm-exporter modelName label: GenTD26 ran on
// H800 GPUs.
const DefaultGPUModelName = "NVIDIA H800"

// OpenMetricsOptions configures WriteOpenMetrics.
type OpenMetricsOptions struct {
	// GPUMemoryBytes is the memory capacity of each pod's GPU, bytes
	// (0: DefaultGPUMemoryBytes). A sample above it is an error.
	GPUMemoryBytes float64
	// ModelName is the modelName label (default DefaultGPUModelName).
	ModelName string
}

// WriteOpenMetrics writes the trace as OpenMetrics text with timestamps, in the form
// dcgm-exporter (with Kubernetes pod mapping) and kube-state-metrics expose it, for
// `promtool tsdb create-blocks-from openmetrics`: the series of EachSeries, each
// family with one "# HELP" and "# TYPE name gauge" and all its samples together,
// every series in time order; timestamps are Unix seconds with millisecond
// precision; the text ends with "# EOF". It returns EachSeries' errors and the
// writer's.
func WriteOpenMetrics(w io.Writer, t Trace, opts OpenMetricsOptions) error {
	ow := &omWriter{w: bufio.NewWriterSize(w, 1<<16)}
	family := ""
	err := EachSeries(t, opts, func(s Series) error {
		if s.Name != family {
			family = s.Name
			ow.family(s.Name, s.Help)
		}
		l := labels(s.Labels...)
		for ms, v := range s.Samples {
			ow.sample(s.Name, l, v, ms)
		}
		return ow.err
	})
	if err != nil {
		return err
	}
	ow.buf = append(ow.buf[:0], "# EOF\n"...)
	ow.write()
	if ow.err != nil {
		return ow.err
	}
	return ow.w.Flush()
}

// Series is one series of a trace in the form dcgm-exporter and kube-state-metrics
// expose it (see EachSeries).
type Series struct {
	// Name is the metric name, e.g. MetricFBUsed.
	Name string
	// Help is the family's help text.
	Help string
	// Labels are label name/value pairs in the order they are written (without
	// __name__).
	Labels []string
	// Samples yields (Unix milliseconds, value) in strictly increasing time order, in
	// the series' unit (MiB, percent, seconds, or 1 for ownership series).
	Samples iter.Seq2[int64, float64]
}

// EachSeries calls fn with every series of the trace, family by family in this order
// (a family's series are consecutive), and stops at fn's first error, which it returns:
//
//   - DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (MiB, not rounded; free =
//     capacity − used) and DCGM_FI_DEV_GPU_UTIL (percent 0–100 = compute × 100),
//     labels gpu="0", UUID ("GPU-" + a UUID hashed from namespace/pod/container),
//     device="nvidia0", modelName, Hostname (a fake node name hashed likewise:
//     every trace pod holds GPU 0 of its own node), container, namespace, pod;
//   - inference_latency_p95_seconds{namespace,pod,container} (seconds), when any
//     pod has latency;
//   - kube_pod_owner{namespace,pod,uid,owner_kind="ReplicaSet",owner_name,
//     owner_is_controller="true"} and kube_replicaset_owner{namespace,replicaset,
//     owner_kind="Deployment",owner_name,owner_is_controller="true"}, value 1, at
//     every memory or compute sample time of the pod (of any pod of the ReplicaSet),
//     so ownership exists for the whole history.
//
// The trace must pass Validate; a memory sample above the GPU capacity, a negative
// capacity and a ReplicaSet of two workloads are errors, returned before fn is called.
// The same trace and options give the same series, which is what lets a backfill
// written straight into TSDB blocks match the OpenMetrics text sample for sample.
func EachSeries(t Trace, opts OpenMetricsOptions, fn func(Series) error) error {
	if opts.GPUMemoryBytes == 0 {
		opts.GPUMemoryBytes = DefaultGPUMemoryBytes
	}
	if opts.GPUMemoryBytes < 0 {
		return fmt.Errorf("GPU memory capacity %v bytes is negative", opts.GPUMemoryBytes)
	}
	if opts.ModelName == "" {
		opts.ModelName = DefaultGPUModelName
	}
	if err := t.Validate(); err != nil {
		return err
	}
	for _, p := range t.Pods {
		for _, pt := range p.Memory {
			if pt.V > opts.GPUMemoryBytes {
				return fmt.Errorf("pod %s/%s uses %.0f MiB GPU memory at %s, more than the GPU capacity %.0f MiB (raise the GPU memory capacity, gpufrac trace --gpu-memory)",
					p.Namespace, p.Pod, pt.V/mib, pt.T.UTC().Format("2006-01-02T15:04:05Z"), opts.GPUMemoryBytes/mib)
			}
		}
	}
	own, err := ownership(t)
	if err != nil {
		return err
	}
	for _, f := range sampleFamilies(t, opts) {
		for i := range t.Pods {
			ps, conv := f.points(&t.Pods[i]), f.conv
			err := fn(Series{Name: f.name, Help: f.help, Labels: f.labels[i], Samples: func(yield func(int64, float64) bool) {
				for _, pt := range ps {
					if !yield(pt.T.UnixMilli(), conv(pt.V)) {
						return
					}
				}
			}})
			if err != nil {
				return err
			}
		}
	}
	for _, o := range own {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// sampleFamily is one family of per-pod sample series (EachSeries): per pod its labels,
// the points it reads and their conversion to the family's unit.
type sampleFamily struct {
	name, help string
	labels     [][]string // by index in Trace.Pods
	points     func(p *Pod) []Point
	conv       func(float64) float64
}

// sampleFamilies returns the DCGM families and, when any pod has latency, the latency
// family, in EachSeries' order, labelled as its doc says.
func sampleFamilies(t Trace, opts OpenMetricsOptions) []sampleFamily {
	dcgm := make([][]string, len(t.Pods))
	podLabels := make([][]string, len(t.Pods))
	for i := range t.Pods {
		p := &t.Pods[i]
		dcgm[i] = []string{
			"gpu", "0",
			"UUID", "GPU-" + stableUUID("gpu", p.key()),
			"device", "nvidia0",
			"modelName", opts.ModelName,
			"Hostname", "gpunode-" + stableUUID("node", p.key())[:8],
			"container", p.Container,
			"namespace", p.Namespace,
			"pod", p.Pod}
		podLabels[i] = []string{"namespace", p.Namespace, "pod", p.Pod, "container", p.Container}
	}
	capMiB := opts.GPUMemoryBytes / mib
	families := []sampleFamily{
		{MetricFBUsed, "Framebuffer memory used (in MiB).", dcgm, func(p *Pod) []Point { return p.Memory }, func(v float64) float64 { return v / mib }},
		{MetricFBFree, "Framebuffer memory free (in MiB).", dcgm, func(p *Pod) []Point { return p.Memory }, func(v float64) float64 { return capMiB - v/mib }},
		{MetricGPUUtil, "GPU utilization (in %).", dcgm, func(p *Pod) []Point { return p.Compute }, func(v float64) float64 { return v * 100 }},
	}
	if t.Summarize().LatencySamples > 0 {
		families = append(families, sampleFamily{MetricLatencyP95, "Per-minute p95 model inference latency in seconds, replayed from a trace.",
			podLabels, func(p *Pod) []Point { return p.LatencyP95 }, func(v float64) float64 { return v }})
	}
	return families
}

// ownership returns one kube_pod_owner series per pod and one kube_replicaset_owner
// series per ReplicaSet, each at the union of its pods' sample times. It errors when a
// ReplicaSet belongs to two workloads.
func ownership(t Trace) ([]Series, error) {
	type podKey struct{ ns, pod string }
	type rsKey struct{ ns, rs string }
	var podOrder []podKey
	var rsOrder []rsKey
	podsOf := map[podKey][]*Pod{}
	rsPods := map[rsKey][]*Pod{}
	rsOwner := map[rsKey]string{}
	for i := range t.Pods {
		p := &t.Pods[i]
		pk, rk := podKey{p.Namespace, p.Pod}, rsKey{p.Namespace, p.ReplicaSet}
		if _, ok := podsOf[pk]; !ok {
			podOrder = append(podOrder, pk)
		}
		podsOf[pk] = append(podsOf[pk], p)
		if _, ok := rsPods[rk]; !ok {
			rsOrder = append(rsOrder, rk)
		} else if rsOwner[rk] != p.Workload {
			return nil, fmt.Errorf("ReplicaSet %s/%s belongs to two workloads: %s and %s", p.Namespace, p.ReplicaSet, rsOwner[rk], p.Workload)
		}
		rsPods[rk] = append(rsPods[rk], p)
		rsOwner[rk] = p.Workload
	}
	var out []Series
	for _, pk := range podOrder {
		p := podsOf[pk][0]
		out = append(out, Series{Name: MetricPodOwner, Help: "Information about the Pod's owner.",
			Labels: []string{"namespace", p.Namespace, "pod", p.Pod, "uid", stableUUID("pod", p.Namespace+"/"+p.Pod),
				"owner_kind", "ReplicaSet", "owner_name", p.ReplicaSet, "owner_is_controller", "true"},
			Samples: ones(podsOf[pk])})
	}
	for _, rk := range rsOrder {
		out = append(out, Series{Name: MetricReplicaSetOwner, Help: "Information about the ReplicaSet's owner.",
			Labels: []string{"namespace", rk.ns, "replicaset", rk.rs,
				"owner_kind", "Deployment", "owner_name", rsOwner[rk], "owner_is_controller", "true"},
			Samples: ones(rsPods[rk])})
	}
	return out, nil
}

// ones yields value 1 at each memory or compute sample time of pods (Unix
// milliseconds), computed when iterated.
func ones(pods []*Pod) iter.Seq2[int64, float64] {
	return func(yield func(int64, float64) bool) {
		for _, m := range sortedPodTimes(pods) {
			if !yield(m, 1) {
				return
			}
		}
	}
}

const mib = 1 << 20

type omWriter struct {
	w   *bufio.Writer
	buf []byte
	err error
}

func (o *omWriter) write() {
	if o.err == nil {
		_, o.err = o.w.Write(o.buf)
	}
}

func (o *omWriter) family(name, help string) {
	o.buf = append(o.buf[:0], "# HELP "+name+" "+escapeHelp(help)+"\n# TYPE "+name+" gauge\n"...)
	o.write()
}

func (o *omWriter) sample(name, labels string, v float64, ms int64) {
	o.buf = append(o.buf[:0], name...)
	o.buf = append(o.buf, labels...)
	o.buf = append(o.buf, ' ')
	o.buf = strconv.AppendFloat(o.buf, v, 'f', -1, 64)
	o.buf = append(o.buf, ' ')
	o.buf = appendUnixSeconds(o.buf, ms)
	o.buf = append(o.buf, '\n')
	o.write()
}

// labels renders name/value pairs as an OpenMetrics label set.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(escapeLabel(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

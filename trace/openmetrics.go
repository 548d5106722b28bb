package trace

import (
	"bufio"
	"fmt"
	"io"
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
// `promtool tsdb create-blocks-from openmetrics`:
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
// Each family has one "# HELP" and "# TYPE name gauge" and all its samples together,
// every series in time order; timestamps are Unix seconds with millisecond
// precision; the text ends with "# EOF". The trace must pass Validate; a memory
// sample above the GPU capacity is an error.
func WriteOpenMetrics(w io.Writer, t Trace, opts OpenMetricsOptions) error {
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
				return fmt.Errorf("pod %s/%s uses %.0f MiB GPU memory at %s, more than the GPU capacity %.0f MiB (raise the GPU memory capacity)",
					p.Namespace, p.Pod, pt.V/mib, pt.T.UTC().Format("2006-01-02T15:04:05Z"), opts.GPUMemoryBytes/mib)
			}
		}
	}
	ow := &omWriter{w: bufio.NewWriterSize(w, 1<<16)}

	dcgm := make([]string, len(t.Pods))
	podLabels := make([]string, len(t.Pods))
	for i := range t.Pods {
		p := &t.Pods[i]
		dcgm[i] = labels(
			"gpu", "0",
			"UUID", "GPU-"+stableUUID("gpu", p.key()),
			"device", "nvidia0",
			"modelName", opts.ModelName,
			"Hostname", "gpunode-"+stableUUID("node", p.key())[:8],
			"container", p.Container,
			"namespace", p.Namespace,
			"pod", p.Pod)
		podLabels[i] = labels("namespace", p.Namespace, "pod", p.Pod, "container", p.Container)
	}
	capMiB := opts.GPUMemoryBytes / mib

	ow.family(MetricFBUsed, "Framebuffer memory used (in MiB).")
	for i, p := range t.Pods {
		ow.series(MetricFBUsed, dcgm[i], p.Memory, func(v float64) float64 { return v / mib })
	}
	ow.family(MetricFBFree, "Framebuffer memory free (in MiB).")
	for i, p := range t.Pods {
		ow.series(MetricFBFree, dcgm[i], p.Memory, func(v float64) float64 { return capMiB - v/mib })
	}
	ow.family(MetricGPUUtil, "GPU utilization (in %).")
	for i, p := range t.Pods {
		ow.series(MetricGPUUtil, dcgm[i], p.Compute, func(v float64) float64 { return v * 100 })
	}
	if t.Summarize().LatencySamples > 0 {
		ow.family(MetricLatencyP95, "Per-minute p95 model inference latency in seconds, replayed from a trace.")
		for i, p := range t.Pods {
			ow.series(MetricLatencyP95, podLabels[i], p.LatencyP95, nil)
		}
	}

	// Ownership: one kube_pod_owner series per pod, one kube_replicaset_owner
	// series per ReplicaSet, each at the union of its pods' sample times.
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
			return fmt.Errorf("ReplicaSet %s/%s belongs to two workloads: %s and %s", p.Namespace, p.ReplicaSet, rsOwner[rk], p.Workload)
		}
		rsPods[rk] = append(rsPods[rk], p)
		rsOwner[rk] = p.Workload
	}
	ow.family(MetricPodOwner, "Information about the Pod's owner.")
	for _, pk := range podOrder {
		p := podsOf[pk][0]
		l := labels("namespace", p.Namespace, "pod", p.Pod, "uid", stableUUID("pod", p.Namespace+"/"+p.Pod),
			"owner_kind", "ReplicaSet", "owner_name", p.ReplicaSet, "owner_is_controller", "true")
		ow.ones(MetricPodOwner, l, sortedPodTimes(podsOf[pk]))
	}
	ow.family(MetricReplicaSetOwner, "Information about the ReplicaSet's owner.")
	for _, rk := range rsOrder {
		l := labels("namespace", rk.ns, "replicaset", rk.rs,
			"owner_kind", "Deployment", "owner_name", rsOwner[rk], "owner_is_controller", "true")
		ow.ones(MetricReplicaSetOwner, l, sortedPodTimes(rsPods[rk]))
	}
	ow.buf = append(ow.buf[:0], "# EOF\n"...)
	ow.write()
	if ow.err != nil {
		return ow.err
	}
	return ow.w.Flush()
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

func (o *omWriter) series(name, labels string, ps []Point, conv func(float64) float64) {
	for _, pt := range ps {
		v := pt.V
		if conv != nil {
			v = conv(v)
		}
		o.sample(name, labels, v, pt.T.UnixMilli())
	}
}

func (o *omWriter) ones(name, labels string, ms []int64) {
	for _, m := range ms {
		o.sample(name, labels, 1, m)
	}
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

package recommender

import (
	"math"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// Per-autoscaler metrics, rebuilt at the end of every cycle from what the cycle wrote.
// Only the leader runs cycles, so only the leader exports them and joins on
// (namespace, autoscaler) in rules and dashboards see one series each.
var (
	descInfo = prometheus.NewDesc("gpufrac_autoscaler_info", "One per GPUFractionAutoscaler, always 1.",
		[]string{"namespace", "autoscaler", "target_kind", "target_name", "update_mode", "backend", "sharing_mode"}, nil)
	descPodInfo = prometheus.NewDesc("gpufrac_autoscaler_pod_info", "1 for each live pod of an autoscaler's workload.",
		[]string{"namespace", "autoscaler", "pod"}, nil)
	descMemory = prometheus.NewDesc("gpufrac_recommendation_memory_bytes", "Recommended GPU memory per container, bytes, by bound (lower, target, upper, uncapped).",
		[]string{"namespace", "autoscaler", "container", "bound"}, nil)
	descCompute = prometheus.NewDesc("gpufrac_recommendation_compute_ratio", "Recommended GPU compute per container, share of one GPU (0–1), by bound.",
		[]string{"namespace", "autoscaler", "container", "bound"}, nil)
	descConfidence = prometheus.NewDesc("gpufrac_recommendation_confidence_ratio", "Confidence of the recommendation, 0–1.",
		[]string{"namespace", "autoscaler"}, nil)
	descCondition = prometheus.NewDesc("gpufrac_autoscaler_condition", "1 for the current status (true, false, unknown) of each recommendation condition.",
		[]string{"namespace", "autoscaler", "type", "status"}, nil)
	descLatency = prometheus.NewDesc("gpufrac_autoscaler_guardrail_latency_seconds", "Latency read by the autoscaler's guardrail query this cycle, seconds.",
		[]string{"namespace", "autoscaler"}, nil)
	descObjective = prometheus.NewDesc("gpufrac_autoscaler_guardrail_objective_seconds", "The autoscaler's latency objective, seconds.",
		[]string{"namespace", "autoscaler"}, nil)
	descHeld = prometheus.NewDesc("gpufrac_autoscaler_gpus_held", "Whole GPUs the workload's live pods hold at one per pod.",
		[]string{"namespace", "autoscaler"}, nil)
	descNeeded = prometheus.NewDesc("gpufrac_autoscaler_gpus_needed", "GPUs the live pods need by the recommendation: pods × max(memory target / GPU memory, compute target).",
		[]string{"namespace", "autoscaler"}, nil)
	descAllocated = prometheus.NewDesc("gpufrac_autoscaler_gpus_allocated",
		"Whole-GPU equivalents the workload's live pods hold now: per pod the larger of the GPU memory share and the compute share gpufrac wrote into it (gpufrac.io/applied), 1 for a pod gpufrac has not written. With gpufrac_autoscaler_gpus_held (one per pod) it is the before and after of GPUs held.",
		[]string{"namespace", "autoscaler"}, nil)
	descPeakMemory = prometheus.NewDesc("gpufrac_autoscaler_gpu_memory_peak_bytes",
		"GPU memory the workload's live pods use at their recent peak: live pods × the sum over containers of the recommendation's observedPeakMemory, bytes.",
		[]string{"namespace", "autoscaler"}, nil)
	descGPUMemory = prometheus.NewDesc("gpufrac_recommender_gpu_memory_bytes",
		"Memory of one GPU the recommender sizes against (--gpu-memory), bytes.", nil, nil)
	descAllocMem = prometheus.NewDesc("gpufrac_pod_gpu_memory_allocated_bytes", "GPU memory the admission webhook wrote into a pod's container (gpufrac.io/applied), bytes.",
		[]string{"namespace", "pod", "container", "autoscaler", "backend"}, nil)
	descAllocCPU = prometheus.NewDesc("gpufrac_pod_gpu_compute_allocated_ratio", "GPU compute the admission webhook wrote into a pod's container, share of one GPU.",
		[]string{"namespace", "pod", "container", "autoscaler", "backend"}, nil)
)

// Autoscalers is the collector of per-autoscaler metrics; Register adds it.
var Autoscalers = &autoscalerCollector{}

type autoscalerCollector struct {
	mu      sync.Mutex
	metrics []prometheus.Metric
}

// Describe sends nothing: the collector is unchecked, its series change every cycle.
func (c *autoscalerCollector) Describe(chan<- *prometheus.Desc) {}

// Collect sends the metrics of the last cycle.
func (c *autoscalerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.metrics {
		ch <- m
	}
}

func (c *autoscalerCollector) set(s *snapshot) {
	c.mu.Lock()
	c.metrics = s.metrics
	c.mu.Unlock()
}

// snapshot accumulates one cycle's metrics.
type snapshot struct {
	metrics []prometheus.Metric
}

func (s *snapshot) gauge(d *prometheus.Desc, v float64, labels ...string) {
	s.metrics = append(s.metrics, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
}

// add records one autoscaler's status as written this cycle.
func (s *snapshot) add(gfa *gpufracv1.GPUFractionAutoscaler, st *gpufracv1.GPUFractionRecommendationStatus, pods int, latency, gpuMemory float64) {
	ns, name := gfa.Namespace, gfa.Name
	mode, backend := string(gfa.Spec.EffectiveUpdateMode()), string(gfa.Spec.EffectiveBackend())
	s.gauge(descInfo, 1, ns, name, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name, mode, backend, string(st.SharingMode))
	for _, c := range st.ContainerRecommendations {
		for bound, r := range map[string]gpufracv1.GPUResources{"lower": c.LowerBound, "target": c.Target, "upper": c.UpperBound, "uncapped": c.UncappedTarget} {
			if r.Memory != nil {
				s.gauge(descMemory, r.Memory.AsApproximateFloat64(), ns, name, c.ContainerName, bound)
			}
			if r.Compute != nil {
				s.gauge(descCompute, r.Compute.AsApproximateFloat64(), ns, name, c.ContainerName, bound)
			}
		}
	}
	if st.ConfidencePercent != nil {
		s.gauge(descConfidence, float64(*st.ConfidencePercent)/100, ns, name)
	}
	for _, c := range st.Conditions {
		s.gauge(descCondition, 1, ns, name, c.Type, strings.ToLower(string(c.Status)))
	}
	if g := gfa.Spec.LatencyGuardrail; g != nil {
		s.gauge(descObjective, g.Objective.Seconds(), ns, name)
		if latency != 0 {
			s.gauge(descLatency, latency, ns, name)
		}
	}
	s.gauge(descHeld, float64(pods), ns, name)
	var peak float64
	for _, c := range st.ContainerRecommendations {
		if c.ObservedPeakMemory != nil {
			peak += c.ObservedPeakMemory.AsApproximateFloat64()
		}
	}
	if peak > 0 {
		s.gauge(descPeakMemory, float64(pods)*peak, ns, name)
	}
	if mem := st.Memory; mem != nil && gpuMemory > 0 {
		share := mem.AsApproximateFloat64() / gpuMemory
		if st.Compute != nil {
			share = math.Max(share, st.Compute.AsApproximateFloat64())
		}
		s.gauge(descNeeded, float64(pods)*math.Min(1, share), ns, name)
	}
}

// addPods records which live pods belong to which autoscaler, what was applied to them,
// and the whole-GPU equivalents they hold (AllocatedShare) against GPUs of gpuMemory
// bytes.
func (s *snapshot) addPods(pods map[[2]string]*corev1.Pod, byRef map[workload.Ref]*entry, gpuMemory float64) {
	if gpuMemory > 0 {
		s.gauge(descGPUMemory, gpuMemory)
	}
	for ref, e := range byRef {
		if e.foreign {
			continue // another shard exports it
		}
		var allocated float64
		for podName := range e.podNames {
			p := pods[[2]string{ref.Namespace, podName}]
			if p == nil {
				continue
			}
			s.gauge(descPodInfo, 1, p.Namespace, e.gfa.Name, p.Name)
			rec, err := gpufracv1.ParseApplied(p.Annotations)
			if err != nil {
				rec = nil
			}
			allocated += AllocatedShare(rec, gpuMemory)
			if rec == nil {
				continue
			}
			for _, c := range rec.Containers {
				if c.WrittenMemory != nil {
					s.gauge(descAllocMem, c.WrittenMemory.AsApproximateFloat64(), p.Namespace, p.Name, c.Name, e.gfa.Name, string(rec.Backend))
				}
				if c.WrittenCompute != nil {
					s.gauge(descAllocCPU, c.WrittenCompute.AsApproximateFloat64(), p.Namespace, p.Name, c.Name, e.gfa.Name, string(rec.Backend))
				}
			}
		}
		if gpuMemory > 0 {
			s.gauge(descAllocated, allocated, ref.Namespace, e.gfa.Name)
		}
	}
}

// AllocatedShare is the share of one GPU (0–1) a pod holds by what gpufrac wrote into it:
// the larger of the written memory over gpuMemory (bytes) and the written compute (share
// of one GPU), summed over the record's containers and capped at 1. A pod without a
// record (nil), or whose record wrote nothing, holds a whole GPU: 1. So does any pod when
// gpuMemory is not positive.
func AllocatedShare(rec *gpufracv1.AppliedRecord, gpuMemory float64) float64 {
	if rec == nil || gpuMemory <= 0 {
		return 1
	}
	var mem, compute float64
	wrote := false
	for _, c := range rec.Containers {
		if c.WrittenMemory != nil {
			mem += c.WrittenMemory.AsApproximateFloat64()
			wrote = true
		}
		if c.WrittenCompute != nil {
			compute += c.WrittenCompute.AsApproximateFloat64()
			wrote = true
		}
	}
	if !wrote {
		return 1
	}
	return math.Min(1, math.Max(mem/gpuMemory, compute))
}

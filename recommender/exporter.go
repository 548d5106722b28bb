package recommender

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// Per-autoscaler metrics, rebuilt at the end of every cycle from what the cycle wrote.
// Only the leader runs cycles, so only the leader exports them and joins on
// (namespace, autoscaler) in rules and dashboards see one series each.
var (
	descInfo       = gaugeDesc("gpufrac_autoscaler_info", "One per GPUFractionAutoscaler, always 1.", "namespace", "autoscaler", "target_kind", "target_name", "update_mode", "backend", "sharing_mode")
	descPodInfo    = gaugeDesc("gpufrac_autoscaler_pod_info", "1 for each live pod of an autoscaler's workload.", "namespace", "autoscaler", "pod")
	descMemory     = gaugeDesc("gpufrac_recommendation_memory_bytes", "Recommended GPU memory per container, bytes, by bound (lower, target, upper, uncapped).", "namespace", "autoscaler", "container", "bound")
	descCompute    = gaugeDesc("gpufrac_recommendation_compute_ratio", "Recommended GPU compute per container, share of one GPU (0–1), by bound.", "namespace", "autoscaler", "container", "bound")
	descConfidence = gaugeDesc("gpufrac_recommendation_confidence_ratio", "Confidence of the recommendation, 0–1.", "namespace", "autoscaler")
	descCondition  = gaugeDesc("gpufrac_autoscaler_condition", "1 for the current status (true, false, unknown) of each recommendation condition.", "namespace", "autoscaler", "type", "status")
	descLatency    = gaugeDesc("gpufrac_autoscaler_guardrail_latency_seconds", "Latency read by the autoscaler's guardrail query this cycle, seconds.", "namespace", "autoscaler")
	descObjective  = gaugeDesc("gpufrac_autoscaler_guardrail_objective_seconds", "The autoscaler's latency objective, seconds.", "namespace", "autoscaler")
	descHeld       = gaugeDesc("gpufrac_autoscaler_gpus_held", "Whole GPUs the workload's live pods hold at one per pod.", "namespace", "autoscaler")
	descNeeded     = gaugeDesc("gpufrac_autoscaler_gpus_needed", "GPUs the live pods need by the recommendation: pods × max(memory target / GPU memory, compute target).", "namespace", "autoscaler")
	descAllocated  = gaugeDesc("gpufrac_autoscaler_gpus_allocated",
		"Whole-GPU equivalents the workload's live pods are placed by now, from what gpufrac wrote into each (gpufrac.io/applied): per pod the larger of its memory request over --gpu-memory (the placement request written below the limit, gpufrac.io/gpu-memory-request, where there is one, else the written memory of gpufrac_pod_gpu_memory_allocated_bytes) and its written compute, share of one GPU (the compute limit of gpufrac_pod_gpu_compute_allocated_ratio, or a time-sliced pod's placement request, gpufrac.io/gpu-compute-request), at most 1; 1 for a pod gpufrac has not written. With gpufrac_autoscaler_gpus_held (one per pod) it is the before and after of GPUs held.", "namespace", "autoscaler")
	descPeakMemory = gaugeDesc("gpufrac_autoscaler_gpu_memory_peak_bytes",
		"GPU memory the workload's live pods use at their recent peak: live pods × the pod's observedPeakMemory, added up over containers as the pod's memory target is (an init container's as the largest of them, not on top of the regular containers'), bytes.", "namespace", "autoscaler")
	descGPUMemory = gaugeDesc("gpufrac_recommender_gpu_memory_bytes",
		"Memory of one GPU the recommender sizes against (--gpu-memory), bytes.")
	descAllocMem = gaugeDesc("gpufrac_pod_gpu_memory_allocated_bytes",
		"GPU memory the admission webhook wrote into a pod's container as its size, bytes (gpufrac.io/applied writtenMemory, overheads included): the memory limit (gpufrac.io/gpu-memory, HAMi gpumem, MPS, DRA, KAI), which is the recommendation's memoryLimit where above its target; for kai-nvfractions its gpu-memory.request. Not the placement request written below the limit (gpufrac.io/gpu-memory-request), which gpufrac_autoscaler_gpus_allocated counts.", "namespace", "pod", "container", "autoscaler", "backend")
	descAllocCPU = gaugeDesc("gpufrac_pod_gpu_compute_allocated_ratio",
		"GPU compute the admission webhook wrote into a pod's container as its limit, share of one GPU (gpufrac.io/applied writtenCompute): containers whose compute is partitioned (Exclusive, MPS) by a backend that writes compute. None for a time-sliced container, whose compute request (gpufrac.io/gpu-compute-request) is not recorded.", "namespace", "pod", "container", "autoscaler", "backend")
)

// Autoscalers holds the per-autoscaler and per-pod metrics of the last cycle as metric
// families, built, checked and sorted once per cycle (set), so that a scrape only copies
// their list: gathered through a registry, tens of thousands of series (2,000
// autoscalers, 10,000 pods) were collected, checked and sorted again at every scrape
// (make bench-scale, docs/benchmarks.md). It is a prometheus.Gatherer; WithAutoscalers
// serves it beside a registry.
var Autoscalers = &autoscalerMetrics{}

// families maps each per-autoscaler Desc to its family's name, help and labels (gaugeDesc).
var families = map[*prometheus.Desc]*family{}

// family is what the exporter knows of a per-autoscaler Desc: its family's name, help
// and type, and its variable labels with the order a const metric sorts them in.
type family struct {
	dto    *dto.MetricFamily // name, help and type; no metrics
	labels []string          // variable label names, in the Desc's order
	order  []int             // indexes into labels, sorted by label name
}

// gaugeDesc returns the Desc of a per-autoscaler gauge and records its family.
func gaugeDesc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(name, help, labels, nil)
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(labels[i], labels[j]) })
	families[d] = &family{
		dto:    &dto.MetricFamily{Name: ptr.To(name), Help: ptr.To(help), Type: dto.MetricType_GAUGE.Enum()},
		labels: labels,
		order:  order,
	}
	return d
}

type autoscalerMetrics struct {
	mu       sync.Mutex
	families []*dto.MetricFamily
}

// Gather returns the families of the last cycle, sorted by name, each one's metrics
// sorted by label values (as a prometheus.Registry sorts them). The families are shared
// between calls and must not be changed. It never fails.
func (a *autoscalerMetrics) Gather() ([]*dto.MetricFamily, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.families), nil
}

// set publishes the snapshot's metrics as families and empties the snapshot. A second
// metric with the same labels in a family is dropped (a registry would fail the whole
// scrape over it).
func (a *autoscalerMetrics) set(s *snapshot) {
	out := make([]*dto.MetricFamily, 0, len(s.byDesc))
	for d, ms := range s.byDesc {
		slices.SortStableFunc(ms, compareLabels)
		ms = slices.CompactFunc(ms, func(x, y *dto.Metric) bool { return compareLabels(x, y) == 0 })
		f := families[d].dto
		out = append(out, &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Metric: ms})
	}
	slices.SortFunc(out, func(x, y *dto.MetricFamily) int { return strings.Compare(x.GetName(), y.GetName()) })
	s.byDesc, s.pairs = nil, nil
	a.mu.Lock()
	a.families = out
	a.mu.Unlock()
}

// compareLabels orders metrics of one family by their label values, in the order of
// their label names (a const metric's labels are sorted by name).
func compareLabels(x, y *dto.Metric) int {
	for i := range min(len(x.Label), len(y.Label)) {
		if c := strings.Compare(x.Label[i].GetValue(), y.Label[i].GetValue()); c != 0 {
			return c
		}
	}
	return len(x.Label) - len(y.Label)
}

// RegistererGatherer is a registry: controller-runtime's metrics.Registry is one.
type RegistererGatherer interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// WithAutoscalers returns reg whose Gather also returns the per-autoscaler metrics
// (Autoscalers); registering goes to reg. cmd/recommender puts it in place of
// controller-runtime's metrics.Registry, which its /metrics handler gathers. Gather
// returns reg's error with what reg gathered, and an error when a family of reg has the
// name of a per-autoscaler family (that family of reg is then left out).
func WithAutoscalers(reg RegistererGatherer) RegistererGatherer {
	return withAutoscalers{reg}
}

type withAutoscalers struct{ RegistererGatherer }

func (w withAutoscalers) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.RegistererGatherer.Gather()
	own, _ := Autoscalers.Gather()
	out := make([]*dto.MetricFamily, 0, len(mfs)+len(own))
	names := map[string]bool{}
	for _, f := range own {
		names[f.GetName()] = true
	}
	for _, f := range mfs {
		if names[f.GetName()] {
			err = errors.Join(err, fmt.Errorf("metric family %s is both registered and a per-autoscaler family", f.GetName()))
			continue
		}
		out = append(out, f)
	}
	out = append(out, own...)
	slices.SortFunc(out, func(x, y *dto.MetricFamily) int { return strings.Compare(x.GetName(), y.GetName()) })
	return out, err
}

// snapshot accumulates one cycle's metrics as the families' metrics, by Desc. A label
// pair (name and value) is built once per cycle and shared by every metric that carries
// it (pairs): at 2,000 autoscalers and 10,000 pods the 52,000 series hold about 15,000
// distinct pairs, where const metrics (prometheus.MustNewConstMetric) built a pair per
// label per series, 21 MB of the recommender's in-use heap kept between cycles
// (make bench-scale, docs/benchmarks.md).
type snapshot struct {
	byDesc map[*prometheus.Desc][]*dto.Metric
	pairs  map[[2]string]*dto.LabelPair
	// consts, when keepConsts is set, holds the same metrics as const metrics, for the
	// tests that compare the families with what a registry gathers from them.
	keepConsts bool
	consts     []prometheus.Metric
}

// gauge adds one gauge of the family d with the values of d's variable labels, in the
// Desc's order. A value count that does not match d's labels is a programming error and
// panics, as prometheus.MustNewConstMetric does; a value that is not valid UTF-8 (never
// the case for Kubernetes names) leaves the metric out rather than break the scrape.
func (s *snapshot) gauge(d *prometheus.Desc, v float64, labels ...string) {
	f := families[d]
	if f == nil || len(labels) != len(f.labels) {
		panic(fmt.Sprintf("per-autoscaler gauge %v: %d label values", d, len(labels)))
	}
	for _, l := range labels {
		if !utf8.ValidString(l) {
			return
		}
	}
	if s.keepConsts {
		s.consts = append(s.consts, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	if s.byDesc == nil {
		s.byDesc, s.pairs = map[*prometheus.Desc][]*dto.Metric{}, map[[2]string]*dto.LabelPair{}
	}
	pairs := make([]*dto.LabelPair, len(labels))
	for i, j := range f.order {
		k := [2]string{f.labels[j], labels[j]}
		p := s.pairs[k]
		if p == nil {
			p = &dto.LabelPair{Name: &f.labels[j], Value: ptr.To(labels[j])}
			s.pairs[k] = p
		}
		pairs[i] = p
	}
	s.byDesc[d] = append(s.byDesc[d], &dto.Metric{Label: pairs, Gauge: &dto.Gauge{Value: ptr.To(v)}})
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
	// The pod's peak adds up as its memory target does (gpufracv1.PodTotal, as gpufrac
	// report): an init container runs before the regular ones, so its peak is not on
	// top of theirs.
	peak, ok := gpufracv1.PodTotal(st.ContainerRecommendations, nil, func(c *gpufracv1.ContainerRecommendation) (int64, bool) {
		if c.ObservedPeakMemory == nil {
			return 0, false
		}
		return c.ObservedPeakMemory.Value(), true
	})
	if ok && peak > 0 {
		s.gauge(descPeakMemory, float64(pods)*float64(peak), ns, name)
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
				// What was written is unknown: counted as a whole GPU, as a pod without
				// a record, never less (the updater reports the pod: AppliedRecordInvalid).
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
// of one GPU), summed over the record's containers and capped at 1. Where a
// placement-only memory request was written below the limit (writtenMemoryRequest), the
// request is what the pod holds; a time-sliced container's placement-only compute
// request (writtenComputeRequest) counts as compute it holds. A pod without a
// record (nil), or whose record wrote nothing, holds a whole GPU: 1. So does any pod when
// gpuMemory is not positive.
func AllocatedShare(rec *gpufracv1.AppliedRecord, gpuMemory float64) float64 {
	if rec == nil || gpuMemory <= 0 {
		return 1
	}
	var mem, compute float64
	wrote := false
	for _, c := range rec.Containers {
		held := c.WrittenMemoryRequest // what a scheduler packing by request reserves
		if held == nil {
			held = c.WrittenMemory
		}
		if held != nil {
			mem += held.AsApproximateFloat64()
			wrote = true
		}
		if c.WrittenCompute != nil {
			compute += c.WrittenCompute.AsApproximateFloat64()
			wrote = true
		}
		if c.WrittenComputeRequest != nil {
			compute += c.WrittenComputeRequest.AsApproximateFloat64()
			wrote = true
		}
	}
	if !wrote {
		return 1
	}
	return math.Min(1, math.Max(mem/gpuMemory, compute))
}

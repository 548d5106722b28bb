package v1alpha1

import (
	"math"
	"sort"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a GPUFractionRecommendation (and mirrored on its autoscaler).
const (
	// ConditionRecommendationProvided is True when a recommendation exists.
	ConditionRecommendationProvided = "RecommendationProvided"
	// ConditionLowConfidence is True when history is too short or too sparse to trust.
	ConditionLowConfidence = "LowConfidence"
	// ConditionMetricsUnavailable is True when the last cycle could not read metrics; the
	// last good recommendation is kept unchanged.
	ConditionMetricsUnavailable = "MetricsUnavailable"
	// ConditionLatencyGuardrailActive is True while the latency objective is breached or near.
	ConditionLatencyGuardrailActive = "LatencyGuardrailActive"
	// ConditionNoPodsMatched is True when the target has no pods and no history.
	ConditionNoPodsMatched = "NoPodsMatched"
	// ConditionConfigUnsupported is True when the target or the policy cannot be used.
	ConditionConfigUnsupported = "ConfigUnsupported"
)

// AttributionMethod says how historical samples were mapped to the workload.
// +kubebuilder:validation:Enum=OwnerReferences;KubeStateMetrics;PodNamingConvention
type AttributionMethod string

const (
	// AttributionOwnerReferences: only pods that exist now, by their owner references.
	AttributionOwnerReferences AttributionMethod = "OwnerReferences"
	// AttributionKubeStateMetrics: pods that no longer exist were mapped through
	// kube_pod_owner and kube_replicaset_owner series.
	AttributionKubeStateMetrics AttributionMethod = "KubeStateMetrics"
	// AttributionPodNamingConvention: pods that no longer exist were mapped by the
	// controllers' pod naming conventions (may be ambiguous, see docs).
	AttributionPodNamingConvention AttributionMethod = "PodNamingConvention"
)

// GPUResources is an amount of GPU memory and compute.
type GPUResources struct {
	// Memory is GPU memory, bytes.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is a share of one GPU ("350m" = 0.35 of one GPU).
	// +optional
	Compute *resource.Quantity `json:"compute,omitempty"`
}

// ContainerRecommendation is the recommendation for one container of the workload's pods.
type ContainerRecommendation struct {
	// ContainerName is the container's name in the pod template.
	ContainerName string `json:"containerName"`
	// Target is the recommended allocation.
	Target GPUResources `json:"target"`
	// LowerBound is the allocation below which the pod should be resized up; it widens
	// as confidence falls.
	LowerBound GPUResources `json:"lowerBound"`
	// UpperBound is the allocation above which the pod should be resized down.
	UpperBound GPUResources `json:"upperBound"`
	// UncappedTarget is the target before the resource policy's min/max were applied.
	UncappedTarget GPUResources `json:"uncappedTarget"`
	// ComputeRequest is the compute a TimeSlicing container reserves for placement, a
	// share of one GPU as a milli quantity ("120m" = 0.12 of a GPU), with no limit: its
	// effective compute at the recommender's contention budget (--contention-budget):
	// co-tenants whose computeRequests sum to at most one GPU ask together for more
	// than the whole GPU in a sample interval with at most that probability
	// (docs/recommender.md, "Compute under time-slicing"). Absent for Exclusive and MPS,
	// whose target.compute is reserved and enforced, and without compute samples.
	// +optional
	ComputeRequest *resource.Quantity `json:"computeRequest,omitempty"`
	// MemoryLimit is the GPU memory limit, bytes, of a container whose backend places
	// pods by a memory request below the limit (the annotations backend's observed-peak
	// request): target.memory with burst room from the workload's own spread of
	// per-interval peaks (the recommender's --memory-spread-factor; docs/recommender.md,
	// "How a recommendation is computed"). The admission webhook writes it as the limit;
	// target.memory stays the need that the updater compares pods with and the sharing
	// mode, the sharing planner and the GPU totals read. Like computeRequest, the
	// updater never replaces a pod for its limit alone. For a young workload
	// (youngMarginPercent above 0) it is at least upperBound.memory, the whole share of
	// one GPU its target falls in; the webhook then writes the pod at that share and the
	// updater compares pods with it, so a young target moving inside its share replaces
	// no pod. Absent when the spread headroom is off for the autoscaler's backend and
	// the workload is not young, or when not above the target.
	// +optional
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`
	// ObservedPeakMemory is the highest memory sample in the recent peak window, bytes.
	// +optional
	ObservedPeakMemory *resource.Quantity `json:"observedPeakMemory,omitempty"`
	// ComputeSource is the metric compute was read from, e.g. DCGM_FI_PROF_SM_ACTIVE.
	// +optional
	ComputeSource string `json:"computeSource,omitempty"`
	// SharingMode is the recommended way to share the GPU with other workloads.
	SharingMode SharingMode `json:"sharingMode"`
	// SharingModeReason says in one line why that mode was chosen.
	SharingModeReason string `json:"sharingModeReason"`
	// ConfidencePercent is this container's confidence, 0–100, from history length and
	// sample coverage.
	ConfidencePercent int32 `json:"confidencePercent"`
	// HistoryHours is the span of history the recommendation is based on, hours.
	HistoryHours int32 `json:"historyHours"`
	// YoungMarginPercent is the extra margin, percent, on the memory target of a young
	// workload (history too short for the configured low confidence): 100/n for the n
	// hours (memory aggregation intervals) its memory has stayed at its highest level.
	// Its confidencePercent then comes from that evidence (docs/recommender.md, "Young
	// workloads"). 0 when the workload is not young.
	// +optional
	YoungMarginPercent int32 `json:"youngMarginPercent,omitempty"`
	// ContainerType is where the container sits in the pod: Regular (spec.containers),
	// Sidecar (a native sidecar: an init container with restartPolicy Always) or Init
	// (an init container that runs to completion). It decides how the container counts
	// in the pod's totals (PodNeed) and confidence (CountsInConfidence), and whether the
	// admission webhook writes it (Regular and Sidecar only). Empty, in statuses
	// written before the field existed, means Regular.
	// +optional
	ContainerType ContainerType `json:"containerType,omitempty"`
	// MIG relates the recommendation to NVIDIA Multi-Instance GPU profiles: the target
	// against the profile its samples were read on, and the smallest profile that holds
	// it, as an alternative to time-slicing. Advice only: gpufrac never reconfigures MIG.
	// +optional
	MIG *MIGRecommendation `json:"mig,omitempty"`
	// Derivation holds the recommender settings the target was derived with (its
	// percentiles, compute margin and memory aggregation interval: estimator constants
	// and recommender flags such as --compute-margin), so that readers such as gpufrac
	// explain show the numbers the recommender used. Kept with the target while a new
	// one is within noise. Absent in statuses written before the field existed.
	// +optional
	Derivation *Derivation `json:"derivation,omitempty"`
}

// Derivation is how a container recommendation's targets were derived: memory target =
// max(MemoryPercentile of per-pod peaks per MemoryInterval, recent peak) × (1 + the
// policy's headroom); compute target = ComputePercentile of activity × (1 + ComputeMargin).
type Derivation struct {
	// MemoryPercentile is the percentile of per-interval memory peaks the memory target
	// is taken at, ratio 0–1 as a quantity (900m: p90).
	MemoryPercentile resource.Quantity `json:"memoryPercentile"`
	// MemoryInterval is the interval whose per-pod peak is one memory sample (the
	// recommender's --memory-aggregation-interval).
	MemoryInterval metav1.Duration `json:"memoryInterval"`
	// ComputePercentile is the percentile of activity samples the compute target is
	// taken at, ratio 0–1 as a quantity (900m: p90).
	ComputePercentile resource.Quantity `json:"computePercentile"`
	// ComputeMargin is the safety margin on compute, ratio as a quantity (150m: +15 %;
	// the recommender's --compute-margin).
	ComputeMargin resource.Quantity `json:"computeMargin"`
}

// ContainerType is where a container sits in the pod spec, which decides how its GPU
// use adds up with the others' (PodNeed).
// +kubebuilder:validation:Enum=Regular;Sidecar;Init
type ContainerType string

const (
	// ContainerTypeRegular is a container of spec.containers.
	ContainerTypeRegular ContainerType = "Regular"
	// ContainerTypeSidecar is a native sidecar: a container of spec.initContainers with
	// restartPolicy Always, which starts in init order and keeps running next to the
	// regular containers (Kubernetes 1.29+).
	ContainerTypeSidecar ContainerType = "Sidecar"
	// ContainerTypeInit is a container of spec.initContainers without restartPolicy
	// Always: it runs to completion, one at a time, before the regular containers start.
	ContainerTypeInit ContainerType = "Init"
)

// CountsInConfidence reports whether the recommendation counts in the pod's confidence
// and sharing mode: regular containers and native sidecars run for the pod's whole
// life, while an init container runs for minutes per pod start, so its history stays
// short whatever the workload's age and its confidence says nothing about the pod's.
func (c *ContainerRecommendation) CountsInConfidence() bool {
	return c.ContainerType != ContainerTypeInit
}

// PodNeed adds up one resource's per-container amounts into the pod's need the way the
// Kubernetes scheduler computes a pod's effective request
// (k8s.io/component-helpers/resource.PodRequests): regular containers and native
// sidecars run together, so their amounts add up; init containers run one at a time
// before the regular containers, next to the sidecars started before them. The pod
// needs the larger of the two. Add init containers and sidecars in spec order. The
// zero value is an empty need.
// +kubebuilder:object:generate=false
type PodNeed struct {
	regular, sidecars, initMax int64
	set                        bool
}

// Add counts one container's amount (any unit, the same for every call).
func (n *PodNeed) Add(t ContainerType, amount int64) {
	n.set = true
	switch t {
	case ContainerTypeInit:
		n.initMax = max(n.initMax, n.sidecars+amount)
	case ContainerTypeSidecar:
		n.sidecars += amount
		n.initMax = max(n.initMax, n.sidecars)
	default:
		n.regular += amount
	}
}

// Total returns the pod's need: max(largest init container plus the sidecars started
// before it, regular containers plus sidecars); false when nothing was added.
func (n PodNeed) Total() (int64, bool) {
	return max(n.initMax, n.regular+n.sidecars), n.set
}

// PodTotal adds up one amount of recs into the pod's need (PodNeed). start is each
// container's position in the kubelet's start order (init containers, then regular
// ones); containers without one (start nil, or a container the pod spec lacks) come
// after the known ones, init containers last, so an init container of unknown place
// counts next to every sidecar: the larger need. amount returns false for a container
// without the resource. PodTotal returns false when no container has it.
func PodTotal(recs []ContainerRecommendation, start map[string]int, amount func(*ContainerRecommendation) (int64, bool)) (int64, bool) {
	pos := func(c *ContainerRecommendation) int {
		if i, ok := start[c.ContainerName]; ok {
			return i
		}
		if c.ContainerType == ContainerTypeInit {
			return math.MaxInt
		}
		return math.MaxInt - 1
	}
	order := make([]*ContainerRecommendation, len(recs))
	for i := range recs {
		order[i] = &recs[i]
	}
	sort.SliceStable(order, func(i, j int) bool { return pos(order[i]) < pos(order[j]) })
	var n PodNeed
	for _, c := range order {
		if v, ok := amount(c); ok {
			n.Add(c.ContainerType, v)
		}
	}
	return n.Total()
}

// MIGRecommendation relates a container's recommendation to NVIDIA Multi-Instance GPU
// (MIG) GPU instance profiles, named Ng.MMgb (N of the GPU's 7 compute slices, 4 on
// A30; MM GB of memory), from NVIDIA's MIG user guide.
type MIGRecommendation struct {
	// MeasuredProfile is the MIG profile the container's samples were read on
	// (dcgm-exporter's GPU_I_PROFILE), e.g. "1g.10gb"; empty when they were not read on
	// a MIG instance.
	// +optional
	MeasuredProfile string `json:"measuredProfile,omitempty"`
	// ComputeOfProfile is the compute target as a share of the measured profile's
	// compute ("900m" = 0.9 of the instance; above 1 the instance is too small). The
	// target itself stays a share of the whole GPU: 0.9 of a 1g.10gb is 129m.
	// +optional
	ComputeOfProfile *resource.Quantity `json:"computeOfProfile,omitempty"`
	// MemoryPercentOfProfile is the memory target as a percentage of the measured
	// profile's memory (95 % of the GB in its name; above 100 the instance is too small).
	// +optional
	MemoryPercentOfProfile *int32 `json:"memoryPercentOfProfile,omitempty"`
	// GPU names the GPU whose profiles were considered, e.g. "A100/H100 80GB": the one
	// that lists the measured profile, else the one whose memory is the recommender's
	// --gpu-memory.
	// +optional
	GPU string `json:"gpu,omitempty"`
	// SmallestProfile is the smallest MIG profile of the GPU whose memory and share of
	// the GPU's compute hold the target, e.g. "2g.20gb"; empty when none does.
	// +optional
	SmallestProfile string `json:"smallestProfile,omitempty"`
	// Reason says in one line why SmallestProfile holds the target, or why no profile is
	// named.
	Reason string `json:"reason"`
}

// MetricSourceUsage is one metric source a recommendation was read from.
type MetricSourceUsage struct {
	// Name is the source as --metric-source names it: agent, hami, kai or dcgm.
	Name string `json:"name"`
	// Pods counts the workload's pods seen over the history window (running or gone)
	// whose samples of at least one signal (memory, compute) are read from this source.
	Pods int32 `json:"pods"`
}

// GPUFractionRecommendationSpec identifies what the recommendation is for.
type GPUFractionRecommendationSpec struct {
	// TargetRef is a copy of the autoscaler's target.
	TargetRef autoscalingv1.CrossVersionObjectReference `json:"targetRef"`
}

// GPUFractionRecommendationStatus is what the recommender measured and recommends.
type GPUFractionRecommendationStatus struct {
	// ObservedGeneration is the autoscaler generation this was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ContainerRecommendations holds one entry per GPU container.
	// +listType=map
	// +listMapKey=containerName
	// +optional
	ContainerRecommendations []ContainerRecommendation `json:"containerRecommendations,omitempty"`
	// Memory is the pod's total recommended GPU memory, bytes: the container targets
	// added up as the scheduler adds up requests (PodNeed): max(largest init container,
	// sum of regular containers and native sidecars).
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is the pod's total recommended compute, share of one GPU, added up like
	// Memory.
	// +optional
	Compute *resource.Quantity `json:"compute,omitempty"`
	// SharingMode is the pod's recommended sharing mode: the most isolated of its regular
	// containers' and native sidecars' (of its init containers' when it has no other).
	// +optional
	SharingMode SharingMode `json:"sharingMode,omitempty"`
	// ConfidencePercent is the lowest confidence of the regular containers and native
	// sidecars, 0–100 (of the init containers when there is no other): an init
	// container's few minutes per pod start never lower it.
	// +optional
	ConfidencePercent *int32 `json:"confidencePercent,omitempty"`
	// Attribution says how samples of pods that no longer exist were mapped to the workload.
	// +optional
	Attribution AttributionMethod `json:"attribution,omitempty"`
	// MetricSources are the metric sources the recommendation was read from, most
	// precise first (agent, hami, kai, dcgm). With --metric-source auto each pod's
	// samples of a signal come from the most precise source that has reported that
	// signal for it within the history window, from the time it first did; with a
	// named source, from that one (docs/metric-sources.md).
	// +listType=map
	// +listMapKey=name
	// +optional
	MetricSources []MetricSourceUsage `json:"metricSources,omitempty"`
	// MatchedPods is the number of the workload's pods that exist now.
	// +optional
	MatchedPods int32 `json:"matchedPods,omitempty"`
	// LastUpdateTime is when the recommendation content last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
	// Conditions: RecommendationProvided, LowConfidence, MetricsUnavailable,
	// LatencyGuardrailActive, NoPodsMatched, ConfigUnsupported.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GPUFractionRecommendation is the recommender's output for one GPUFractionAutoscaler
// (same name and namespace, owned by it).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gfr,categories=gpufrac
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.memory`
// +kubebuilder:printcolumn:name="Compute",type=string,JSONPath=`.status.compute`
// +kubebuilder:printcolumn:name="Sharing",type=string,JSONPath=`.status.sharingMode`
// +kubebuilder:printcolumn:name="Confidence",type=integer,JSONPath=`.status.confidencePercent`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.matchedPods`
// +kubebuilder:printcolumn:name="Provided",type=string,JSONPath=`.status.conditions[?(@.type=="RecommendationProvided")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUFractionRecommendation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUFractionRecommendationSpec   `json:"spec"`
	Status GPUFractionRecommendationStatus `json:"status,omitempty"`
}

// GPUFractionRecommendationList is a list of GPUFractionRecommendations.
// +kubebuilder:object:root=true
type GPUFractionRecommendationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUFractionRecommendation `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GPUFractionRecommendation{}, &GPUFractionRecommendationList{})
}

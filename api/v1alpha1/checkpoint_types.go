package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CheckpointModelVersion is the version of the model layout a GPUFractionCheckpoint's
// status holds: the histograms' bucket layouts (recommender/history MemoryBuckets and
// ComputeBuckets) and the meaning of every status field. The recommender restores only
// checkpoints of its own version; it is bumped whenever either changes. v3: the interval
// peaks hold every memory aggregation interval with a sample of the container, at 0 bytes
// where it had compute samples alone (or zero memory): the time the history covers.
const CheckpointModelVersion = "v3"

// HistogramCheckpoint is a decaying histogram in VPA's checkpoint form, the same JSON
// as VPA's HistogramCheckpoint (k8s.io/autoscaler/vertical-pod-autoscaler
// pkg/apis/autoscaling.k8s.io/v1), which the recommender converts it to and from and
// saves and loads with VPA's histogram library (SaveToChekpoint, LoadFromCheckpoint).
// VPA's type keys its map by int, which controller-gen cannot write a schema for; the
// keys here are the same bucket indices as decimal strings, as JSON writes VPA's.
//
// The form is lossy, as VPA's: each bucket's weight is scaled so that the heaviest is
// 10,000 (vpautil.MaxCheckpointWeight) and rounded to an integer, and a bucket under
// half of 1/10,000 of the heaviest is dropped. Percentiles can move by at most the
// buckets whose relative weight that rounding changes, in practice one bucket (5 % of
// memory, 0.01 GPU of compute) and only where a percentile falls at a bucket boundary.
type HistogramCheckpoint struct {
	// ReferenceTimestamp is the histogram's decay reference.
	// +optional
	// +nullable
	ReferenceTimestamp metav1.Time `json:"referenceTimestamp,omitempty"`
	// BucketWeights maps a bucket index (decimal) to its weight, the heaviest 10,000.
	// +optional
	BucketWeights map[string]uint32 `json:"bucketWeights,omitempty"`
	// TotalWeight is the sum of the decayed sample weights, the denominator of
	// BucketWeights.
	// +optional
	TotalWeight float64 `json:"totalWeight,omitempty"`
}

// GPUFractionCheckpointSpec names what a checkpoint is of.
type GPUFractionCheckpointSpec struct {
	// AutoscalerName is the GPUFractionAutoscaler (same namespace) whose workload's
	// model this is; the checkpoint has the same name and is owned by it.
	AutoscalerName string `json:"autoscalerName"`
	// WorkloadKind and WorkloadName are the workload (the top-most controller of its
	// pods) the autoscaler's target resolved to when the checkpoint was written; a
	// checkpoint of another workload is not restored.
	WorkloadKind string `json:"workloadKind"`
	WorkloadName string `json:"workloadName"`
}

// CheckpointModelOptions are the options of the model a checkpoint was taken from
// (recommender/history Options); a checkpoint is restored only into a model with the
// same ones.
type CheckpointModelOptions struct {
	// MemoryAggregationInterval is the length of the interval whose per-pod memory
	// peak is one memory sample.
	MemoryAggregationInterval metav1.Duration `json:"memoryAggregationInterval"`
	// HalfLife is the histograms' decay half-life.
	HalfLife metav1.Duration `json:"halfLife"`
	// PeakWindow is how far back the recent memory peak looks.
	PeakWindow metav1.Duration `json:"peakWindow"`
	// SampleInterval is the compute sample step (the recommender's --interval).
	SampleInterval metav1.Duration `json:"sampleInterval"`
	// ComputeByHour says whether the hour-of-day compute histograms were kept.
	// +optional
	ComputeByHour bool `json:"computeByHour,omitempty"`
}

// IntervalPeak is the highest memory sample of all pods of a container in one memory
// aggregation interval.
type IntervalPeak struct {
	// Start is the interval's start.
	Start metav1.Time `json:"start"`
	// Bytes is the peak, bytes.
	Bytes float64 `json:"bytes"`
}

// PodWindow is one pod's open memory aggregation interval: its peak so far, the value
// the memory histogram holds for it, replaced when a later sample of the same interval
// is higher.
type PodWindow struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Start is the interval's start.
	Start metav1.Time `json:"start"`
	// Peak is the pod's peak in the interval so far, bytes.
	Peak float64 `json:"peak"`
}

// HourCheckpoint is the compute of one hour of the day (UTC).
type HourCheckpoint struct {
	// Hour is the hour of the day, 0–23.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=23
	Hour int32 `json:"hour"`
	// Histogram holds the hour's activity samples, ratio 0–1, in VPA's checkpoint form.
	Histogram HistogramCheckpoint `json:"histogram"`
	// Samples counts the samples added.
	Samples int64 `json:"samples"`
	// FirstDay is the day (days since the Unix epoch, UTC) of the hour's first sample.
	FirstDay int64 `json:"firstDay"`
	// SeveralDays says whether the samples came from more than one day.
	// +optional
	SeveralDays bool `json:"severalDays,omitempty"`
}

// ContainerCheckpoint is the model of one container of the workload
// (recommender/history ContainerState).
type ContainerCheckpoint struct {
	// ContainerName is the container's name in the pod template.
	ContainerName string `json:"containerName"`
	// Memory is the decaying histogram of per-pod per-interval memory peaks, bytes.
	Memory HistogramCheckpoint `json:"memory"`
	// Compute is the decaying histogram of activity samples, ratio 0–1.
	Compute HistogramCheckpoint `json:"compute"`
	// ComputeByHour holds the hours of the day that have compute samples.
	// +optional
	ComputeByHour []HourCheckpoint `json:"computeByHour,omitempty"`
	// FirstSample and LastSample bound the history seen.
	// +optional
	FirstSample metav1.MicroTime `json:"firstSample,omitempty"`
	// +optional
	LastSample metav1.MicroTime `json:"lastSample,omitempty"`
	// ComputeSamples counts compute samples; MemoryPeaks counts memory peaks.
	// +optional
	ComputeSamples int64 `json:"computeSamples,omitempty"`
	// +optional
	MemoryPeaks int64 `json:"memoryPeaks,omitempty"`
	// ComputeSource is the metric the latest compute samples came from.
	// +optional
	ComputeSource string `json:"computeSource,omitempty"`
	// SharedSamples counts samples that were a shared GPU's device-wide value.
	// +optional
	SharedSamples int64 `json:"sharedSamples,omitempty"`
	// Devices is the most GPUs (or MIG instances) one pod used at once; 0 when unknown.
	// +optional
	Devices int32 `json:"devices,omitempty"`
	// MultiDeviceAt is the latest sample time at which a pod used several devices.
	// +optional
	MultiDeviceAt *metav1.MicroTime `json:"multiDeviceAt,omitempty"`
	// MIGProfile is the MIG profile the latest samples were read on.
	// +optional
	MIGProfile string `json:"migProfile,omitempty"`
	// LevelPeak is the highest memory sample, bytes; LevelSince when memory reached
	// its level.
	// +optional
	LevelPeak float64 `json:"levelPeak,omitempty"`
	// +optional
	LevelSince *metav1.MicroTime `json:"levelSince,omitempty"`
	// Contention is the decaying evidence of compute contention: samples taken on a GPU
	// shared with other pods, and those of them on a saturated GPU; nil when none.
	// +optional
	Contention *ContentionCheckpoint `json:"contention,omitempty"`
	// Fidelity is the decaying evidence of the fields the compute samples came from;
	// nil when there is no compute sample. Added in model version v2.
	// +optional
	Fidelity *FidelityCheckpoint `json:"fidelity,omitempty"`
	// IntervalPeaks are the per-interval memory peaks of the peak window.
	// +optional
	IntervalPeaks []IntervalPeak `json:"intervalPeaks,omitempty"`
	// PodWindows are the pods' open memory aggregation intervals.
	// +optional
	PodWindows []PodWindow `json:"podWindows,omitempty"`
}

// ContentionCheckpoint is a container's contention evidence: decayed weights, in
// samples, valued at Time (they halve every CheckpointModelOptions.HalfLife after it).
type ContentionCheckpoint struct {
	// CoTenantSamples weighs the compute samples taken on a GPU shared with other pods.
	CoTenantSamples float64 `json:"coTenantSamples"`
	// SaturatedSamples weighs those of them in which the GPU's activity was at least
	// the saturation threshold (0.95); at most CoTenantSamples.
	SaturatedSamples float64 `json:"saturatedSamples"`
	// Time is when the weights are valued.
	Time metav1.MicroTime `json:"time"`
}

// FidelityCheckpoint is a container's evidence of the fields its compute samples came
// from: decayed weights, in samples, valued at Time (they halve every
// CheckpointModelOptions.HalfLife after it), and the latest field of each kind.
type FidelityCheckpoint struct {
	// AllSamples weighs every compute sample.
	AllSamples float64 `json:"allSamples"`
	// LowFidelitySamples weighs those read from a low-fidelity field
	// (DCGM_FI_DEV_GPU_UTIL); at most AllSamples.
	LowFidelitySamples float64 `json:"lowFidelitySamples"`
	// Time is when the weights are valued.
	Time metav1.MicroTime `json:"time"`
	// PreciseSource is the latest field other than a low-fidelity one; "" when none.
	// +optional
	PreciseSource string `json:"preciseSource,omitempty"`
	// LowFidelitySource is the latest low-fidelity field; "" when none.
	// +optional
	LowFidelitySource string `json:"lowFidelitySource,omitempty"`
}

// GPUFractionCheckpointStatus is the saved model.
type GPUFractionCheckpointStatus struct {
	// ModelVersion is the layout version (CheckpointModelVersion) the status was
	// written in.
	ModelVersion string `json:"modelVersion"`
	// Options are the model's options.
	Options CheckpointModelOptions `json:"options"`
	// SamplesUntil is the end of the last Prometheus load the model holds: a restored
	// recommender reads only the samples after it.
	SamplesUntil metav1.MicroTime `json:"samplesUntil"`
	// Containers are the models of the workload's containers.
	// +optional
	Containers []ContainerCheckpoint `json:"containers,omitempty"`
}

// GPUFractionCheckpoint is the recommender's saved model of one autoscaler's workload
// (as VPA's VerticalPodAutoscalerCheckpoint): written periodically by the recommender,
// restored when it starts or becomes leader so that only the history after it is read
// from Prometheus. Owned by its GPUFractionAutoscaler, so garbage collection deletes it.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=gfc
// +kubebuilder:printcolumn:name="Autoscaler",type=string,JSONPath=`.spec.autoscalerName`
// +kubebuilder:printcolumn:name="Samples-Until",type=string,JSONPath=`.status.samplesUntil`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUFractionCheckpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec GPUFractionCheckpointSpec `json:"spec"`
	// +optional
	Status GPUFractionCheckpointStatus `json:"status,omitempty"`
}

// GPUFractionCheckpointList is a list of GPUFractionCheckpoint.
// +kubebuilder:object:root=true
type GPUFractionCheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUFractionCheckpoint `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GPUFractionCheckpoint{}, &GPUFractionCheckpointList{})
}

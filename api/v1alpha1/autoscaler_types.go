package v1alpha1

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpdateMode says whether and how gpufrac applies its recommendation to pods.
// +kubebuilder:validation:Enum=Off;Initial;Recreate;InPlaceOrRecreate
type UpdateMode string

const (
	// UpdateModeOff only recommends: no pod is ever changed (the default).
	UpdateModeOff UpdateMode = "Off"
	// UpdateModeInitial applies the recommendation when pods are created, never evicts.
	UpdateModeInitial UpdateMode = "Initial"
	// UpdateModeRecreate also replaces running pods that are too far from the
	// recommendation, inside resize windows.
	UpdateModeRecreate UpdateMode = "Recreate"
	// UpdateModeInPlaceOrRecreate changes in place what the platform allows and
	// replaces the pod for the rest (GPU fields always need a new pod).
	UpdateModeInPlaceOrRecreate UpdateMode = "InPlaceOrRecreate"
)

// BackendType names the GPU sharing mechanism through which a fraction is written into a pod.
// +kubebuilder:validation:Enum=hami;kai;kai-nvfractions;mps;annotations
type BackendType string

const (
	// BackendHAMi writes container limits nvidia.com/gpumem (MiB) and nvidia.com/gpucores (percent).
	BackendHAMi BackendType = "hami"
	// BackendKAI writes the pod annotations gpu-memory (MiB) or gpu-fraction (0–1) for KAI scheduler.
	BackendKAI BackendType = "kai"
	// BackendKAINVFractions writes nvidia.com/container.<name>.gpu-memory.request/.limit annotations.
	BackendKAINVFractions BackendType = "kai-nvfractions"
	// BackendMPS writes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT env vars.
	BackendMPS BackendType = "mps"
	// BackendAnnotations writes neutral gpufrac.io/* annotations for clusters with their own enforcement.
	BackendAnnotations BackendType = "annotations"
)

// SharingMode is how a GPU is shared between the workloads placed on it.
// +kubebuilder:validation:Enum=Exclusive;MPS;TimeSlicing
type SharingMode string

const (
	// SharingModeExclusive gives the workload a whole GPU.
	SharingModeExclusive SharingMode = "Exclusive"
	// SharingModeMPS partitions SMs and memory with CUDA MPS (one trust boundary).
	SharingModeMPS SharingMode = "MPS"
	// SharingModeTimeSlicing interleaves workloads in time (no memory or fault isolation).
	SharingModeTimeSlicing SharingMode = "TimeSlicing"
)

// ContainerScalingMode says whether gpufrac recommends for a container.
// +kubebuilder:validation:Enum=Auto;Off
type ContainerScalingMode string

const (
	// ContainerScalingModeAuto recommends and applies for the container (the default).
	ContainerScalingModeAuto ContainerScalingMode = "Auto"
	// ContainerScalingModeOff leaves the container alone.
	ContainerScalingModeOff ContainerScalingMode = "Off"
)

// GPUResourceName names one of the two GPU resources gpufrac sizes.
// +kubebuilder:validation:Enum=memory;compute
type GPUResourceName string

const (
	// ResourceMemory is GPU memory, a quantity in bytes.
	ResourceMemory GPUResourceName = "memory"
	// ResourceCompute is GPU compute, a share of one GPU ("350m" = 0.35).
	ResourceCompute GPUResourceName = "compute"
)

// ContainerPolicyDefault is the containerName of the policy that applies to every
// container without a policy of its own.
const ContainerPolicyDefault = "*"

// GPUFractionAutoscalerSpec is what the platform team asks of gpufrac for one workload.
type GPUFractionAutoscalerSpec struct {
	// TargetRef is the workload whose pods are sized: a Deployment, StatefulSet,
	// ReplicaSet, DaemonSet, Job, or any kind with a scale subresource. It must be in
	// the autoscaler's namespace. A pod belongs to the workload only when its top-most
	// controller is the target.
	TargetRef autoscalingv1.CrossVersionObjectReference `json:"targetRef"`

	// UpdatePolicy says whether and when recommendations are applied to pods.
	// Omitted means updateMode Off: recommend only.
	// +optional
	UpdatePolicy *UpdatePolicy `json:"updatePolicy,omitempty"`

	// Backend is the sharing mechanism through which fractions are written into pods.
	// Omitted means the neutral "annotations" backend.
	// +optional
	Backend *Backend `json:"backend,omitempty"`

	// ResourcePolicy bounds the recommendation per container.
	// +optional
	ResourcePolicy *ResourcePolicy `json:"resourcePolicy,omitempty"`

	// LatencyGuardrail is a latency objective: while it is breached gpufrac never
	// shrinks the workload and raises its compute step by step.
	// +optional
	LatencyGuardrail *LatencyGuardrail `json:"latencyGuardrail,omitempty"`
}

// UpdatePolicy says whether and when recommendations are applied.
type UpdatePolicy struct {
	// UpdateMode is Off (recommend only), Initial (apply at pod creation), Recreate
	// (also replace running pods inside resize windows) or InPlaceOrRecreate.
	// +kubebuilder:default=Off
	// +optional
	UpdateMode *UpdateMode `json:"updateMode,omitempty"`

	// MinReplicas is the fewest running pods the workload must have before the updater
	// evicts one of them. Default 2; 1 is an explicit opt-in to evicting a single replica.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// ResizeWindows are the times at which pods may be replaced to shrink them. Empty
	// means any time.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ResizeWindows []ResizeWindow `json:"resizeWindows,omitempty"`

	// UrgentGrowth allows growth that protects the workload (memory near its limit, an
	// out-of-memory restart, a latency guardrail breach) outside resize windows.
	// Default true.
	// +optional
	UrgentGrowth *bool `json:"urgentGrowth,omitempty"`
}

// ResizeWindow is a recurring period in which pods may be replaced.
type ResizeWindow struct {
	// Schedule is a standard 5-field cron expression for the window's start
	// (github.com/robfig/cron/v3 syntax, e.g. "0 2 * * *").
	// +kubebuilder:validation:MinLength=1
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open after each start, e.g. "2h".
	Duration metav1.Duration `json:"duration"`

	// TimeZone is the IANA time zone of the schedule, e.g. "Europe/Berlin". Default UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// Backend is the sharing mechanism that writes a fraction into a pod.
type Backend struct {
	// Type is hami, kai, kai-nvfractions, mps or annotations.
	// +kubebuilder:default=annotations
	// +optional
	Type BackendType `json:"type,omitempty"`

	// MemoryOverhead is added to the recommended memory (bytes) when it is written, to
	// cover what an enforcing backend counts beyond what the metrics show (CUDA context,
	// allocator pools). Default 0.
	// +optional
	MemoryOverhead *resource.Quantity `json:"memoryOverhead,omitempty"`
}

// ResourcePolicy holds the per-container policies.
type ResourcePolicy struct {
	// ContainerPolicies apply per container name; the one named "*" applies to every
	// container without its own.
	// +listType=map
	// +listMapKey=containerName
	// +kubebuilder:validation:MaxItems=4
	// +optional
	ContainerPolicies []ContainerPolicy `json:"containerPolicies,omitempty"`
}

// ContainerPolicy bounds the recommendation of one container (or of all, with "*").
// +kubebuilder:validation:XValidation:rule="!has(self.minMemory) || !has(self.maxMemory) || quantity(string(self.minMemory)).compareTo(quantity(string(self.maxMemory))) <= 0",message="minMemory must be less than or equal to maxMemory"
// +kubebuilder:validation:XValidation:rule="!has(self.minCompute) || !has(self.maxCompute) || quantity(string(self.minCompute)).compareTo(quantity(string(self.maxCompute))) <= 0",message="minCompute must be less than or equal to maxCompute"
// +kubebuilder:validation:XValidation:rule="!has(self.maxCompute) || quantity(string(self.maxCompute)).compareTo(quantity('1')) <= 0",message="maxCompute is a share of one GPU and must be at most 1"
type ContainerPolicy struct {
	// ContainerName is the container this policy applies to, or "*" for all.
	// +kubebuilder:validation:MinLength=1
	ContainerName string `json:"containerName"`

	// Mode is Auto (default) or Off (no recommendation for this container).
	// +optional
	Mode *ContainerScalingMode `json:"mode,omitempty"`

	// MinMemory is the lowest GPU memory recommended, bytes.
	// +optional
	MinMemory *resource.Quantity `json:"minMemory,omitempty"`
	// MaxMemory is the highest GPU memory recommended, bytes.
	// +optional
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`
	// MinCompute is the lowest compute recommended, share of one GPU ("100m" = 0.1).
	// +optional
	MinCompute *resource.Quantity `json:"minCompute,omitempty"`
	// MaxCompute is the highest compute recommended, share of one GPU, at most "1".
	// +optional
	MaxCompute *resource.Quantity `json:"maxCompute,omitempty"`

	// ControlledResources are the resources gpufrac recommends; default both.
	// +optional
	ControlledResources []GPUResourceName `json:"controlledResources,omitempty"`

	// MemoryHeadroomPercent is added on top of the memory estimate and of the recent
	// observed peak, percent. Default 15 (VPA's safety margin).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=200
	// +optional
	MemoryHeadroomPercent *int32 `json:"memoryHeadroomPercent,omitempty"`

	// AllowedSharingModes restricts the sharing modes gpufrac may recommend; default all.
	// +optional
	AllowedSharingModes []SharingMode `json:"allowedSharingModes,omitempty"`
}

// LatencyGuardrail is the workload's latency objective.
type LatencyGuardrail struct {
	// Query is a PromQL expression returning the workload's latency in seconds as a
	// scalar or a one-element vector, e.g.
	// histogram_quantile(0.95, sum by (le) (rate(request_duration_seconds_bucket{job="sd"}[5m]))).
	// +kubebuilder:validation:MinLength=1
	Query string `json:"query"`

	// Objective is the latency the query must stay under, e.g. "250ms".
	Objective metav1.Duration `json:"objective"`

	// NearPercent is the band below the objective, percent of it, in which gpufrac
	// stops shrinking without growing. Default 10.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	NearPercent *int32 `json:"nearPercent,omitempty"`
}

// GPUFractionAutoscalerStatus summarises the current recommendation for kubectl.
type GPUFractionAutoscalerStatus struct {
	// ObservedGeneration is the spec generation the recommender last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Memory is the recommended GPU memory of the pod (sum over containers), bytes.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is the recommended compute of the pod (sum over containers), share of one GPU.
	// +optional
	Compute *resource.Quantity `json:"compute,omitempty"`
	// SharingMode is the recommended sharing mode.
	// +optional
	SharingMode SharingMode `json:"sharingMode,omitempty"`
	// ConfidencePercent is the recommendation's confidence, 0–100.
	// +optional
	ConfidencePercent *int32 `json:"confidencePercent,omitempty"`

	// Conditions mirror the recommendation's conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GPUFractionAutoscaler sizes the GPU fraction of one workload's pods.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gfa,categories=gpufrac
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.updatePolicy.updateMode`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend.type`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.memory`
// +kubebuilder:printcolumn:name="Compute",type=string,JSONPath=`.status.compute`
// +kubebuilder:printcolumn:name="Sharing",type=string,JSONPath=`.status.sharingMode`
// +kubebuilder:printcolumn:name="Confidence",type=integer,JSONPath=`.status.confidencePercent`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUFractionAutoscaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUFractionAutoscalerSpec   `json:"spec"`
	Status GPUFractionAutoscalerStatus `json:"status,omitempty"`
}

// GPUFractionAutoscalerList is a list of GPUFractionAutoscalers.
// +kubebuilder:object:root=true
type GPUFractionAutoscalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUFractionAutoscaler `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GPUFractionAutoscaler{}, &GPUFractionAutoscalerList{})
}

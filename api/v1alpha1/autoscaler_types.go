package v1alpha1

import (
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
// +kubebuilder:validation:Enum=hami;kai;kai-nvfractions;mps;annotations;dra;nvidia-timeslicing;nvidia-mps
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
	// BackendDRA writes a ResourceClaimTemplate with NVIDIA's DRA driver GpuConfig
	// sharing parameters (MPS limits or TimeSlicing) and points the pod's GPU claim at it.
	BackendDRA BackendType = "dra"
	// BackendNVIDIATimeSlicing places the pod on a replica (one nvidia.com/gpu) of the
	// time-sliced GPUs of the node pool whose GPUSharingPolicy selects the autoscaler
	// (NVIDIA device plugin sharing.timeSlicing; docs/sharing-planner.md).
	BackendNVIDIATimeSlicing BackendType = "nvidia-timeslicing"
	// BackendNVIDIAMPS places the pod on a replica (one nvidia.com/gpu) of the MPS-shared
	// GPUs of the node pool whose GPUSharingPolicy selects the autoscaler (NVIDIA device
	// plugin sharing.mps, which sets every client's limits to 1/N of the GPU).
	BackendNVIDIAMPS BackendType = "nvidia-mps"
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
	// +kubebuilder:default={}
	// +optional
	UpdatePolicy *UpdatePolicy `json:"updatePolicy,omitempty"`

	// Backend is the sharing mechanism through which fractions are written into pods.
	// Omitted means the neutral "annotations" backend.
	// +kubebuilder:default={}
	// +optional
	Backend *Backend `json:"backend,omitempty"`

	// ResourcePolicy bounds the recommendation per container.
	// +optional
	ResourcePolicy *ResourcePolicy `json:"resourcePolicy,omitempty"`

	// LatencyGuardrail is a latency objective: while it is breached gpufrac never
	// shrinks the workload and raises its compute step by step.
	// +optional
	LatencyGuardrail *LatencyGuardrail `json:"latencyGuardrail,omitempty"`

	// Recommenders names the recommender instance (shard) in charge of this autoscaler,
	// as VPA's spec.recommenders does: the recommender started with that
	// --recommender-name. Omitted means the recommender named "default". One entry
	// at most; a recommender that is not named here ignores the autoscaler.
	// +kubebuilder:validation:MaxItems=1
	// +listType=atomic
	// +optional
	Recommenders []RecommenderName `json:"recommenders,omitempty"`
}

// DefaultRecommenderName is the recommender that owns autoscalers that name none
// (VPA's default recommender name).
const DefaultRecommenderName = "default"

// RecommenderName names one recommender instance.
type RecommenderName struct {
	// Name is the instance's --recommender-name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// RecommenderOf returns the name of the recommender in charge of the autoscaler: the
// first of spec.recommenders, else DefaultRecommenderName.
func (s *GPUFractionAutoscalerSpec) RecommenderOf() string {
	if len(s.Recommenders) > 0 && s.Recommenders[0].Name != "" {
		return s.Recommenders[0].Name
	}
	return DefaultRecommenderName
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

// MinResizeWindowDuration is the shortest ResizeWindow.Duration the admission webhook
// admits and the updater reads: the updater's default cycle period (--interval 1m). A
// shorter window can open and close between two cycles and never be seen open.
const MinResizeWindowDuration = time.Minute

// ResizeWindow is a recurring period in which pods may be replaced.
type ResizeWindow struct {
	// Schedule is a standard 5-field cron expression for the window's start
	// (github.com/robfig/cron/v3 syntax, e.g. "0 2 * * *").
	// +kubebuilder:validation:MinLength=1
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open after each start, e.g. "2h"; at least
	// MinResizeWindowDuration (1m).
	Duration metav1.Duration `json:"duration"`

	// TimeZone is the IANA time zone of the schedule, e.g. "Europe/Berlin". Default UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// Backend is the sharing mechanism that writes a fraction into a pod.
type Backend struct {
	// Type is hami, kai, kai-nvfractions, mps, annotations, dra, nvidia-timeslicing or
	// nvidia-mps (docs/admission.md).
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

	// Memory is the recommended GPU memory of the pod, bytes: max(largest init
	// container, sum of regular containers and native sidecars) (PodNeed).
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is the recommended compute of the pod, share of one GPU, added up like
	// Memory.
	// +optional
	Compute *resource.Quantity `json:"compute,omitempty"`
	// SharingMode is the recommended sharing mode.
	// +optional
	SharingMode SharingMode `json:"sharingMode,omitempty"`
	// ConfidencePercent is the recommendation's confidence, 0–100 (the
	// recommendation's ConfidencePercent: init containers do not lower it).
	// +optional
	ConfidencePercent *int32 `json:"confidencePercent,omitempty"`

	// Conditions mirror the recommendation's conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Updater is what the updater decided for the workload's running pods. Only the
	// updater writes it (a JSON merge patch of status.updater).
	// +optional
	Updater *UpdaterStatus `json:"updater,omitempty"`
}

// Condition types of status.updater.conditions.
const (
	// UpdaterConditionComputeShrinkHeld is True while a HorizontalPodAutoscaler or KEDA
	// ScaledObject scales the same workload on a GPU utilisation metric: shrinking
	// compute would raise utilisation and add replicas, so the updater replaces pods for
	// memory (and compute growth) only. False when there is no such autoscaler or the
	// GPUFractionAutoscaler opts in to compute changes.
	UpdaterConditionComputeShrinkHeld = "ComputeShrinkHeld"
	// UpdaterConditionRolledBack is True while status.updater.floor is in force: a
	// guardrail tripped after a shrink and the previous allocation is being restored.
	UpdaterConditionRolledBack = "RolledBack"
)

// PodUpdateAction is what the updater does (or, in updateMode Off, would do) to a pod.
// +kubebuilder:validation:Enum=Evict;InPlace
type PodUpdateAction string

const (
	// PodUpdateEvict replaces the pod through the Eviction API; its replacement gets the
	// recommendation from the admission webhook.
	PodUpdateEvict PodUpdateAction = "Evict"
	// PodUpdateInPlace changes the running pod (the annotations backend's gpufrac.io/*
	// annotations) without replacing it.
	PodUpdateInPlace PodUpdateAction = "InPlace"
)

// UpdaterStatus is the updater's report for one autoscaler.
type UpdaterStatus struct {
	// ObservedGeneration is the autoscaler generation the updater last evaluated.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// TargetRef is the workload this status was written for (spec.targetRef then). Its
	// floor, held compute, shrink verification and last replacement times are that
	// workload's: after spec.targetRef moves to another workload nothing applies them
	// to the new one (contract.UpdaterStatusOf). Unset in statuses of earlier versions,
	// which are taken as the current target's.
	// +optional
	TargetRef *autoscalingv1.CrossVersionObjectReference `json:"targetRef,omitempty"`

	// ResizeWindowOpen is true while a resize window is open (always true without
	// windows).
	ResizeWindowOpen bool `json:"resizeWindowOpen"`
	// WindowEnd is when the open resize window closes; unset when no window is open or
	// there are no windows.
	// +optional
	WindowEnd *metav1.Time `json:"windowEnd,omitempty"`
	// NextWindowStart is the next start of a resize window after the open one (or after
	// now when none is open); unset without windows.
	// +optional
	NextWindowStart *metav1.Time `json:"nextWindowStart,omitempty"`

	// Pods is the number of the workload's pods the updater evaluated (not terminating).
	Pods int32 `json:"pods"`
	// PodsOutOfDate is the number of those pods whose applied fraction is outside the
	// recommendation's bounds or too far from its target.
	PodsOutOfDate int32 `json:"podsOutOfDate"`
	// Updates lists the out-of-date pods (at most 20) with what the updater does, or in
	// updateMode Off would do, and why it has not yet.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Updates []PodUpdate `json:"updates,omitempty"`

	// BlockedReason is set while the updater applies nothing to this workload although
	// pods are out of date: a constant such as window-closed, admission-unavailable,
	// min-replicas, warm-up or pdb (the reason label of gpufrac_updater_skips_total).
	// +optional
	BlockedReason string `json:"blockedReason,omitempty"`
	// BlockedMessage says the same for people.
	// +optional
	BlockedMessage string `json:"blockedMessage,omitempty"`

	// LastEvictionTime is when the updater last evicted one of the workload's pods.
	// +optional
	LastEvictionTime *metav1.Time `json:"lastEvictionTime,omitempty"`
	// AwaitedReplacements are the pods the updater evicted (or deleted) whose
	// replacement it still awaits, kept here so that a restarted updater awaits them
	// too: each counts in flight in the workload's disruption budget until a pod created
	// since is Ready, or for the updater's --replacement-timeout (longer while its
	// ReplicaSet, StatefulSet, DaemonSet or Job has not created it). Without it an
	// updater restart forgot the replacements of a controller whose wanted pods it
	// cannot read (a custom controller, or none) and could evict more pods at once.
	// +listType=atomic
	// +optional
	AwaitedReplacements []AwaitedReplacement `json:"awaitedReplacements,omitempty"`
	// LastInPlaceUpdateTime is when the updater last changed one of the workload's pods
	// in place.
	// +optional
	LastInPlaceUpdateTime *metav1.Time `json:"lastInPlaceUpdateTime,omitempty"`
	// LastRound is the workload's last round of non-urgent replacements (the updater's
	// hysteresis: when it started and the directions it goes on in), so that a
	// restarted updater goes on with it as it would have, and neither turns a round
	// back nor starts the next one early. Written on every autoscaler of the workload,
	// also those not in charge of it, so that the round outlives the autoscaler in
	// charge. Unset before the workload's first round.
	// +optional
	LastRound *ReplacementRound `json:"lastRound,omitempty"`

	// Verification is the last shrink, watched for a guardrail breach until its end.
	// +optional
	Verification *ShrinkVerification `json:"verification,omitempty"`

	// Floor, while set and before its until time, is the allocation below which the
	// recommender must not recommend: a guardrail tripped after a shrink. The updater
	// replaces pods below it (urgently, outside resize windows when urgentGrowth allows)
	// once the recommendation's target is at least the floor.
	// +optional
	Floor *UpdaterFloor `json:"floor,omitempty"`

	// HeldCompute is set while ComputeShrinkHeld is True: per container, the largest
	// compute (share of one GPU) the workload's running pods hold. The admission webhook
	// writes at least this into every new or replacement pod, so a horizontal
	// autoscaler scaling on GPU utilisation never sees compute shrink
	// (contract.HeldCompute). Memory is not set.
	// +listType=map
	// +listMapKey=containerName
	// +optional
	HeldCompute []ContainerAllocation `json:"heldCompute,omitempty"`

	// Conditions: ComputeShrinkHeld, RolledBack.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AwaitedReplacement is a pod the updater evicted (or deleted) whose replacement it
// awaits (UpdaterStatus.AwaitedReplacements).
type AwaitedReplacement struct {
	// Pod is the evicted pod's name.
	Pod string `json:"pod"`
	// UID is the evicted pod's UID.
	UID types.UID `json:"uid"`
	// EvictedAt is when it was evicted or deleted: a pod created since, Ready, is its
	// replacement.
	EvictedAt metav1.Time `json:"evictedAt"`
	// Controller is the evicted pod's controller; absent when it had none.
	// +optional
	Controller *metav1.OwnerReference `json:"controller,omitempty"`
}

// PodUpdate is one out-of-date pod.
type PodUpdate struct {
	// Pod is the pod's name (in the autoscaler's namespace).
	Pod string `json:"pod"`
	// Action is Evict or InPlace.
	Action PodUpdateAction `json:"action"`
	// Urgent is true for growth that protects the workload (out-of-memory restart,
	// memory near its limit, latency guardrail breach, rollback), which may apply
	// outside resize windows.
	// +optional
	Urgent bool `json:"urgent,omitempty"`
	// Reason says which container and resource is out of date, e.g. "main: memory 3Gi
	// above upper bound 1536Mi".
	Reason string `json:"reason"`
	// SkipReason, when set, is why the pod was not updated in the last cycle: a constant
	// such as mode-off, window-closed, pdb or rate-limited.
	// +optional
	SkipReason string `json:"skipReason,omitempty"`
	// SkipMessage says the same for people (for pdb: the API server's refusal).
	// +optional
	SkipMessage string `json:"skipMessage,omitempty"`
}

// ContainerAllocation is the GPU fraction of one container.
type ContainerAllocation struct {
	// ContainerName is the container's name.
	ContainerName string `json:"containerName"`
	// Memory is GPU memory, bytes.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is a share of one GPU ("350m" = 0.35).
	// +optional
	Compute *resource.Quantity `json:"compute,omitempty"`
}

// ShrinkVerification is a shrink watched for a guardrail breach: the recommendation's
// LatencyGuardrailActive condition turning True with reason ObjectiveBreached, or a
// container restart of a pod with the smaller fraction.
type ShrinkVerification struct {
	// Started is when the last pod was shrunk (evicted for a smaller fraction, or
	// changed in place).
	Started metav1.Time `json:"started"`
	// Until is the end of the verification period.
	Until metav1.Time `json:"until"`
	// Previous is the allocation before the shrink, per container: the largest of the
	// shrunk pods'.
	Previous []ContainerAllocation `json:"previous"`
}

// ReplacementRound is a round of non-urgent replacements of a workload's pods.
type ReplacementRound struct {
	// Started is when the round's first replacement was made.
	Started metav1.Time `json:"started"`
	// Grow is true while the round goes on for pods to grow.
	// +optional
	Grow bool `json:"grow,omitempty"`
	// Shrink is true while the round goes on for pods to shrink.
	// +optional
	Shrink bool `json:"shrink,omitempty"`
}

// UpdaterFloor is the allocation the recommender must not go below after a rollback.
type UpdaterFloor struct {
	// Memory is the pod's total floor of GPU memory (sum over containers), bytes.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Compute is the pod's total floor of compute, share of one GPU.
	// +optional
	Compute *resource.Quantity `json:"compute,omitempty"`
	// Containers is the floor per container (what the recommender should honour).
	// +optional
	Containers []ContainerAllocation `json:"containers,omitempty"`
	// Until is when the floor expires.
	Until metav1.Time `json:"until"`
	// Reason says which guardrail tripped after which shrink.
	Reason string `json:"reason"`
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

package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlanMode says whether the sharing planner only plans or also configures the node pool.
// +kubebuilder:validation:Enum=DryRun;Apply
type PlanMode string

const (
	// PlanModeDryRun writes the plan into the policy's status and changes nothing else
	// (the default).
	PlanModeDryRun PlanMode = "DryRun"
	// PlanModeApply also writes the NVIDIA device-plugin config entry into the ConfigMap
	// and labels the pool's nodes nvidia.com/device-plugin.config with it.
	PlanModeApply PlanMode = "Apply"
)

// Condition types and reasons of a GPUSharingPolicy.
const (
	// ConditionPlanned is True when the last reconcile computed a plan.
	ConditionPlanned = "Planned"
	// ConditionApplied is True when the device-plugin config and the node labels match
	// the plan (Apply mode); False with reason DryRun in DryRun mode.
	ConditionApplied = "Applied"

	// ReasonPlanned: a plan was computed.
	ReasonPlanned = "Planned"
	// ReasonNoNodes: the node selector matches no node.
	ReasonNoNodes = "NoNodes"
	// ReasonNoGPUMemory: spec.gpuMemory is unset and no selected node has the
	// nvidia.com/gpu.memory label.
	ReasonNoGPUMemory = "NoGPUMemory"
	// ReasonNoRecommendations: no selected autoscaler has a recommendation with a memory
	// target yet.
	ReasonNoRecommendations = "NoRecommendations"
	// ReasonInvalidSpec: a selector cannot be parsed.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonDryRun: DryRun mode, nothing was written.
	ReasonDryRun = "DryRun"
	// ReasonApplied: the ConfigMap entry and the node labels were written.
	ReasonApplied = "Applied"
	// ReasonApplyFailed: writing the ConfigMap or a node label failed (retried).
	ReasonApplyFailed = "ApplyFailed"
	// ReasonNodesClaimed: some selected nodes are labeled for another policy in Apply
	// mode that selects them too; nothing was written (Applied False).
	ReasonNodesClaimed = "NodesClaimed"
)

// DevicePluginConfigLabel is the node label through which NVIDIA's k8s-device-plugin
// (and the GPU operator) picks its config entry, by key, from its config ConfigMap.
const DevicePluginConfigLabel = "nvidia.com/device-plugin.config"

// ConfigMapReference names a ConfigMap.
type ConfigMapReference struct {
	// Namespace of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// Name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// GPUSharingPolicySpec names a node pool and the workloads whose recommendations size
// the NVIDIA device plugin's sharing on it.
// +kubebuilder:validation:XValidation:rule="!has(self.sharingMode) || self.sharingMode != 'Exclusive'",message="sharingMode is MPS or TimeSlicing (omit it to follow the recommendations)"
type GPUSharingPolicySpec struct {
	// NodeSelector selects the node pool's nodes by label.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
	// AutoscalerSelector selects, in every namespace, the GPUFractionAutoscalers that opt
	// in: their recommendations size the pool's sharing. {} selects all of them.
	AutoscalerSelector metav1.LabelSelector `json:"autoscalerSelector"`
	// Mode is DryRun (the default: plan only) or Apply (also write the device-plugin
	// ConfigMap entry and the node labels). Neither restarts nor evicts a pod.
	// +kubebuilder:default=DryRun
	// +optional
	Mode PlanMode `json:"mode,omitempty"`
	// SharingMode forces TimeSlicing or MPS. Omitted: MPS when any selected
	// recommendation recommends MPS, else TimeSlicing.
	// +optional
	SharingMode SharingMode `json:"sharingMode,omitempty"`
	// MaxReplicas is the most replicas one GPU is advertised as. 48 is the most CUDA
	// MPS clients one GPU serves (Volta and later, NVIDIA MPS documentation).
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=48
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
	// ComputeBudget is how much compute the replicas of one GPU may ask for together, a
	// share of one GPU: N copies of the largest compute target must fit it. For MPS it
	// is at most 1 (SMs are partitioned); time-slicing may overcommit (e.g. 1.5 accepts
	// contention). Omitted: 1.
	// +optional
	ComputeBudget *resource.Quantity `json:"computeBudget,omitempty"`
	// MinConfidence is the least recommendation confidence, percent 0–100, at which an
	// opted-in workload's recommendation sizes the pool. A workload below it (or with no
	// confidence) has a need that is not known yet: it bounds the pool to one pod per GPU
	// (no sharing) until its confidence reaches this, as the admission webhook keeps its
	// pods on whole GPUs (its --min-confidence; contract.DefaultMinConfidence). Omitted: 50.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinConfidence *int32 `json:"minConfidence,omitempty"`
	// GPUMemory is the memory of one GPU of the pool, bytes, at most: the plan uses the
	// smaller of it and the smallest nvidia.com/gpu.memory label (MiB, set by GPU
	// feature discovery) of its nodes, so it can keep room for CUDA contexts but never
	// size replicas for a larger GPU than the pool's smallest. Omitted: that label.
	// +optional
	GPUMemory *resource.Quantity `json:"gpuMemory,omitempty"`
	// ConfigMap is the device plugin's config ConfigMap (the GPU operator's
	// devicePlugin.config.name). Apply mode writes the key gpufrac-<policy name> into it
	// and creates it when missing; other keys are kept.
	ConfigMap ConfigMapReference `json:"configMap"`
}

// MPSPlan is what NVIDIA's device plugin gives each MPS client when a GPU is shared by
// Replicas clients: an equal share of memory and of the streaming multiprocessors.
type MPSPlan struct {
	// PinnedDeviceMemoryLimit is each client's memory limit, bytes (whole MiB): GPU
	// memory / replicas.
	PinnedDeviceMemoryLimit resource.Quantity `json:"pinnedDeviceMemoryLimit"`
	// ActiveThreadPercentage is each client's share of the SMs, percent: 100 / replicas.
	ActiveThreadPercentage int32 `json:"activeThreadPercentage"`
}

// GPUSharingPolicyStatus is the plan for the node pool.
type GPUSharingPolicyStatus struct {
	// ObservedGeneration is the spec generation the plan was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Nodes is the number of nodes the selector matches.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// GPUs is the number of physical GPUs of those nodes (the nvidia.com/gpu.count
	// label, else the nvidia.com/gpu capacity).
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// GPUMemory is the memory of one GPU the plan used, bytes.
	// +optional
	GPUMemory *resource.Quantity `json:"gpuMemory,omitempty"`
	// SharingMode is the planned mode: TimeSlicing, MPS, or Exclusive when no two
	// replicas fit one GPU.
	// +optional
	SharingMode SharingMode `json:"sharingMode,omitempty"`
	// Replicas is N, the replicas each GPU is advertised as: the smallest of
	// MemoryReplicas, ComputeReplicas and spec.maxReplicas, at least 1.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// MemoryReplicas is the most copies of the largest memory target that fit one GPU.
	// +optional
	MemoryReplicas int32 `json:"memoryReplicas,omitempty"`
	// ComputeReplicas is the most copies of the largest compute target that fit the
	// compute budget; 0 when no selected recommendation has a compute target.
	// +optional
	ComputeReplicas int32 `json:"computeReplicas,omitempty"`
	// Reason says in one line what limits Replicas.
	// +optional
	Reason string `json:"reason,omitempty"`
	// LargestMemory is the largest pod memory target of the selected recommendations, bytes.
	// +optional
	LargestMemory *resource.Quantity `json:"largestMemory,omitempty"`
	// LargestCompute is the largest pod compute target, share of one GPU.
	// +optional
	LargestCompute *resource.Quantity `json:"largestCompute,omitempty"`
	// MPS holds the per-client limits when SharingMode is MPS.
	// +optional
	MPS *MPSPlan `json:"mps,omitempty"`
	// Workloads is the number of selected autoscalers with a recommendation.
	// +optional
	Workloads int32 `json:"workloads,omitempty"`
	// Pods is the number of their pods (the recommendations' matchedPods).
	// +optional
	Pods int32 `json:"pods,omitempty"`
	// GPUsHeld is the GPUs those pods hold at one GPU each.
	// +optional
	GPUsHeld int32 `json:"gpusHeld,omitempty"`
	// GPUsNeeded is the GPUs they need at Replicas per GPU: ceil(pods / replicas).
	// +optional
	GPUsNeeded int32 `json:"gpusNeeded,omitempty"`
	// GPUsFreed is GPUsHeld − GPUsNeeded.
	// +optional
	GPUsFreed int32 `json:"gpusFreed,omitempty"`
	// ConfigName is the device-plugin config key (and node label value) of this plan.
	// +optional
	ConfigName string `json:"configName,omitempty"`
	// Config is the device-plugin config entry the plan writes (NVIDIA k8s-device-plugin
	// config file format, YAML).
	// +optional
	Config string `json:"config,omitempty"`
	// LabeledNodes is the number of selected nodes whose nvidia.com/device-plugin.config
	// label names ConfigName.
	// +optional
	LabeledNodes int32 `json:"labeledNodes,omitempty"`
	// LastPlanTime is when the plan was last computed.
	// +optional
	LastPlanTime *metav1.Time `json:"lastPlanTime,omitempty"`
	// Conditions: Planned, Applied.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GPUSharingPolicy sizes NVIDIA device-plugin GPU sharing (time-slicing or MPS) for one
// node pool from the recommendations of the workloads that opt in.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gsp,categories=gpufrac
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 55",message="the name is at most 55 characters: the device-plugin config it names, \"gpufrac-\" + the name, is a node label value (at most 63)"
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpus`
// +kubebuilder:printcolumn:name="Sharing",type=string,JSONPath=`.status.sharingMode`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Freed",type=integer,JSONPath=`.status.gpusFreed`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUSharingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUSharingPolicySpec   `json:"spec"`
	Status GPUSharingPolicyStatus `json:"status,omitempty"`
}

// GPUSharingPolicyList is a list of GPUSharingPolicies.
// +kubebuilder:object:root=true
type GPUSharingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUSharingPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GPUSharingPolicy{}, &GPUSharingPolicyList{})
}

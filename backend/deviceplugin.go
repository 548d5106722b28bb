package backend

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/sharingplan"
	"github.com/gpufrac/gpufrac/workload"
)

// What the device-plugin backends (nvidia-timeslicing, nvidia-mps) share: finding the
// applied plan of the GPUSharingPolicy that selects a workload's autoscaler, placing a
// pod on one replica of that pool's GPUs, and reading back the share the pod holds.

// Annotations the device-plugin backends write on a pod they place on shared capacity.
// Read takes the pod's share from them alone, so reading needs no API call and a later
// change of the plan does not change what a running pod was admitted with.
const (
	// AnnotationSharingPolicy names the GPUSharingPolicy whose plan placed the pod (for
	// people; not read).
	AnnotationSharingPolicy = "gpufrac.io/sharing-policy"
	// AnnotationSharingReplicas is the plan's replicas per GPU, N ≥ 1, when the pod was
	// admitted (decimal integer).
	AnnotationSharingReplicas = "gpufrac.io/sharing-replicas"
	// AnnotationSharingGPUMemory is the memory of one GPU of the pool the plan used, a
	// quantity (bytes, e.g. "80Gi").
	AnnotationSharingGPUMemory = "gpufrac.io/sharing-gpu-memory"
)

// Reasons of UnsafeError for the device-plugin backends.
const (
	// UnsafeNoSharingPlan: no applied GPUSharingPolicy plan of the backend's sharing mode
	// selects the pod's autoscaler (none, several, DryRun, another mode, no sharing, or
	// the policies could not be read).
	UnsafeNoSharingPlan = "no-sharing-plan"
	// UnsafeNodeSelectorConflict: the pod's nodeSelector already names another
	// nvidia.com/device-plugin.config than the plan's.
	UnsafeNodeSelectorConflict = "node-selector-conflict"
)

// SharingPlan is the applied plan of one GPUSharingPolicy, as a device-plugin backend
// writes pods onto it.
type SharingPlan struct {
	// Policy is the GPUSharingPolicy's name.
	Policy string
	// ConfigName is the device-plugin config entry and the value of the pool's
	// nvidia.com/device-plugin.config node label (status.configName).
	ConfigName string
	// Mode is TimeSlicing or MPS.
	Mode gpufracv1.SharingMode
	// Replicas is N, the replicas each GPU is advertised as (≥ 2).
	Replicas int
	// GPUMemoryBytes is the memory of one GPU of the pool, bytes (status.gpuMemory).
	GPUMemoryBytes int64
}

// DevicePluginMode returns the sharing mode a device-plugin backend places pods on:
// TimeSlicing for nvidia-timeslicing, MPS for nvidia-mps; false for any other backend.
func DevicePluginMode(bt gpufracv1.BackendType) (gpufracv1.SharingMode, bool) {
	switch bt {
	case gpufracv1.BackendNVIDIATimeSlicing:
		return gpufracv1.SharingModeTimeSlicing, true
	case gpufracv1.BackendNVIDIAMPS:
		return gpufracv1.SharingModeMPS, true
	}
	return "", false
}

// FindSharingPlan returns the applied plan that backend bt places gfa's pods on: the one
// GPUSharingPolicy whose autoscalerSelector selects gfa, whose Applied condition is True
// (the config entry and the node labels are written) and whose planned sharing mode is
// bt's (DevicePluginMode) with N ≥ 2. Otherwise, or when r is nil or the list fails, it
// returns an *UnsafeError (UnsafeNoSharingPlan) saying why.
func FindSharingPlan(ctx context.Context, r client.Reader, gfa *gpufracv1.GPUFractionAutoscaler, bt gpufracv1.BackendType) (SharingPlan, error) {
	policies, err := ListSharingPolicies(ctx, r)
	if err != nil {
		return SharingPlan{}, err
	}
	return SelectSharingPlan(policies, gfa, bt)
}

// ListSharingPolicies lists every GPUSharingPolicy through r. No reader or a failed list
// returns an *UnsafeError (UnsafeNoSharingPlan): without the policies no pod is placed
// on a plan.
func ListSharingPolicies(ctx context.Context, r client.Reader) ([]gpufracv1.GPUSharingPolicy, error) {
	if r == nil {
		return nil, Unsafe(UnsafeNoSharingPlan, "no client to read GPUSharingPolicies")
	}
	var list gpufracv1.GPUSharingPolicyList
	if err := r.List(ctx, &list); err != nil {
		return nil, Unsafe(UnsafeNoSharingPlan, "listing GPUSharingPolicies: %v", err)
	}
	return list.Items, nil
}

// SelectSharingPlan is FindSharingPlan over policies already listed (one list serves a
// whole updater cycle); it returns an *UnsafeError (UnsafeNoSharingPlan) as
// FindSharingPlan does.
func SelectSharingPlan(policies []gpufracv1.GPUSharingPolicy, gfa *gpufracv1.GPUFractionAutoscaler, bt gpufracv1.BackendType) (SharingPlan, error) {
	mode, ok := DevicePluginMode(bt)
	if !ok {
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "backend %s places no pod on device-plugin sharing", bt)
	}
	var selected []*gpufracv1.GPUSharingPolicy
	for i := range policies {
		pol := &policies[i]
		sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.AutoscalerSelector)
		if err == nil && pol.DeletionTimestamp == nil && sel.Matches(labels.Set(gfa.Labels)) {
			selected = append(selected, pol)
		}
	}
	switch len(selected) {
	case 0:
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "no GPUSharingPolicy selects autoscaler %s/%s (spec.autoscalerSelector)", gfa.Namespace, gfa.Name)
	case 1:
	default:
		names := make([]string, len(selected))
		for i, p := range selected {
			names[i] = p.Name
		}
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "GPUSharingPolicies %s all select autoscaler %s/%s: which pool it belongs to is ambiguous", strings.Join(names, ", "), gfa.Namespace, gfa.Name)
	}
	return appliedPlan(selected[0], mode)
}

// appliedPlan returns pol's plan when it is applied and shares GPUs in mode.
func appliedPlan(pol *gpufracv1.GPUSharingPolicy, mode gpufracv1.SharingMode) (SharingPlan, error) {
	st := pol.Status
	switch {
	case !meta.IsStatusConditionTrue(st.Conditions, gpufracv1.ConditionApplied) || st.ConfigName == "":
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "the plan of GPUSharingPolicy %s is not applied (mode %s; condition Applied not True): no node offers its shared GPUs", pol.Name, pol.Spec.Mode)
	case st.SharingMode != mode || st.Replicas < 2:
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "GPUSharingPolicy %s plans %s × %d per GPU, not %s sharing", pol.Name, st.SharingMode, st.Replicas, mode)
	case st.GPUMemory == nil || st.GPUMemory.Sign() <= 0:
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "GPUSharingPolicy %s has no status.gpuMemory", pol.Name)
	case len(validation.IsValidLabelValue(st.ConfigName)) > 0:
		// Applied with no node to label (an empty pool), or a status edited: as the pod's
		// nodeSelector the API server would reject every pod.
		return SharingPlan{}, Unsafe(UnsafeNoSharingPlan, "the config name %q of GPUSharingPolicy %s is no label value (%s): no node can offer it, and a pod selecting it would be rejected",
			st.ConfigName, pol.Name, strings.Join(validation.IsValidLabelValue(st.ConfigName), "; "))
	}
	return SharingPlan{Policy: pol.Name, ConfigName: st.ConfigName, Mode: mode, Replicas: int(st.Replicas), GPUMemoryBytes: st.GPUMemory.Value()}, nil
}

// devicePluginBackend places pods on NVIDIA device-plugin shared capacity: it is the
// codec of nvidia-timeslicing (nvidiatimeslicing.go) and nvidia-mps (nvidiamps.go),
// which differ in their mode and in what they read as compute.
//
// Apply finds the plan (FindSharingPlan) of the autoscaler bound with ForAutoscaler. Per
// target container that asks for one nvidia.com/gpu it writes requests = limits = 1 (one
// replica: the device plugin's failRequestsGreaterThanOne refuses more) and records the
// replica's share as written: memory GPU memory / N, whole MiB down; compute as
// shareCompute says. A recommended memory above the share is noted (Target.CappedNote:
// an admission warning and a MemoryCapped event). Then, once for the pod: nodeSelector
// nvidia.com/device-plugin.config = the plan's config name (ANDed with any affinity the
// pod has), and the annotations AnnotationSharingPolicy, AnnotationSharingReplicas and
// AnnotationSharingGPUMemory. A container without a GPU is skipped with a warning; one
// asking for several GPUs, no plan, or a nodeSelector naming another config makes the pod
// unsafe (admitted unchanged, with the reason as event on the autoscaler).
type devicePluginBackend struct {
	cfg Config
	typ gpufracv1.BackendType
	// shareCompute is one replica's compute, thousandths of one GPU, of a GPU shared by
	// n; -1 when the backend limits none.
	shareCompute func(n int) int64
	// gfa is the autoscaler in charge of the pod (ForAutoscaler); nil: Apply writes
	// nothing.
	gfa *gpufracv1.GPUFractionAutoscaler
}

// Type implements Codec.
func (b *devicePluginBackend) Type() gpufracv1.BackendType { return b.typ }

// WritesCompute implements Codec: only a backend whose replicas have a compute limit.
func (b *devicePluginBackend) WritesCompute() bool { return b.shareCompute(2) >= 0 }

// ForAutoscaler implements AutoscalerScoped.
func (b *devicePluginBackend) ForAutoscaler(gfa *gpufracv1.GPUFractionAutoscaler) Codec {
	c := *b
	c.gfa = gfa
	return &c
}

// share is what one replica of a GPU of gpuMemoryBytes shared by n gives a container.
func (b *devicePluginBackend) share(gpuMemoryBytes int64, n int) Allocation {
	return Allocation{Memory: sharingplan.ReplicaMemoryBytes(gpuMemoryBytes, n), Compute: b.shareCompute(n)}
}

// Apply implements Codec.
func (b *devicePluginBackend) Apply(pod *corev1.Pod, targets []*Target) ([]string, error) {
	if b.gfa == nil {
		return nil, Unsafe(UnsafeNoSharingPlan, "backend %s: no autoscaler to find the sharing plan of", b.typ)
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.DevicePlugin.Timeout)
	defer cancel()
	plan, err := FindSharingPlan(ctx, b.cfg.DevicePlugin.Policies, b.gfa, b.typ)
	if err != nil {
		return nil, err
	}
	if v, ok := pod.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel]; ok && v != plan.ConfigName {
		return nil, Unsafe(UnsafeNodeSelectorConflict, "the pod's nodeSelector %s=%s is not the plan's %s (GPUSharingPolicy %s)", gpufracv1.DevicePluginConfigLabel, v, plan.ConfigName, plan.Policy)
	}
	share := b.share(plan.GPUMemoryBytes, plan.Replicas)
	wrote := false
	g := perGPUContainers{res: b.cfg.GPUResource, skipped: "not placed on shared GPUs", multiGPU: "a replica of a shared GPU is one"}
	warnings, err := g.each(pod, targets, func(t *Target, c *corev1.Container) string {
		wrote = true
		SetResource(c, b.cfg.GPUResource, 1)
		t.wroteMemory(share.Memory)
		if share.Compute >= 0 {
			t.wroteCompute(share.Compute)
		}
		if t.HasMemory && t.MemoryBytes > share.Memory {
			t.CappedNote = fmt.Sprintf("gpufrac: container %s: recommended %dMiB exceeds the %s replica share %dMiB of GPUSharingPolicy %s (%d per GPU); the planner re-sizes N from the recommendations", c.Name, ceilMiB(t.MemoryBytes), plan.Mode, share.Memory/MiB, plan.Policy, plan.Replicas)
			return t.CappedNote
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	if !wrote {
		return warnings, nil
	}
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{}
	}
	pod.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel] = plan.ConfigName
	SetAnnotation(pod, AnnotationSharingPolicy, plan.Policy)
	SetAnnotation(pod, AnnotationSharingReplicas, strconv.Itoa(plan.Replicas))
	SetAnnotation(pod, AnnotationSharingGPUMemory, resource.NewQuantity(plan.GPUMemoryBytes, resource.BinarySI).String())
	return warnings, nil
}

// Read implements Codec: every container asking for one nvidia.com/gpu of a pod with
// AnnotationSharingReplicas (N ≥ 1) and AnnotationSharingGPUMemory (> 0) holds one
// replica's share; a pod without them (or with values that do not parse) holds none.
func (b *devicePluginBackend) Read(pod *corev1.Pod) map[string]Allocation {
	n, err := strconv.Atoi(pod.Annotations[AnnotationSharingReplicas])
	if err != nil || n < 1 {
		return map[string]Allocation{}
	}
	mem, err := resource.ParseQuantity(pod.Annotations[AnnotationSharingGPUMemory])
	if err != nil || mem.Sign() <= 0 {
		return map[string]Allocation{}
	}
	share := b.share(mem.Value(), n)
	return readEach(pod, func(pc workload.PodContainer, a *Allocation) {
		if GPUCount(pc.Container, b.cfg.GPUResource) == 1 {
			*a = share
		}
	})
}

// DevicePluginConfig configures the nvidia-timeslicing and nvidia-mps backends.
type DevicePluginConfig struct {
	// Policies reads GPUSharingPolicies (cluster-scoped; list). Set by cmd/admission (an
	// informer cache, or the API reader when the CRD is not served) and cmd/updater (no
	// flag). Nil: no plan is ever found, pods are admitted unchanged.
	Policies client.Reader
	// Timeout bounds the policy list of one Apply. Default 1s (inside the webhook's 2s
	// timeout).
	Timeout time.Duration
}

func (d *DevicePluginConfig) withDefaults() {
	if d.Timeout <= 0 {
		d.Timeout = time.Second
	}
}

func (d DevicePluginConfig) validate() []error {
	if d.Timeout < 0 {
		return []error{errors.New("device-plugin-timeout must not be negative")}
	}
	return nil
}

func (d *DevicePluginConfig) addFlags(fs *flag.FlagSet, def DevicePluginConfig) {
	fs.DurationVar(&d.Timeout, "device-plugin-timeout", def.Timeout, "Bound on the GPUSharingPolicy read of the nvidia-timeslicing and nvidia-mps backends per pod.")
}

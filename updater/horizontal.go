package updater

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// AnnotationAllowComputeShrink on a GPUFractionAutoscaler, with value "true", lets the
// updater shrink compute even while a horizontal autoscaler scales the same workload on
// GPU utilisation (ComputeShrinkHeld is then False with reason OptedIn).
const AnnotationAllowComputeShrink = "gpufrac.io/allow-compute-shrink-with-horizontal-autoscaler"

// Reasons of the ComputeShrinkHeld condition (status.updater.conditions).
const (
	// ReasonGPUHorizontalAutoscaler: ComputeShrinkHeld True.
	ReasonGPUHorizontalAutoscaler = "GPUHorizontalAutoscaler"
	// ReasonOptedIn: ComputeShrinkHeld False although a GPU horizontal autoscaler
	// exists (AnnotationAllowComputeShrink).
	ReasonOptedIn = "OptedIn"
	// ReasonNoGPUHorizontalAutoscaler: ComputeShrinkHeld False.
	ReasonNoGPUHorizontalAutoscaler = "NoGPUHorizontalAutoscaler"
)

// kedaRecheck is how long the updater trusts that KEDA's CRD is absent.
const kedaRecheck = 5 * time.Minute

// gpuMetricPattern matches metric names (and KEDA trigger metadata) that measure GPU
// utilisation: DCGM fields (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE, …),
// anything naming the GPU (gpu_utilization, hami_…_gpu_…, GPU_UTIL), HAMi's
// per-container utilisation, which names the device instead
// (hami_container_device_utilization_ratio, legacy Device_utilization_desc_of_container),
// recording rules named after DCGM's profiling fields without their prefix
// (job:sm_active:avg5m, …:gr_engine_active:…, tensor_active, sm_occupancy), and NVIDIA
// exporters' names (nvidia_smi_…, nvml).
var gpuMetricPattern = regexp.MustCompile(`(?i)dcgm|gpu|device_utili[sz]ation|sm_active|sm_occupancy|gr_engine|tensor_active|nvidia|nvml`)

// ScaledObjectGVK is KEDA's ScaledObject (keda.sh/v1alpha1), read as unstructured so the
// updater needs neither KEDA's Go module nor its CRD.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// HorizontalScaler is a horizontal autoscaler of a workload that scales on a GPU metric.
type HorizontalScaler struct {
	// Kind is HorizontalPodAutoscaler or ScaledObject; Name is its name.
	Kind, Name string
	// Metric is the first GPU metric (or KEDA trigger metadata value) it scales on.
	Metric string
}

// String renders "HorizontalPodAutoscaler web (metric DCGM_FI_DEV_GPU_UTIL)".
func (h HorizontalScaler) String() string {
	return fmt.Sprintf("%s %s (metric %s)", h.Kind, h.Name, h.Metric)
}

// targetsWorkload reports whether a scale target (kind, name) is the workload.
func targetsWorkload(kind, name string, ref workload.Ref) bool {
	if kind == "" {
		kind = "Deployment" // KEDA's default
	}
	return kind == ref.Kind && name == ref.Name
}

// HPAGPUMetric returns the first metric of an autoscaling/v2 HorizontalPodAutoscaler
// whose name, or a value its selector matches (matchLabels, or an In expression of
// matchExpressions), matches gpuMetricPattern, or "".
func HPAGPUMetric(h *autoscalingv2.HorizontalPodAutoscaler) string {
	check := func(id *autoscalingv2.MetricIdentifier) string {
		if id == nil {
			return ""
		}
		if gpuMetricPattern.MatchString(id.Name) {
			return id.Name
		}
		if id.Selector != nil {
			keys := make([]string, 0, len(id.Selector.MatchLabels))
			for k := range id.Selector.MatchLabels {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if v := id.Selector.MatchLabels[k]; gpuMetricPattern.MatchString(v) {
					return id.Name + "{" + k + "=" + v + "}"
				}
			}
			for _, e := range id.Selector.MatchExpressions {
				if e.Operator != metav1.LabelSelectorOpIn {
					continue // NotIn, Exists, DoesNotExist select no GPU field by name
				}
				for _, v := range e.Values {
					if gpuMetricPattern.MatchString(v) {
						return id.Name + "{" + e.Key + " in " + v + "}"
					}
				}
			}
		}
		return ""
	}
	for _, m := range h.Spec.Metrics {
		var name string
		switch {
		case m.Pods != nil:
			name = check(&m.Pods.Metric)
		case m.Object != nil:
			name = check(&m.Object.Metric)
		case m.External != nil:
			name = check(&m.External.Metric)
		case m.Resource != nil && gpuMetricPattern.MatchString(string(m.Resource.Name)):
			name = string(m.Resource.Name)
		case m.ContainerResource != nil && gpuMetricPattern.MatchString(string(m.ContainerResource.Name)):
			name = string(m.ContainerResource.Name)
		}
		if name != "" {
			return name
		}
	}
	return ""
}

// ScaledObjectGPUMetric returns the first trigger of a KEDA ScaledObject whose type,
// name or metadata value (e.g. a Prometheus query or metricName) matches
// gpuMetricPattern, rendered as "<type>: <value>", or "".
func ScaledObjectGPUMetric(so *unstructured.Unstructured) string {
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	for _, t := range triggers {
		tm, ok := t.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := tm["type"].(string)
		if name, _ := tm["name"].(string); gpuMetricPattern.MatchString(name) {
			return typ + ": " + name
		}
		md, _ := tm["metadata"].(map[string]any)
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if v, ok := md[k].(string); ok && gpuMetricPattern.MatchString(v) {
				v = strings.TrimSpace(v)
				if len(v) > 100 {
					v = v[:100] + "…"
				}
				return typ + ": " + v
			}
		}
	}
	return ""
}

// FindGPUHorizontalScalers lists the HorizontalPodAutoscalers (through hpaReader, e.g.
// a cache) and KEDA ScaledObjects (through soReader, e.g. the API reader; nil skips
// them) in the workload's namespace that target the workload and scale on a GPU metric.
// A cluster without KEDA's CRD is not an error: kedaAbsent is then true (callers may
// skip soReader for a while). It returns the readers' other errors.
func FindGPUHorizontalScalers(ctx context.Context, hpaReader, soReader client.Reader, ref workload.Ref) (found []HorizontalScaler, kedaAbsent bool, err error) {
	var out []HorizontalScaler
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if err := hpaReader.List(ctx, &hpas, client.InNamespace(ref.Namespace)); err != nil {
		return nil, false, fmt.Errorf("listing HorizontalPodAutoscalers: %w", err)
	}
	for i := range hpas.Items {
		h := &hpas.Items[i]
		if !targetsWorkload(h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, ref) {
			continue
		}
		if m := HPAGPUMetric(h); m != "" {
			out = append(out, HorizontalScaler{Kind: "HorizontalPodAutoscaler", Name: h.Name, Metric: m})
		}
	}
	if soReader == nil {
		return out, false, nil
	}
	sos := &unstructured.UnstructuredList{}
	sos.SetGroupVersionKind(ScaledObjectGVK.GroupVersion().WithKind(ScaledObjectGVK.Kind + "List"))
	if err := soReader.List(ctx, sos, client.InNamespace(ref.Namespace)); err != nil {
		if meta.IsNoMatchError(err) || isNotServed(err) {
			return out, true, nil
		}
		return out, false, fmt.Errorf("listing KEDA ScaledObjects: %w", err)
	}
	for i := range sos.Items {
		so := &sos.Items[i]
		kind, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
		name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
		if !targetsWorkload(kind, name, ref) {
			continue
		}
		if m := ScaledObjectGPUMetric(so); m != "" {
			out = append(out, HorizontalScaler{Kind: "ScaledObject", Name: so.GetName(), Metric: m})
		}
	}
	return out, false, nil
}

// isNotServed reports an API "not found" for a whole resource type (the CRD is absent
// but the RESTMapper still knew it).
func isNotServed(err error) bool {
	return strings.Contains(err.Error(), "the server could not find the requested resource")
}

// holdCompute is the plan's horizontal-scaler step: it looks for horizontal autoscalers
// that scale the workload on GPU utilisation, sets the ComputeShrinkHeld condition and
// p.held, and reports whether compute shrinking is held (also when the search failed).
func (u *Updater) holdCompute(ctx context.Context, p *plan, now time.Time) bool {
	soReader := u.APIReader
	if soReader == nil || now.Before(u.kedaAbsentTill) {
		soReader = nil
	}
	hs, kedaAbsent, err := FindGPUHorizontalScalers(ctx, u.Client, soReader, p.ref)
	if kedaAbsent {
		u.kedaAbsentTill = now.Add(kedaRecheck)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Looking for horizontal autoscalers; compute shrinking held this cycle", "autoscaler", klog.KObj(p.gfa))
	}
	gfa := p.gfa
	cond := metav1.Condition{Type: gpufracv1.UpdaterConditionComputeShrinkHeld, Status: metav1.ConditionFalse, ObservedGeneration: gfa.Generation}
	switch {
	case len(hs) > 0 && gfa.Annotations[AnnotationAllowComputeShrink] == "true":
		cond.Reason = ReasonOptedIn
		cond.Message = fmt.Sprintf("%s scales on GPU utilisation; compute is shrunk anyway (%s=true)", joinScalers(hs), AnnotationAllowComputeShrink)
	case len(hs) > 0:
		p.held = hs
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonGPUHorizontalAutoscaler
		cond.Message = fmt.Sprintf("%s scales the workload on GPU utilisation: shrinking compute would raise utilisation and add replicas, so pods are replaced for memory and compute growth only (annotate the autoscaler %s=true to allow compute shrinking)", joinScalers(hs), AnnotationAllowComputeShrink)
	default:
		cond.Reason, cond.Message = ReasonNoGPUHorizontalAutoscaler, "no HorizontalPodAutoscaler or ScaledObject scales the workload on a GPU metric"
	}
	cond.Message = truncate(cond.Message, 1000)
	meta.SetStatusCondition(&p.st.Conditions, cond)
	return err != nil || len(p.held) > 0
}

// publishHeldCompute publishes, while compute is held, the most compute each container
// of the running pods holds (status.updater.heldCompute): the webhook gives every new or
// replacement pod at least that (contract.HeldCompute). Until the published value
// covers it, nothing is replaced: it returns why, or "".
func (p *plan) publishHeldCompute() string {
	if len(p.held) == 0 {
		return ""
	}
	p.st.HeldCompute = heldCompute(p.pods, p.allocs)
	if contract.ComputeShrinkHeld(p.gfa) && covers(p.gfa.Status.Updater.HeldCompute, p.st.HeldCompute) {
		return ""
	}
	return fmt.Sprintf("compute is held (%s scales on GPU utilisation) and status.updater.heldCompute (%s) is being published: the webhook must know what a replacement gets at least; next cycle",
		joinScalers(p.held), describeAllocs(p.st.HeldCompute))
}

// heldCompute returns, per container, the most compute any of pods holds (known values
// only), sorted by container name.
func heldCompute(pods []*corev1.Pod, allocs map[types.UID]PodAllocation) []gpufracv1.ContainerAllocation {
	most := map[string]int64{}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		for name, a := range allocs[pod.UID].Containers {
			if cur, ok := most[name]; a.Compute >= 0 && (!ok || a.Compute > cur) {
				most[name] = a.Compute
			}
		}
	}
	out := make([]gpufracv1.ContainerAllocation, 0, len(most))
	for name, m := range most {
		out = append(out, gpufracv1.ContainerAllocation{ContainerName: name, Compute: resource.NewMilliQuantity(m, resource.DecimalSI)})
	}
	sortAllocs(out)
	return out
}

// covers reports whether the published held compute is at least want for every container.
func covers(published, want []gpufracv1.ContainerAllocation) bool {
	for _, w := range want {
		ok := false
		for _, p := range published {
			if p.ContainerName == w.ContainerName && p.Compute != nil && p.Compute.Cmp(*w.Compute) >= 0 {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// joinScalers lists horizontal autoscalers for messages.
func joinScalers(hs []HorizontalScaler) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", ")
}

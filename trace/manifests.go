package trace

import (
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Manifest defaults.
const (
	// DefaultImage is the container image of the demo Deployments: a pause
	// container, since fake (KWOK) nodes run nothing.
	DefaultImage = "registry.k8s.io/pause:3.10"
	// DefaultLatencyObjective is the latency guardrail objective written into each
	// GPUFractionAutoscaler.
	DefaultLatencyObjective = 30 * time.Second
	// GPUResourceName is the extended resource each container requests, one GPU.
	GPUResourceName = "nvidia.com/gpu"
)

// ManifestOptions configures WriteManifests.
type ManifestOptions struct {
	// Image of every container (default DefaultImage).
	Image string
	// LatencyObjective of the latency guardrail (default DefaultLatencyObjective).
	LatencyObjective time.Duration
}

// WriteManifests writes multi-document YAML for a demo cluster: one Namespace per
// namespace of the trace, then for each workload a Deployment (replicas = number of
// trace pods of the workload, label app=<workload>, one container per container
// name of its pods, image opts.Image, requesting and limited to 1 nvidia.com/gpu)
// and a GPUFractionAutoscaler (autoscaling.gpufrac.io/v1alpha1) of the same name
// targeting it, with updateMode "Off" and a latency guardrail on the maximum
// inference_latency_p95_seconds of the workload's pods. The trace must pass Validate.
func WriteManifests(w io.Writer, t Trace, opts ManifestOptions) error {
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.LatencyObjective == 0 {
		opts.LatencyObjective = DefaultLatencyObjective
	}
	if err := t.Validate(); err != nil {
		return err
	}
	var objs []runtime.Object
	seenNS := map[string]bool{}
	wls := t.Workloads()
	for _, wl := range wls {
		if !seenNS[wl.Namespace] {
			seenNS[wl.Namespace] = true
			objs = append(objs, &corev1.Namespace{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
				ObjectMeta: metav1.ObjectMeta{Name: wl.Namespace},
			})
		}
	}
	for _, wl := range wls {
		objs = append(objs, deployment(t, wl, opts.Image), autoscaler(wl, opts.LatencyObjective))
	}
	for i, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		delete(m, "status")
		pruneEmpty(m)
		out, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
	return nil
}

// deployment is the Deployment of workload wl of t (WriteManifests): one replica per
// trace pod, one container of image per container name, each requesting and limited to
// one GPU.
func deployment(t Trace, wl Workload, image string) *appsv1.Deployment {
	pods := map[string]bool{}
	var containers []corev1.Container
	seenC := map[string]bool{}
	for _, i := range wl.Pods {
		p := &t.Pods[i]
		pods[p.Pod] = true
		if !seenC[p.Container] {
			seenC[p.Container] = true
			gpu := corev1.ResourceList{GPUResourceName: resource.MustParse("1")}
			containers = append(containers, corev1.Container{
				Name:      p.Container,
				Image:     image,
				Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu.DeepCopy()},
			})
		}
	}
	replicas := int32(len(pods))
	lbl := map[string]string{"app": wl.Name}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: wl.Name, Namespace: wl.Namespace, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec:       corev1.PodSpec{Containers: containers},
			},
		},
	}
}

// autoscaler is the GPUFractionAutoscaler of workload wl (WriteManifests): update mode
// Off, with a latency guardrail of objective on its pods' highest p95 latency.
func autoscaler(wl Workload, objective time.Duration) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.gpufrac.io/v1alpha1",
		"kind":       "GPUFractionAutoscaler",
		"metadata":   map[string]any{"name": wl.Name, "namespace": wl.Namespace},
		"spec": map[string]any{
			"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": wl.Name},
			"updatePolicy": map[string]any{"updateMode": "Off"},
			"latencyGuardrail": map[string]any{
				// max_over_time: the per-minute gauge only exists in minutes with requests.
				"query": fmt.Sprintf(`max(max_over_time(%s{namespace="%s",pod=~"%s-.*"}[15m]))`,
					MetricLatencyP95, promString(wl.Namespace), promString(strings.ReplaceAll(wl.Name, ".", `\.`))),
				"objective": objective.String(),
			},
		},
	}}
}

// promString escapes s for a double-quoted PromQL string.
func promString(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}

// pruneEmpty removes empty maps and null values (spec: {}, strategy: {},
// creationTimestamp: null) that typed objects leave after conversion.
func pruneEmpty(m map[string]any) {
	for k, v := range m {
		switch x := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			pruneEmpty(x)
			if len(x) == 0 {
				delete(m, k)
			}
		case []any:
			for _, e := range x {
				if em, ok := e.(map[string]any); ok {
					pruneEmpty(em)
				}
			}
		}
	}
}

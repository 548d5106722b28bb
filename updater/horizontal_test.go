package updater

import (
	"context"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpufrac/gpufrac/workload"
)

func hpa(name, kind, target string, metrics ...autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: kind, Name: target}, MaxReplicas: 5, Metrics: metrics}}
}

func podsMetric(name string) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: name}}}
}

func TestHPAGPUMetric(t *testing.T) {
	ext := autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{
		Name: "prometheus-query", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"query": "avg(DCGM_FI_DEV_GPU_UTIL{pod=~\"web-.*\"})"}}}}}
	cpu := autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu"}}
	expr := func(op metav1.LabelSelectorOperator, v string) autoscalingv2.MetricSpec {
		return autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{
			Name: "prometheus-query", Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "__name__", Operator: op, Values: []string{v}}}}}}}
	}
	for _, tc := range []struct {
		h    *autoscalingv2.HorizontalPodAutoscaler
		want string
	}{
		{hpa("a", "Deployment", "web", podsMetric("DCGM_FI_DEV_GPU_UTIL")), "DCGM_FI_DEV_GPU_UTIL"},
		{hpa("b", "Deployment", "web", podsMetric("gpu_utilization_ratio")), "gpu_utilization_ratio"},
		{hpa("c", "Deployment", "web", cpu, podsMetric("requests_per_second")), ""},
		{hpa("d", "Deployment", "web", cpu, ext), `prometheus-query{query=avg(DCGM_FI_DEV_GPU_UTIL{pod=~"web-.*"})}`},
		// GPU utilisation under names without "gpu" or "dcgm": HAMi's per-container
		// utilisation (both spellings) and recording rules of DCGM's profiling fields.
		{hpa("e", "Deployment", "web", cpu, podsMetric("hami_container_device_utilization_ratio")), "hami_container_device_utilization_ratio"},
		{hpa("f", "Deployment", "web", podsMetric("Device_utilization_desc_of_container")), "Device_utilization_desc_of_container"},
		{hpa("g", "Deployment", "web", podsMetric("inference:sm_active:avg5m")), "inference:sm_active:avg5m"},
		{hpa("h", "Deployment", "web", podsMetric("job:gr_engine_active:ratio")), "job:gr_engine_active:ratio"},
		{hpa("i", "Deployment", "web", podsMetric("nvidia_smi_utilization_ratio")), "nvidia_smi_utilization_ratio"},
		// A selector written with matchExpressions: In names the field, NotIn does not.
		{hpa("j", "Deployment", "web", cpu, expr(metav1.LabelSelectorOpIn, "DCGM_FI_PROF_SM_ACTIVE")), "prometheus-query{__name__ in DCGM_FI_PROF_SM_ACTIVE}"},
		{hpa("k", "Deployment", "web", cpu, expr(metav1.LabelSelectorOpNotIn, "DCGM_FI_PROF_SM_ACTIVE")), ""},
	} {
		if got := HPAGPUMetric(tc.h); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.h.Name, got, tc.want)
		}
	}
}

func scaledObject(name, kind, target string, triggers ...map[string]any) *unstructured.Unstructured {
	so := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"scaleTargetRef": map[string]any{"name": target}}}}
	if kind != "" {
		_ = unstructured.SetNestedField(so.Object, kind, "spec", "scaleTargetRef", "kind")
	}
	ts := make([]any, len(triggers))
	for i := range triggers {
		ts[i] = triggers[i]
	}
	_ = unstructured.SetNestedSlice(so.Object, ts, "spec", "triggers")
	so.SetGroupVersionKind(ScaledObjectGVK)
	so.SetNamespace("ml")
	so.SetName(name)
	return so
}

func TestFindGPUHorizontalScalers(t *testing.T) {
	promGPU := map[string]any{"type": "prometheus", "metadata": map[string]any{"serverAddress": "http://prom:9090", "query": "avg(DCGM_FI_DEV_GPU_UTIL{namespace=\"ml\"})", "threshold": "60"}}
	promRPS := map[string]any{"type": "prometheus", "metadata": map[string]any{"serverAddress": "http://prom:9090", "query": "sum(rate(http_requests_total[1m]))"}}
	c := fake.NewClientBuilder().WithObjects(
		hpa("gpu-hpa", "Deployment", "web", podsMetric("DCGM_FI_DEV_GPU_UTIL")),
		hpa("other-target", "Deployment", "api", podsMetric("DCGM_FI_DEV_GPU_UTIL")),
		hpa("statefulset-same-name", "StatefulSet", "web", podsMetric("DCGM_FI_DEV_GPU_UTIL")),
		hpa("cpu-hpa", "Deployment", "web", podsMetric("rps")),
	).Build()
	ref := workload.Ref{Namespace: "ml", Kind: "Deployment", Name: "web"}

	keda := fake.NewClientBuilder().WithObjects(
		scaledObject("so-gpu", "", "web", promGPU), // kind defaults to Deployment
		scaledObject("so-rps", "Deployment", "web", promRPS),
		scaledObject("so-other", "Deployment", "api", promGPU),
	).Build()
	found, absent, err := FindGPUHorizontalScalers(context.Background(), c, keda, ref)
	if err != nil || absent {
		t.Fatal(err, absent)
	}
	if len(found) != 2 || found[0].Name != "gpu-hpa" || found[1].Name != "so-gpu" || found[1].Kind != "ScaledObject" {
		t.Fatalf("found %+v", found)
	}
	t.Logf("%s; %s", found[0], found[1])

	// No KEDA CRD: not an error.
	noKEDA := interceptor.NewClient(keda, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
		return &meta.NoKindMatchError{GroupKind: ScaledObjectGVK.GroupKind(), SearchedVersions: []string{"v1alpha1"}}
	}})
	found, absent, err = FindGPUHorizontalScalers(context.Background(), c, noKEDA, ref)
	if err != nil || !absent || len(found) != 1 {
		t.Fatalf("without KEDA: %v %v %v", found, absent, err)
	}
}

package recommender

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// kaiLabels are a KAI gpu-fractioning daemon series' labels as published: namespace,
// pod, pod_uuid, gpu_uuid and gpu, no container.
func kaiLabels(metric string, p *corev1.Pod, gpuUUID string) map[string]string {
	return map[string]string{"__name__": metric, "namespace": p.Namespace, "pod": p.Name, "pod_uuid": string(p.UID) + "-uid",
		"gpu_uuid": gpuUUID, "gpu": "0", "instance": "10.0.0.7:8080", "job": "kai-fractioning"}
}

func addKAI(t testing.TB, prom *promtest.Server, p *corev1.Pod, gpuUUID string, end time.Time, n int, bytes, percent float64) {
	start := end.Add(-time.Duration(n-1) * 30 * time.Second)
	prom.Add(t, kaiLabels(metrics.KAIMemory, p, gpuUUID), start, 30*time.Second, promtest.Repeat(bytes, n)...)
	prom.Add(t, kaiLabels(metrics.KAIUtilization, p, gpuUUID), start, 30*time.Second, promtest.Repeat(percent, n)...)
}

// withContainers gives every pod of objs these containers and annotations.
func withContainers(objs []client.Object, annotations map[string]string, cs ...corev1.Container) []client.Object {
	for _, p := range podsOf(objs) {
		p.Spec.Containers = cs
		p.Annotations = annotations
	}
	return objs
}

func gpuRequest(name string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}
}

// Kind 13 (issue 13): KAI's pod-level usage (no container label) goes to the pod's GPU
// container — the one KAI's gpu-fraction-container-name names, or the one requesting
// the GPU resource — never to containerName "". With several GPU containers the usage
// is not split by guess: no recommendation, and MetricsUnavailable says why.
func TestPodLevelUsageGoesToTheGPUContainer(t *testing.T) {
	kaiPods := withContainers(deployment("ml", "kai", 1),
		map[string]string{"gpu-fraction": "0.5", "gpu-fraction-container-name": "server"},
		corev1.Container{Name: "proxy"}, corev1.Container{Name: "server"})
	gpuPods := withContainers(deployment("ml", "req", 1), nil, corev1.Container{Name: "sidecar"}, gpuRequest("model"))
	twoPods := withContainers(deployment("ml", "two", 1), nil, gpuRequest("a"), gpuRequest("b"))
	objs := append(append(append(kaiPods, gpuPods...), twoPods...), gfa("ml", "kai", "kai"), gfa("ml", "req", "req"), gfa("ml", "two", "two"))
	h := newEngineHarness(t, objs, metrics.KAI)
	n := 48 * 120
	for i, p := range podsOf(objs) {
		addKAI(t, h.prom, p, "GPU-"+string(rune('a'+i)), h.now, n, 12*gib, 30)
	}
	h.runCycles(t, 2, nil)

	for name, want := range map[string]string{"kai": "server", "req": "model"} {
		st := h.gfr(t, "ml", name).Status
		if len(st.ContainerRecommendations) != 1 {
			t.Fatalf("%s: want one container recommendation, got %+v (%+v)", name, st.ContainerRecommendations, st.Conditions)
		}
		cr := st.ContainerRecommendations[0]
		if cr.ContainerName != want {
			t.Errorf("%s: pod-level usage attributed to %q, want the GPU container %q", name, cr.ContainerName, want)
		}
		if m := cr.Target.Memory.AsApproximateFloat64(); m < 12*gib*1.15 {
			t.Errorf("%s: memory target %v below the 12 GiB read ×1.15", name, m)
		}
		if c := cr.Target.Compute.AsApproximateFloat64(); c < 0.30*1.15-0.001 || c > 0.31*1.15+0.001 {
			t.Errorf("%s: compute target %v, want ≈ 0.30×1.15 (KAI percent read as such)", name, c)
		}
		if c := condition(st, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
			t.Errorf("%s: RecommendationProvided %+v", name, c)
		}
	}
	st := h.gfr(t, "ml", "two").Status
	for _, cr := range st.ContainerRecommendations {
		t.Errorf("two GPU containers: usage attributed to %q by guess", cr.ContainerName)
	}
	c := condition(st, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != ReasonAmbiguousContainer || !strings.Contains(c.Message, "a, b") {
		t.Errorf("two GPU containers: want MetricsUnavailable=True %s naming a, b; got %+v", ReasonAmbiguousContainer, c)
	}
	if p := condition(st, gpufracv1.ConditionRecommendationProvided); p == nil || isTrue(p) {
		t.Errorf("two GPU containers: RecommendationProvided %+v", p)
	}
	// Still ambiguous after more cycles than a scrape gap takes: not reported as one.
	h.runCycles(t, EmptyCyclesWhileRunning+1, nil)
	if c := condition(h.gfr(t, "ml", "two").Status, gpufracv1.ConditionMetricsUnavailable); c == nil || c.Reason != ReasonAmbiguousContainer {
		t.Errorf("after %d cycles: %+v", EmptyCyclesWhileRunning+1, c)
	}
}

package recommender

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// A pod of two GPU containers whose dcgm-exporter is scraped without honor_labels by a
// job that sets namespace and pod target labels but no container (Prometheus' example
// kubernetes-pods job): exported_namespace and exported_pod, with the exporter's own
// container label left as it is. Each container keeps its own usage; before, the
// exported reading copied the absent exported_container over container, the usage came
// back pod-level and, with two GPU containers, was attributed to neither.
func TestExportedPodKeepsItsPlainContainer(t *testing.T) {
	objs := withContainers(deployment("ml", "two", 1), nil, gpuRequest("a"), gpuRequest("b"))
	objs = append(objs, gfa("ml", "two", "two"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	series := func(metric, container string) map[string]string {
		return map[string]string{"__name__": metric, "exported_namespace": p.Namespace, "exported_pod": p.Name, "container": container,
			"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "instance": "10.0.0.5:9400", "job": "kubernetes-pods",
			"UUID": "GPU-" + container, "gpu": "0", "Hostname": "node-1"}
	}
	n := 48 * 120
	from := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	for c, mib := range map[string]float64{"a": 20000, "b": 8000} {
		h.prom.Add(t, series(metrics.DCGMFBUsed, c), from, 30*time.Second, promtest.Repeat(mib, n)...)
		h.prom.Add(t, series(metrics.DCGMSMActive, c), from, 30*time.Second, promtest.Repeat(0.5, n)...)
	}
	h.runCycles(t, 2, nil)

	st := h.gfr(t, "ml", "two").Status
	got := map[string]float64{}
	for _, cr := range st.ContainerRecommendations {
		got[cr.ContainerName] = cr.Target.Memory.AsApproximateFloat64()
	}
	for c, mib := range map[string]float64{"a": 20000, "b": 8000} {
		if m, ok := got[c]; !ok || m < mib*(1<<20)*1.15 || m > mib*(1<<20)*1.3 {
			t.Errorf("container %s: memory target %v (present %v), want ≈ %v MiB × 1.15; conditions %+v", c, m, ok, mib, st.Conditions)
		}
	}
	if len(got) != 2 {
		t.Errorf("recommendations %v, want a and b", got)
	}
}

// KAI's gpu-fractioning series carry no container label of their own, so a container
// label on them is the scrape target's (a ServiceMonitor or PodMonitor adds the
// daemon's container name, with honor_labels or without): the usage is still the pod's
// and goes to its GPU container. Before, it was kept under the daemon's container name,
// a container no pod of the workload has, and the GPU container got no recommendation.
func TestPodLevelUsageIgnoresTheTargetsContainer(t *testing.T) {
	objs := append(withContainers(deployment("ml", "direct", 1), nil, corev1.Container{Name: "sidecar"}, gpuRequest("model")),
		withContainers(deployment("ml", "exported", 1), nil, corev1.Container{Name: "sidecar"}, gpuRequest("model"))...)
	objs = append(objs, gfa("ml", "direct", "direct"), gfa("ml", "exported", "exported"))
	h := newEngineHarness(t, objs, metrics.KAI)
	n := 48 * 120
	from := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	for i, p := range podsOf(objs) {
		for metric, v := range map[string]float64{metrics.KAIMemory: 12 * gib, metrics.KAIUtilization: 30} {
			l := kaiLabels(metric, p, "GPU-"+string(rune('a'+i)))
			l["container"] = "fractioning-daemon"
			if i == 1 { // the "exported" workload's pod
				// Without honor_labels: the target's namespace and pod win.
				l["exported_namespace"], l["exported_pod"] = l["namespace"], l["pod"]
				l["namespace"], l["pod"] = "kai-scheduler", "kai-fractioning-7f9c"
			}
			h.prom.Add(t, l, from, 30*time.Second, promtest.Repeat(v, n)...)
		}
	}
	h.runCycles(t, 2, nil)

	for _, name := range []string{"direct", "exported"} {
		st := h.gfr(t, "ml", name).Status
		if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].ContainerName != "model" {
			t.Errorf("%s: recommendations %+v, want one for model; conditions %+v", name, st.ContainerRecommendations, st.Conditions)
			continue
		}
		if m := st.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64(); m < 12*gib*1.15 {
			t.Errorf("%s: memory target %v below the 12 GiB read ×1.15", name, m)
		}
		if c := condition(st, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
			t.Errorf("%s: RecommendationProvided %+v", name, c)
		}
	}
}

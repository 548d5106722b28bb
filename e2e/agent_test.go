package e2e

import (
	"fmt"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/trace"
)

// TestAgentSimulated runs the whole loop live with no GPU: the node agent in simulated
// mode replays a synthetic trace as NVML per-process data for the cluster's real pods,
// Prometheus scrapes it every second, and the recommender (agent source) recommends
// what the trace implies.
func TestAgentSimulated(t *testing.T) {
	const ns = "e2e-agent"
	createNamespace(t, ns)
	tr := trace.Synthesize(trace.SynthOptions{Workloads: 2, PodsPerWorkload: 1, Duration: time.Hour, Step: time.Minute,
		Seed: 11, End: time.Now(), Namespace: ns, WorkloadPrefix: "agt"})
	csv := writeTraceCSV(t, tr)
	for _, w := range tr.Workloads() {
		create(t, gpuDeployment(ns, w.Name, "inference", 1), autoscaler(ns, w.Name, w.Name))
		waitRunning(t, ns, w.Name, 1)
	}

	port := freePort(t)
	// 60× speed: the hour of trace replays in a minute, sampled every second.
	startProcess(t, "agent", "--simulate", "--trace="+csv, "--kubeconfig="+testCluster.Kubeconfig,
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--interval=1s", "--simulate-speed=60")
	if err := testCluster.AddScrapeTarget(t.Context(), fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	startRecommender(t, "--metric-source=agent")

	for _, w := range tr.Workloads() {
		p := podsOf(tr, w.Name)[0]
		peak := 0.0
		for _, pt := range p.Memory {
			peak = math.Max(peak, pt.V)
		}
		// The recent peak plus headroom, once the replay has passed the trace's peak;
		// packing-aware sizing (deliberate) rounds it down to a whole share of the GPU
		// when the peak plus --fit-memory-headroom still fits that share.
		want := expectedShare(peak*1.15, peak)
		var got float64
		waitFor(t, 150*time.Second, "agent-sourced recommendation of "+w.Name+" reaching the trace's peak", func() (bool, error) {
			r := recommendation(t, ns, w.Name)
			c := condition(r, gpufracv1.ConditionRecommendationProvided)
			if c == nil || c.Status != metav1.ConditionTrue {
				return false, nil
			}
			got = r.Status.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64()
			return got >= want-(1<<20), fmt.Errorf("memory target %.0f MiB, want %.0f MiB", got/(1<<20), want/(1<<20))
		})
		if got > want*1.05+(2<<20) {
			t.Errorf("%s: memory target %.0f MiB above the trace's peak %.0f MiB + 15%% headroom + one bucket", w.Name, got/(1<<20), want/(1<<20))
		}
		r := recommendation(t, ns, w.Name)
		if src := r.Status.ContainerRecommendations[0].ComputeSource; src != "gpufrac_pod_gpu_sm_utilization_ratio" {
			t.Errorf("%s: compute source %q, want the agent's gpufrac_pod_gpu_sm_utilization_ratio", w.Name, src)
		}
		t.Logf("%s: memory %s (trace peak %.0f MiB), compute %s", w.Name, r.Status.ContainerRecommendations[0].Target.Memory, peak/(1<<20), r.Status.ContainerRecommendations[0].Target.Compute)
	}
}

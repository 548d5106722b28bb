package recommender

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// Kind 10 (issue 13): with MPS on two GPUs, dcgm-exporter labels some pods with the other
// GPU, where they read 0. A series that contradicts the GPU the pod was allocated — as
// gpufrac's agent saw its processes, or as HAMi's hami.io/vgpu-devices-allocated records
// it — is not used, so it never shrinks anything: where the agent has the pod, its own
// series win; where only the annotation says, the pod's wrong series are dropped and
// counted. MetricsUnavailable=True (WrongDevice) names the pod and both GPUs. A pod whose
// series agree with the agent is read from the source as before.
func TestWrongDeviceLabelsAreNotUsed(t *testing.T) {
	objs := singlePodWorkloads("ml", "right", "relabelled", "hami")
	pods := podsOf(objs)
	pods[2].Annotations = map[string]string{workload.HAMiAllocatedAnnotation: "GPU-b,NVIDIA,20000,30:;"}
	h := newEngineHarness(t, objs, metrics.DCGM{})
	n := 48 * 120
	addDCGM(t, h.prom, pods[0], "GPU-a", h.now, n, 20000, 0.6)
	addAgent(t, h.prom, pods[0], "GPU-a", h.now, n, 19000, 0.55) // agrees with dcgm-exporter
	addDCGM(t, h.prom, pods[1], "GPU-a", h.now, n, 0, 0)         // the other GPU's zeros
	addAgent(t, h.prom, pods[1], "GPU-b", h.now, n, 20000, 0.5)  // where its processes run
	addDCGM(t, h.prom, pods[2], "GPU-a", h.now, n, 0, 0)         // HAMi allocated GPU-b
	before := dropped(metrics.SignalMemory, metrics.DropWrongDevice) + dropped(metrics.SignalCompute, metrics.DropWrongDevice)
	h.runCycles(t, 1, nil)

	rec := func(name string) gpufracv1.GPUFractionRecommendationStatus { return h.gfr(t, "ml", name).Status }
	right := rec("right")
	if len(right.ContainerRecommendations) != 1 || right.ContainerRecommendations[0].ComputeSource != metrics.DCGMSMActive {
		t.Fatalf("right: %+v, want a recommendation from %s", right, metrics.DCGMSMActive)
	}
	if c := condition(right, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("right: MetricsUnavailable %+v, want False", c)
	}

	relabelled := rec("relabelled")
	if len(relabelled.ContainerRecommendations) != 1 {
		t.Fatalf("relabelled: no recommendation: %+v", relabelled.Conditions)
	}
	cr := relabelled.ContainerRecommendations[0]
	agentCompute := metrics.Agent.Fields(metrics.SignalCompute)[0].Metric
	if mib := cr.Target.Memory.AsApproximateFloat64() / (1 << 20); mib < 20000*1.15 || cr.ComputeSource != agentCompute || cr.Target.Compute.MilliValue() < 500 {
		t.Errorf("relabelled: target %s / %s from %q, want ≥ %.0fMi and ≥ 500m from the agent (%s), never the other GPU's zeros",
			cr.Target.Memory, cr.Target.Compute, cr.ComputeSource, 20000*1.15, agentCompute)
	}
	c := condition(relabelled, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != ReasonWrongDevice ||
		!strings.Contains(c.Message, "names GPU GPU-a") || !strings.Contains(c.Message, "saw the pod on GPU-b") || !strings.Contains(c.Message, "agent's own series were used") {
		t.Errorf("relabelled: want MetricsUnavailable=True %s naming GPU-a, GPU-b and the agent, got %+v", ReasonWrongDevice, c)
	}

	hami := rec("hami")
	if len(hami.ContainerRecommendations) != 0 {
		t.Errorf("hami: recommendation %+v from the other GPU's zeros", hami.ContainerRecommendations)
	}
	c = condition(hami, gpufracv1.ConditionMetricsUnavailable)
	if !isTrue(c) || c.Reason != ReasonWrongDevice || !strings.Contains(c.Message, workload.HAMiAllocatedAnnotation) {
		t.Errorf("hami: want MetricsUnavailable=True %s naming the annotation, got %+v", ReasonWrongDevice, c)
	}
	if c := condition(hami, gpufracv1.ConditionRecommendationProvided); !isFalse(c) {
		t.Errorf("hami: RecommendationProvided %+v, want False", c)
	}
	// Every sample of the two relabelled pods: memory peaks (47 whole hours and the
	// running one) and compute (one per minute over 48 h), of both pods.
	if d := dropped(metrics.SignalMemory, metrics.DropWrongDevice) + dropped(metrics.SignalCompute, metrics.DropWrongDevice) - before; d < 2*48*60 {
		t.Errorf("samples_dropped_total{wrong_device} += %v, want every sample of the two relabelled pods (≥ %d)", d, 2*48*60)
	}
}

// A pod of a workload of two whose series name a GPU it is not on, with no agent to
// replace them (HAMi's allocation says GPU-b, dcgm-exporter labels it GPU-a): all its
// samples are set aside, and the workload's recommendation would be written from its
// sibling alone, so the updater would shrink a pod whose usage is unknown, as for a pod
// that never reports. The first cycles say WrongDevice (its message unchanged); after
// EmptyCyclesWhileRunning cycles MetricsUnavailable is NoSamplesWhileRunning naming the
// pod and why (the WrongDevice message), an IncompleteData reason, and the
// recommendation is kept. A pod whose series the agent replaced has samples: WrongDevice
// alone, cycle after cycle. Before, WrongDevice stayed (not IncompleteData) and the
// updater was free to shrink the set-aside pod.
func TestSetAsidePodIsAGap(t *testing.T) {
	objs := append(deployment("ml", "mixed", 2), gfa("ml", "mixed", "mixed"))
	objs = append(objs, singlePodWorkloads("ml", "relabelled")...)
	pods := podsOf(objs)
	pods[1].Annotations = map[string]string{workload.HAMiAllocatedAnnotation: "GPU-b,NVIDIA,20000,30:;"}
	h := newEngineHarness(t, objs, metrics.DCGM{})
	n := 48 * 120
	addDCGM(t, h.prom, pods[0], "GPU-c", h.now, n, 20000, 0.6)
	addDCGM(t, h.prom, pods[1], "GPU-a", h.now, n, 0, 0) // HAMi allocated GPU-b
	addDCGM(t, h.prom, pods[2], "GPU-a", h.now, n, 0, 0) // the agent saw it on GPU-d
	addAgent(t, h.prom, pods[2], "GPU-d", h.now, n, 20000, 0.5)
	write := func(now time.Time) {
		addDCGM(t, h.prom, pods[0], "GPU-c", now, 2, 20000, 0.6)
		addDCGM(t, h.prom, pods[1], "GPU-a", now, 2, 0, 0)
		addDCGM(t, h.prom, pods[2], "GPU-a", now, 2, 0, 0)
		addAgent(t, h.prom, pods[2], "GPU-d", now, 2, 20000, 0.5)
	}
	h.runCycles(t, 1, nil)
	want := h.gfr(t, "ml", "mixed").Status.ContainerRecommendations
	if len(want) != 1 {
		t.Fatalf("mixed: no recommendation from the pod on its own GPU: %+v", h.gfr(t, "ml", "mixed").Status.Conditions)
	}
	for i := 1; i <= EmptyCyclesWhileRunning+2; i++ {
		if i > 1 {
			h.now = h.now.Add(time.Minute)
			h.runCycles(t, 1, write)
		}
		st := h.gfr(t, "ml", "mixed").Status
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		held := contract.IncompleteData(h.gfr(t, "ml", "mixed"))
		switch {
		case i < EmptyCyclesWhileRunning:
			if !isTrue(c) || c.Reason != ReasonWrongDevice || !strings.Contains(c.Message, "names GPU GPU-a") || held != "" {
				t.Fatalf("mixed, cycle %d: MetricsUnavailable %+v, want WrongDevice naming GPU-a", i, c)
			}
		default:
			if !isTrue(c) || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, pods[1].Name) ||
				!strings.Contains(c.Message, "names GPU GPU-a") || !strings.Contains(c.Message, "while the workload's other pods report") || held == "" {
				t.Fatalf("mixed, cycle %d: MetricsUnavailable %+v, want NoSamplesWhileRunning naming %s and the GPU its series named", i, c, pods[1].Name)
			}
			if !equality.Semantic.DeepEqual(st.ContainerRecommendations, want) {
				t.Fatalf("mixed, cycle %d: recommendation changed: %+v, was %+v", i, st.ContainerRecommendations, want)
			}
		}
		r := h.gfr(t, "ml", "relabelled")
		if c := condition(r.Status, gpufracv1.ConditionMetricsUnavailable); !isTrue(c) || c.Reason != ReasonWrongDevice || contract.IncompleteData(r) != "" {
			t.Fatalf("relabelled, cycle %d: MetricsUnavailable %+v, want WrongDevice (the agent's series replace its own)", i, c)
		}
	}
}

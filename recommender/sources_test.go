package recommender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// memoryTargetOf returns the first container's memory target, bytes.
func memoryTargetOf(t testing.TB, st gpufracv1.GPUFractionRecommendationStatus) float64 {
	t.Helper()
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Memory == nil {
		t.Fatalf("no memory recommendation: %+v", st.Conditions)
	}
	return st.ContainerRecommendations[0].Target.Memory.AsApproximateFloat64()
}

// Kind 2 (issue 13): with --metric-source auto, the source is chosen per pod from what
// exists for it. One pod that the agent reports (and dcgm-exporter sees as its GPU's
// device-wide 30000 MiB) is read from the agent; a pod that only dcgm-exporter sees is
// read from dcgm, not left with NoSamples because an agent series exists elsewhere. Each
// recommendation records its sources.
func TestSourceChosenPerPod(t *testing.T) {
	objs := singlePodWorkloads("ml", "dc", "ag")
	h := newEngineHarness(t, objs, nil)
	pods := podsOf(objs)
	dc, ag := pods[0], pods[1]
	n := 48 * 120
	addDCGM(t, h.prom, dc, "GPU-1", h.now, n, 20000, 0.5)
	addDCGM(t, h.prom, ag, "GPU-2", h.now, n, 30000, 0.7)
	addAgent(t, h.prom, ag, "GPU-2", h.now, n, 10240, 0.3)
	h.runCycles(t, 2, nil)

	for _, tc := range []struct {
		name, sources, compute string
		mem                    float64
	}{
		{"dc", "[{dcgm 1}]", metrics.DCGMSMActive, 20000 * metrics.MiB},
		{"ag", "[{agent 1}]", "gpufrac_pod_gpu_sm_utilization_ratio", 10 * gib},
	} {
		st := h.gfr(t, "ml", tc.name).Status
		if m := memoryTargetOf(t, st); m < tc.mem*1.15 || m > tc.mem*1.15*1.06 {
			t.Errorf("%s: memory target %.0f MiB, want within a bucket above %.0f MiB×1.15", tc.name, m/metrics.MiB, tc.mem/metrics.MiB)
		}
		if got := fmt.Sprint(st.MetricSources); got != tc.sources {
			t.Errorf("%s: metricSources %s, want %s", tc.name, got, tc.sources)
		}
		if c := st.ContainerRecommendations[0].ComputeSource; c != tc.compute {
			t.Errorf("%s: computeSource %s, want %s", tc.name, c, tc.compute)
		}
		if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
			t.Errorf("%s: MetricsUnavailable %+v", tc.name, c)
		}
	}
}

// Kind 2 (issue 13): the choice does not depend on when the recommender restarts. A pod
// has 48 h of dcgm-exporter samples (30000 MiB, its GPU's device-wide value); the agent
// starts reporting it (10 GiB) two hours before now. A recommender that ran through the
// change and one that starts now choose the same: the agent from the time it first
// reported the pod, the dcgm history before; so both write the same memory target and
// record the agent. (The former global choice gave the first dcgm's 30000 MiB and the
// second the agent's 10 GiB from two hours of history.)
func TestSourceChoiceStableAcrossRestarts(t *testing.T) {
	objs := singlePodWorkloads("ml", "sd")
	pod := podsOf(objs)[0]
	prom := promtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	addDCGM(t, prom, pod, "GPU-2", now, 48*120, 30000, 0.7)
	agentFrom := now.Add(-2 * time.Hour)
	addAgent(t, prom, pod, "GPU-2", now, 2*120+1, 10240, 0.3)
	cfg := Config{HistoryLength: 48 * time.Hour, Interval: 10 * time.Minute}

	running, rc := newEngineRecommender(t, objs, prom, cfg)
	at := agentFrom.Add(-time.Hour)
	running.Now = func() time.Time { return at }
	for ; !at.After(now); at = at.Add(cfg.Interval) {
		if err := running.RunOnce(context.Background()); err != nil {
			t.Fatalf("%s: %v", at, err)
		}
	}
	restarted, rc2 := newEngineRecommender(t, objs, prom, cfg)
	restarted.Now = func() time.Time { return now }
	if err := restarted.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := (&harness{c: rc}).gfr(t, "ml", "sd").Status
	b := (&harness{c: rc2}).gfr(t, "ml", "sd").Status
	ma, mb := memoryTargetOf(t, a), memoryTargetOf(t, b)
	if ma < 30000*metrics.MiB || mb < 30000*metrics.MiB || ma/mb > 1.02 || mb/ma > 1.02 {
		t.Errorf("memory target %.0f MiB running, %.0f MiB after a restart: want the same, from the dcgm history (30000 MiB peaks before the agent)", ma/metrics.MiB, mb/metrics.MiB)
	}
	for name, st := range map[string]gpufracv1.GPUFractionRecommendationStatus{"running": a, "restarted": b} {
		if got := fmt.Sprint(st.MetricSources); got != "[{agent 1}]" {
			t.Errorf("%s: metricSources %s, want the agent", name, got)
		}
		if c := st.ContainerRecommendations[0].ComputeSource; c != "gpufrac_pod_gpu_sm_utilization_ratio" {
			t.Errorf("%s: computeSource %s, want the agent's", name, c)
		}
	}
}

// Kind 2 (issue 13): every GPU series stops (an exporter restart) while the recommender
// runs with --metric-source auto: no cycle fails, the written targets stay, the gap is
// named after EmptyCyclesWhileRunning cycles, and a rollback floor the updater raises
// during the gap reaches the recommendation (it used to freeze with the failed cycles).
func TestLiveGapNeverFailsTheCycle(t *testing.T) {
	objs := singlePodWorkloads("ml", "sd")
	h := newEngineHarness(t, objs, nil)
	addDCGM(t, h.prom, podsOf(objs)[0], "GPU-1", h.now, 48*120, 20000, 0.5)
	h.runCycles(t, 1, nil)
	want := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0]
	floor := resource.MustParse("30000Mi")
	raised := EmptyCyclesWhileRunning + 1 // the floor comes while the gap is named
	for i := 1; i <= raised+1; i++ {
		if i == raised {
			var g gpufracv1.GPUFractionAutoscaler
			if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: "ml", Name: "sd"}, &g); err != nil {
				t.Fatal(err)
			}
			g.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{Until: metav1.NewTime(h.now.Add(24 * time.Hour)), Reason: "test",
				Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: &floor}}}}
			if err := h.c.Status().Update(context.Background(), &g); err != nil {
				t.Fatal(err)
			}
		}
		h.now = h.now.Add(time.Minute)
		h.runCycles(t, 1, nil) // fails the test on a cycle error
		st := h.gfr(t, "ml", "sd").Status
		got := st.ContainerRecommendations[0]
		if i < raised && (got.Target.Memory.Cmp(*want.Target.Memory) != 0 || got.Target.Compute.Cmp(*want.Target.Compute) != 0) {
			t.Fatalf("cycle %d: targets changed without samples", i)
		}
		if i >= raised && (got.Target.Memory.Cmp(floor) != 0 || got.Target.Compute.Cmp(*want.Target.Compute) != 0) {
			t.Errorf("cycle %d: targets %v/%v, want the rollback floor %v and the kept compute %v", i, got.Target.Memory, got.Target.Compute, &floor, want.Target.Compute)
		}
		c := condition(st, gpufracv1.ConditionMetricsUnavailable)
		if i >= EmptyCyclesWhileRunning && (c == nil || c.Reason != gpufracv1.ReasonNoSamplesWhileRunning || !strings.Contains(c.Message, "dcgm")) {
			t.Fatalf("cycle %d: want NoSamplesWhileRunning naming dcgm, got %+v", i, c)
		}
	}
}

// Kinds 2 and 10 (issue 13) together: with --metric-source auto, a pod that
// dcgm-exporter labels with the other GPU (its zeros) and that the agent sees on its own
// GPU is read from the agent, and the wrong series is still named (WrongDevice).
func TestWrongDeviceWithEverySourceRead(t *testing.T) {
	objs := singlePodWorkloads("ml", "relabelled")
	h := newEngineHarness(t, objs, nil)
	p := podsOf(objs)[0]
	n := 48 * 120
	addDCGM(t, h.prom, p, "GPU-a", h.now, n, 0, 0)
	addAgent(t, h.prom, p, "GPU-b", h.now, n, 20000, 0.5)
	h.runCycles(t, 1, nil)
	st := h.gfr(t, "ml", "relabelled").Status
	if m := memoryTargetOf(t, st); m < 20000*1.15*metrics.MiB {
		t.Errorf("memory target %.0f MiB, want at least 20000×1.15 from the agent", m/metrics.MiB)
	}
	if got := fmt.Sprint(st.MetricSources); got != "[{agent 1}]" {
		t.Errorf("metricSources %s, want the agent", got)
	}
	c := condition(st, gpufracv1.ConditionMetricsUnavailable)
	if c == nil || c.Reason != ReasonWrongDevice || !strings.Contains(c.Message, "names GPU GPU-a") || !strings.Contains(c.Message, "saw the pod on GPU-b") {
		t.Errorf("MetricsUnavailable %+v, want WrongDevice naming GPU-a and GPU-b", c)
	}
}

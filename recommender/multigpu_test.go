package recommender

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 15 (issue 13): a pod using two GPUs (FB_USED 40000 and 20000 MiB) gets no
// one-GPU fraction: RecommendationProvided=False (MultipleGPUs), which the webhook and
// the updater respect. A MIG instance without DCGM_FI_DEV_FB_USED gets no
// RecommendationProvided=True without memory (NoMemorySamples). Samples of series with
// no pod label are counted under missing_labels, each once.
func TestMultiGPUAndMissingMemory(t *testing.T) {
	objs := singlePodWorkloads("ml", "multi", "mig")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	n := 48 * 120
	addDCGM(t, h.prom, pods[0], "GPU-a", h.now, n, 40000, 0.5)
	addDCGM(t, h.prom, pods[0], "GPU-b", h.now, n, 20000, 0.5)
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	mig := dcgmLabels(metrics.DCGMSMActive, pods[1], "GPU-c")
	mig[metrics.MIGInstanceLabel], mig["GPU_I_PROFILE"] = "3", "1g.10gb"
	h.prom.Add(t, mig, start, 30*time.Second, promtest.Repeat(0.4, n)...)
	// A GPU with no pod bound: dcgm-exporter leaves namespace, pod, container out.
	h.prom.Add(t, map[string]string{"__name__": metrics.DCGMFBUsed, "UUID": "GPU-idle", "gpu": "3", "Hostname": "node-1"}, start, 30*time.Second, promtest.Repeat(400, n)...)
	before := dropped(metrics.SignalMemory, metrics.DropNoLabels)
	h.runCycles(t, 1, nil)

	st := h.gfr(t, "ml", "multi").Status
	c := condition(st, gpufracv1.ConditionRecommendationProvided)
	if !isFalse(c) || c.Reason != ReasonMultipleGPUs || !strings.Contains(c.Message, "2 GPUs") {
		t.Errorf("multi-GPU: want RecommendationProvided=False %s (2 GPUs), got %+v", ReasonMultipleGPUs, c)
	}
	for _, cr := range st.ContainerRecommendations {
		t.Errorf("multi-GPU: one-GPU fraction written: %s %v", cr.ContainerName, cr.Target.Memory)
	}

	st = h.gfr(t, "ml", "mig").Status
	c = condition(st, gpufracv1.ConditionRecommendationProvided)
	if !isFalse(c) || c.Reason != ReasonNoMemorySamples {
		t.Errorf("MIG without FB_USED: want RecommendationProvided=False %s, got %+v", ReasonNoMemorySamples, c)
	}
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Compute == nil {
		t.Errorf("MIG without FB_USED: compute still shown for explain: %+v", st.ContainerRecommendations)
	}

	// A history load counts its last hour: 120 samples at 30 s, once.
	if d := dropped(metrics.SignalMemory, metrics.DropNoLabels) - before; d != 120 {
		t.Errorf("samples_dropped_total{memory,missing_labels} += %v, want 120", d)
	}
	// Each live cycle counts its own minute: 2 samples, not the hour again (the first
	// of these cycles runs at the same time as the history load: nothing new).
	before = dropped(metrics.SignalMemory, metrics.DropNoLabels)
	h.runCycles(t, 3, func(now time.Time) {
		h.prom.Add(t, map[string]string{"__name__": metrics.DCGMFBUsed, "UUID": "GPU-idle", "gpu": "3", "Hostname": "node-1"}, now.Add(-30*time.Second), 30*time.Second, 400, 400)
	})
	if d := dropped(metrics.SignalMemory, metrics.DropNoLabels) - before; d != 4 {
		t.Errorf("two live cycles: missing_labels += %v, want 4", d)
	}
}

// A workload whose pod used two GPUs and then one keeps MultipleGPUs only while the
// multi-GPU samples are within the history window (HistoryLength, 3 h here), as a
// recommender restarted then would: once the last of them is older, the evidence no
// longer shows several GPUs and the recommendation is provided. The pod on two GPUs
// for the first hour is replaced by one on one GPU (the old pod gone).
func TestMultipleGPUsClearsWhenEvidenceAgesOut(t *testing.T) {
	objs := singlePodWorkloads("ml", "multi")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	h.rec.Config.HistoryLength = 3 * time.Hour
	old := podsOf(objs)[0]
	n := 120 // an hour at 30 s, ending now, on two GPUs
	addDCGM(t, h.prom, old, "GPU-a", h.now, n, 30000, 0.5)
	addDCGM(t, h.prom, old, "GPU-b", h.now, n, 20000, 0.5)
	h.runCycles(t, 1, nil)
	reason := func() string {
		c := condition(h.gfr(t, "ml", "multi").Status, gpufracv1.ConditionRecommendationProvided)
		if c == nil {
			return ""
		}
		return c.Reason + " " + string(c.Status)
	}
	if got := reason(); got != ReasonMultipleGPUs+" False" {
		t.Fatalf("on two GPUs: RecommendationProvided %q, want %s False", got, ReasonMultipleGPUs)
	}
	// The replacement runs on one GPU; hourly cycles.
	multiEnd := h.now
	pod := &corev1.Pod{}
	if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(old), pod); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	repl := old.DeepCopy()
	repl.Name, repl.ResourceVersion, repl.CreationTimestamp = old.Name+"-2", "", metav1.NewTime(h.now)
	if err := h.c.Create(context.Background(), repl); err != nil {
		t.Fatal(err)
	}
	for hour := 1; hour <= 4; hour++ {
		h.now = h.now.Add(time.Hour)
		addDCGM(t, h.prom, repl, "GPU-c", h.now, n, 25000, 0.4)
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		within := !h.now.Add(-h.rec.Config.HistoryLength).After(multiEnd)
		got := reason()
		if within && got != ReasonMultipleGPUs+" False" {
			t.Errorf("%d h after the last sample on two GPUs (within the %v history): RecommendationProvided %q, want %s False", hour, h.rec.Config.HistoryLength, got, ReasonMultipleGPUs)
		}
		if !within && strings.HasPrefix(got, ReasonMultipleGPUs) {
			t.Errorf("%d h after the last sample on two GPUs (beyond the %v history): still %q", hour, h.rec.Config.HistoryLength, got)
		}
	}
	if st := h.gfr(t, "ml", "multi").Status; len(st.ContainerRecommendations) != 1 || !isTrue(condition(st, gpufracv1.ConditionRecommendationProvided)) {
		t.Errorf("after the multi-GPU samples aged out: %+v", st.Conditions)
	}
}

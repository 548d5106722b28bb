package recommender

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// A pod of the workload that completed (here evicted: phase Failed, kept until the
// terminated-pod garbage collection or a user deletes it) whose name dcgm-exporter
// keeps on its GPU: the kubelet's pod-resources API lists a terminal pod that still
// exists with the devices it had (kubernetes/kubernetes#119423), and the GPU went to
// another workload's pod using 70000 MiB after two hours idle (zeros under the pod's
// name). Once the completed pod is deleted (no longer
// live, so StampInLife no longer bounds it), what came under its name after its
// completion (kube_pod_completion_time, by uid) is no pod's usage of the workload: it is
// dropped as outside the pod's life. Before, the 24 h of the other tenant's 70000 MiB
// were the workload's and its memory target rose from its own 20000 MiB to over 70000.
func TestCompletedPodNameOnAnotherTenantsGPU(t *testing.T) {
	objs := singlePodWorkloads("ml", "llm")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	live := podsOf(objs)[0]
	ended := live.DeepCopy()
	ended.Name = "gpu-worker-0" // a name kube-state-metrics attributes
	created, completed, deleted := h.now.Add(-30*time.Hour), h.now.Add(-26*time.Hour), h.now.Add(-2*time.Hour)
	step := 30 * time.Second
	own := int(completed.Sub(created) / step)
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, ended, "GPU-2"), created, step, promtest.Repeat(20000, own)...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, ended, "GPU-2"), created, step, promtest.Repeat(0.5, own)...)
	// The idle GPU for two hours, then the next tenant, under the completed pod's name.
	// (A tenant within the hour of the completion is still counted where the history
	// is read in hourly windows: the window that holds the completion is kept, stamped
	// at it, as StampInLife keeps a finished container's last peak.)
	idle, tenant := completed.Add(step), completed.Add(2*time.Hour)
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, ended, "GPU-2"), idle, step, promtest.Repeat(0, int(tenant.Sub(idle)/step))...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, ended, "GPU-2"), idle, step, promtest.Repeat(0, int(tenant.Sub(idle)/step))...)
	other := int(deleted.Sub(tenant) / step)
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, ended, "GPU-2"), tenant, step, promtest.Repeat(70000, other)...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, ended, "GPU-2"), tenant, step, promtest.Repeat(0.9, other)...)
	addDCGM(t, h.prom, live, "GPU-1", h.now, 48*120, 5000, 0.5)
	ksm := func(name string, extra map[string]string) map[string]string {
		out := map[string]string{"__name__": name, "namespace": "ml", "job": "kube-state-metrics"}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	pod := map[string]string{"pod": ended.Name, "uid": "u-1"}
	minutes := int(deleted.Sub(created) / time.Minute)
	h.prom.Add(t, ksm(ksmPodOwner, map[string]string{"pod": ended.Name, "uid": "u-1", "owner_kind": "ReplicaSet", "owner_name": "llm-7d9f8b6c5", "owner_is_controller": "true"}),
		created, time.Minute, promtest.Repeat(1, minutes)...)
	h.prom.Add(t, ksm(ksmReplicaSetOwner, map[string]string{"replicaset": "llm-7d9f8b6c5", "owner_kind": "Deployment", "owner_name": "llm", "owner_is_controller": "true"}),
		created, time.Minute, promtest.Repeat(1, int(h.now.Sub(created)/time.Minute))...)
	h.prom.Add(t, ksm(ksmPodCreated, pod), created, time.Minute, promtest.Repeat(float64(created.Unix()), minutes)...)
	h.prom.Add(t, ksm(ksmPodCompletion, pod), completed, time.Minute, promtest.Repeat(float64(completed.Unix()), int(deleted.Sub(completed)/time.Minute))...)

	before := dropped(metrics.SignalMemory, metrics.DropOutsidePodLife)
	h.runCycles(t, 1, nil)
	st := h.gfr(t, "ml", "llm").Status
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Memory == nil {
		t.Fatalf("recommendations %+v, conditions %+v", st.ContainerRecommendations, st.Conditions)
	}
	got := st.ContainerRecommendations[0].Target.Memory
	if low := resource.MustParse("19000Mi"); got.Cmp(low) < 0 {
		t.Errorf("memory target %v, want at least %v: the completed pod's own 20000 MiB left out", got, &low)
	}
	if high := resource.MustParse("30000Mi"); got.Cmp(high) > 0 {
		t.Errorf("memory target %v, want at most %v: another tenant's 70000 MiB under the completed pod's name counted", got, &high)
	}
	if d := dropped(metrics.SignalMemory, metrics.DropOutsidePodLife) - before; d == 0 {
		t.Errorf("no memory sample dropped as outside the pod's life")
	}
}

package recommender

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// A Deployment's GPU container renamed by a rollout (main -> server): once no pod of
// the workload has the old container, its recommendation is gone. Before, the old
// name's history kept a container recommendation for a container no pod has (for as
// long as the process ran, and in every checkpoint), and status.memory, the pod total
// that the sharing planner and gpufrac report count pods with, added the old
// container's 20000 MiB to the new one's 6000 MiB.
func TestRenamedContainerDropsTheOldName(t *testing.T) {
	objs := deployment("ml", "llm", 1)
	objs = append(objs, gfa("ml", "llm", "llm"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	old := podsOf(objs)[0]
	old.CreationTimestamp = metav1.NewTime(h.now.Add(-30 * time.Hour))
	if err := h.c.Update(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	addDCGM(t, h.prom, old, "GPU-1", h.now, 29*120, 20000, 0.3)
	h.runCycles(t, 1, nil)
	if st := h.gfr(t, "ml", "llm").Status; len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].ContainerName != "main" {
		t.Fatalf("before the rollout: %+v", st.ContainerRecommendations)
	}

	// The rollout: the old pod goes, a new one of the new template comes.
	if err := h.c.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	cur := old.DeepCopy()
	cur.ResourceVersion, cur.Name = "", "llm-7d9f8b6c5-x-new01"
	cur.CreationTimestamp = metav1.NewTime(h.now)
	cur.Spec.Containers = []corev1.Container{{Name: "server"}}
	create(t, h.c, cur)
	lbl := func(metric string) map[string]string {
		l := dcgmLabels(metric, cur, "GPU-2")
		l["container"] = "server"
		return l
	}
	h.runCycles(t, 40, func(now time.Time) {
		h.prom.Add(t, lbl(metrics.DCGMFBUsed), now.Add(-30*time.Second), 30*time.Second, promtest.Repeat(6000, 2)...)
		h.prom.Add(t, lbl(metrics.DCGMSMActive), now.Add(-30*time.Second), 30*time.Second, promtest.Repeat(0.3, 2)...)
	})

	st := h.gfr(t, "ml", "llm").Status
	for _, c := range st.ContainerRecommendations {
		if c.ContainerName == "main" {
			t.Errorf("a recommendation for container main, which no pod of the workload has since the rollout: %+v", c.Target)
		}
	}
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].ContainerName != "server" {
		t.Fatalf("recommendations %+v, want server's alone", st.ContainerRecommendations)
	}
	if want := st.ContainerRecommendations[0].Target.Memory; st.Memory == nil || want == nil || st.Memory.Cmp(*want) != 0 {
		t.Errorf("status.memory %v, want server's target %v: the old container's 20000 MiB counted in the pod's total", st.Memory, want)
	}
}

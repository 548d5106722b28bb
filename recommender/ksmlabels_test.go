package recommender

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// kube-state-metrics scraped without honor_labels (a ServiceMonitor without honorLabels:
// its namespace and pod are the target's, kube-state-metrics' own are exported_*; or a
// job that sets namespace only), and a pod of the workload that has ended and whose name
// follows no naming convention: the ownership series still attribute its history to the
// workload under --label-mode auto, as with honor_labels. Before, the ownership queries
// read only namespace/pod, found nothing, and the ended pod's 30000 MiB were left out of
// the workload's memory target. The owners are read from the series index; where the
// backend refuses that request, from the query (the same forms).
func TestOwnershipReadsExportedLabels(t *testing.T) {
	target := map[string]string{"container": "kube-state-metrics", "job": "kube-state-metrics", "instance": "10.0.0.9:8080", "owner_is_controller": "true"}
	for _, tc := range []struct {
		name    string
		pod, rs map[string]string // kube_pod_owner's and kube_replicaset_owner's workload labels
	}{
		// A ServiceMonitor without honorLabels: the target sets namespace and pod.
		{"namespace and pod exported",
			map[string]string{"exported_namespace": "ml", "exported_pod": "gpu-worker-0", "namespace": "monitoring", "pod": "kube-state-metrics-6f7d9-abcde"},
			map[string]string{"exported_namespace": "ml", "replicaset": "llm-7d9f8b6c5", "namespace": "monitoring", "pod": "kube-state-metrics-6f7d9-abcde"}},
		// Prometheus' example kubernetes-service-endpoints job: it sets namespace only.
		{"namespace exported",
			map[string]string{"exported_namespace": "ml", "pod": "gpu-worker-0", "namespace": "monitoring"},
			map[string]string{"exported_namespace": "ml", "replicaset": "llm-7d9f8b6c5", "namespace": "monitoring"}},
		{"honor_labels",
			map[string]string{"namespace": "ml", "pod": "gpu-worker-0"},
			map[string]string{"namespace": "ml", "replicaset": "llm-7d9f8b6c5"}},
	} {
		for _, refused := range []bool{false, true} {
			name := tc.name
			if refused {
				name += ", series index refused"
			}
			t.Run(name, func(t *testing.T) {
				testOwnershipReadsExportedLabels(t, target, tc.pod, tc.rs, refused)
			})
		}
	}
}

func testOwnershipReadsExportedLabels(t *testing.T, target, pod, rs map[string]string, refused bool) {
	objs := singlePodWorkloads("ml", "llm")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	if refused {
		h.prom.SetFailureIf(func(q string) bool {
			return strings.HasPrefix(q, promtest.SeriesPrefix) && strings.Contains(q, "_owner")
		}, errors.New("the query hit a limit of 30000 series"))
	}
	live := podsOf(objs)[0]
	ended := live.DeepCopy()
	ended.Name = "gpu-worker-0" // e.g. a pod renamed by a controller: no naming convention
	start, end := h.now.Add(-30*time.Hour), h.now.Add(-2*time.Hour)
	n := int(end.Sub(start) / (30 * time.Second))
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, ended, "GPU-2"), start, 30*time.Second, promtest.Repeat(30000, n)...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, ended, "GPU-2"), start, 30*time.Second, promtest.Repeat(0.5, n)...)
	addDCGM(t, h.prom, live, "GPU-1", h.now, 48*120, 5000, 0.5)
	with := func(extra ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range append([]map[string]string{target}, extra...) {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	h.prom.Add(t, with(pod, map[string]string{"__name__": ksmPodOwner, "uid": "u-1", "owner_kind": "ReplicaSet", "owner_name": "llm-7d9f8b6c5"}),
		start, time.Minute, promtest.Repeat(1, int(end.Sub(start)/time.Minute))...)
	h.prom.Add(t, with(rs, map[string]string{"__name__": ksmReplicaSetOwner, "owner_kind": "Deployment", "owner_name": "llm"}),
		start, time.Minute, promtest.Repeat(1, int(h.now.Sub(start)/time.Minute))...)
	h.runCycles(t, 1, nil)
	st := h.gfr(t, "ml", "llm").Status
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Memory == nil {
		t.Fatalf("recommendations %+v, conditions %+v", st.ContainerRecommendations, st.Conditions)
	}
	if got, want := st.ContainerRecommendations[0].Target.Memory, resource.MustParse("29000Mi"); got.Cmp(want) < 0 {
		t.Errorf("memory target %v, want at least %v: the ended pod's 30000 MiB left out", got, &want)
	}
	if asked := countQueries(h.prom, "max_over_time(kube_pod_owner"); refused == (asked == 0) {
		t.Errorf("%d kube_pod_owner queries with the series index refused=%v: want them only where it was", asked, refused)
	}
}

package recommender

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func applied(t *testing.T, mem, compute string) string {
	t.Helper()
	c := gpufracv1.AppliedContainer{Name: "main"}
	if mem != "" {
		c.WrittenMemory = ptrQuantity(mem)
	}
	if compute != "" {
		c.WrittenCompute = ptrQuantity(compute)
	}
	b, err := json.Marshal(gpufracv1.AppliedRecord{Backend: gpufracv1.BackendAnnotations, Autoscaler: "sd", Containers: []gpufracv1.AppliedContainer{c}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptrQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// The before and after of GPUs held: one pod written at 20Gi of an 80Gi GPU (a quarter),
// one pod gpufrac has not written (a whole GPU): 2 held at one per pod, 1.25 allocated.
func TestGPUsAllocatedBeforeAfter(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	objs[2].(*corev1.Pod).Annotations = map[string]string{gpufracv1.AnnotationApplied: applied(t, "20Gi", "")}
	prom := promFor(objs, 15*gib, 0.2)
	h := newHarness(t, objs, prom)
	h.rec.Config.Policy.GPUMemoryBytes = 80 * gib
	if err := h.rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := WithAutoscalers(prometheus.NewPedanticRegistry())
	want := "# HELP gpufrac_autoscaler_gpus_allocated " + families[descAllocated].dto.GetHelp() + `
# TYPE gpufrac_autoscaler_gpus_allocated gauge
gpufrac_autoscaler_gpus_allocated{autoscaler="sd",namespace="ml"} 1.25
# HELP gpufrac_recommender_gpu_memory_bytes Memory of one GPU the recommender sizes against (--gpu-memory), bytes.
# TYPE gpufrac_recommender_gpu_memory_bytes gauge
gpufrac_recommender_gpu_memory_bytes 8.589934592e+10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpufrac_autoscaler_gpus_allocated", "gpufrac_recommender_gpu_memory_bytes"); err != nil {
		t.Error(err)
	}
	// The recent peak of both live pods: 2 × the container's observedPeakMemory.
	peak := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0].ObservedPeakMemory
	if peak == nil {
		t.Fatal("no observedPeakMemory")
	}
	if got, err := testutil.GatherAndCount(reg, "gpufrac_autoscaler_gpu_memory_peak_bytes"); err != nil || got != 1 {
		t.Fatalf("peak series: %d, %v", got, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "gpufrac_autoscaler_gpu_memory_peak_bytes" {
			if v, w := mf.Metric[0].GetGauge().GetValue(), 2*peak.AsApproximateFloat64(); v != w {
				t.Errorf("peak memory %v, want %v", v, w)
			}
		}
	}
}

func TestAllocatedShare(t *testing.T) {
	rec := func(cs ...gpufracv1.AppliedContainer) *gpufracv1.AppliedRecord {
		return &gpufracv1.AppliedRecord{Containers: cs}
	}
	c := func(mem, compute string) gpufracv1.AppliedContainer {
		out := gpufracv1.AppliedContainer{Name: "c"}
		if mem != "" {
			out.WrittenMemory = ptrQuantity(mem)
		}
		if compute != "" {
			out.WrittenCompute = ptrQuantity(compute)
		}
		return out
	}
	// requests adds the placement-only requests written ("": none).
	requests := func(x gpufracv1.AppliedContainer, mem, compute string) gpufracv1.AppliedContainer {
		if mem != "" {
			x.WrittenMemoryRequest = ptrQuantity(mem)
		}
		if compute != "" {
			x.WrittenComputeRequest = ptrQuantity(compute)
		}
		return x
	}
	gpu := float64(80 * gib)
	for _, tc := range []struct {
		name string
		rec  *gpufracv1.AppliedRecord
		gpu  float64
		want float64
	}{
		{"no record: whole GPU", nil, gpu, 1},
		{"nothing written: whole GPU", rec(gpufracv1.AppliedContainer{Name: "c"}), gpu, 1},
		{"memory share", rec(c("20Gi", "")), gpu, 0.25},
		{"compute larger than memory", rec(c("8Gi", "600m")), gpu, 0.6},
		{"containers summed", rec(c("20Gi", "100m"), c("20Gi", "100m")), gpu, 0.5},
		{"capped at one GPU", rec(c("100Gi", "")), gpu, 1},
		{"a memory request below the limit is what the pod holds", rec(requests(c("40Gi", ""), "20Gi", "")), gpu, 0.25},
		{"a time-sliced compute request above the memory share is what the pod holds", rec(requests(c("40Gi", ""), "20Gi", "600m")), gpu, 0.6},
		{"a compute request below the memory share changes nothing", rec(requests(c("40Gi", ""), "", "100m")), gpu, 0.5},
		{"unknown GPU size: whole GPU", rec(c("20Gi", "")), 0, 1},
	} {
		if got := AllocatedShare(tc.rec, tc.gpu); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

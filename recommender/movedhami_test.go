package recommender

import (
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// A StatefulSet replica replaced onto another GPU under HAMi: the current db-0's
// hami.io/vgpu-devices-allocated names GPU-2, where it runs; the earlier db-0 ran on
// GPU-1. The annotation is the current pod's allocation, not the earlier pod's: the
// earlier db-0's series on GPU-1 are the workload's history (as without the
// annotation, TestReplacedReplicaKeepsItsHistory), not series naming a GPU the pod was
// not on. Before, they were dropped as wrong_device: a recommender (re)started after
// the replacement read only the current pod's 4000 MiB, and MetricsUnavailable named
// a WrongDevice that was none. A series of the current pod on another GPU is still
// not used (TestWrongDeviceLabelsAreNotUsed).
func TestReplacedReplicaOnAnotherAllocatedGPUKeepsItsHistory(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	for _, ago := range []time.Duration{20 * time.Minute, time.Hour, 3 * time.Hour, 10 * time.Hour} {
		t.Run(ago.String(), func(t *testing.T) {
			created := now.Add(-ago)
			h, pod := replicaHarness(t, now, created)
			pod.Annotations = map[string]string{workload.HAMiAllocatedAnnotation: "GPU-2,NVIDIA,24000,30:;"}
			if err := h.c.Update(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			addDCGM(t, h.prom, pod, "GPU-1", created.Add(-time.Minute), 29*120, 20000, 0.3) // the earlier db-0
			addDCGM(t, h.prom, pod, "GPU-2", now, int(ago/(30*time.Second))-1, 4000, 0.3)   // the current db-0

			before := dropped(metrics.SignalMemory, metrics.DropWrongDevice) + dropped(metrics.SignalCompute, metrics.DropWrongDevice)
			h.runCycles(t, 1, nil)

			if d := dropped(metrics.SignalMemory, metrics.DropWrongDevice) + dropped(metrics.SignalCompute, metrics.DropWrongDevice) - before; d != 0 {
				t.Errorf("%v samples of the earlier db-0 dropped as on a wrong device", d)
			}
			st := h.gfr(t, "ml", "db").Status
			memoryTargetCovers(t, st, 20000, "what the replica used for 29 h before it was replaced")
			if c := condition(st, gpufracv1.ConditionMetricsUnavailable); c != nil && c.Reason == ReasonWrongDevice {
				t.Errorf("MetricsUnavailable %+v: the earlier db-0's GPU is no wrong device", c)
			}
		})
	}
}

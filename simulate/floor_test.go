package simulate

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/trace"
)

// TestRollbackFloorAfterOutOfMemory: pods a and b of one workload are written the
// recommendation's 10 GiB, which stays 10 GiB; a uses 11 GiB from minute 20, over its
// limit: an out-of-memory exit. The updater raises the workload's rollback floor to
// max(used + 100Mi, used × 1.2) of a's 10 GiB (updater.RaiseOOMFloor), holds the
// workload's replacements for the cycle it publishes it in, then replaces every pod
// below it urgently (a, then b: one a cycle, the disruption budget), and the webhook
// writes max(target, floor) into the replacements and into c, created at minute 40.
// Before, the simulator kept no floor: a's growth to a target no larger than what it
// held replaced nothing, so a ran over its limit to the end of the trace, and b and c
// stayed at 10 GiB.
func TestRollbackFloorAfterOutOfMemory(t *testing.T) {
	mem := append(repeat(8, 20), repeat(11, 40)...)
	tr := trace.Trace{Pods: []trace.Pod{
		pod("w", 0, mem, repeat(0.2, 60)),
		pod("w", 0, repeat(8, 60), repeat(0.2, 60)),
		pod("w", 40, repeat(8, 20), repeat(0.2, 20)),
	}}
	for n := range tr.Pods {
		tr.Pods[n].Pod = fmt.Sprintf("w-abc-%c", 'a'+n)
	}
	o := gpufracOptions()
	o.Updater.ReplacementsPerMinute = -1
	res := runStub(t, tr, o, func(int, int) decision { return memDecision(10, 5, 40) })
	var got []string
	for i, ch := range res.detail.changes[0] {
		for _, c := range ch {
			got = append(got, fmt.Sprintf("%s@%d:%dGi", res.detail.runs[i].name, c.step, c.limit/gib))
		}
	}
	want := "[ns/w-abc-a@0:10Gi ns/w-abc-a@22:12Gi ns/w-abc-b@0:10Gi ns/w-abc-b@23:12Gi ns/w-abc-c@40:12Gi]"
	if fmt.Sprint(got) != want {
		t.Errorf("allocations (pod@step:limit) %v, want %s", got, want)
	}
	if g := res.Policies[0]; g.PodLimitOverrunMinutes != 2 || g.Replacements != 2 {
		t.Errorf("pod-minutes over the limit %v, replacements %d; want 2 (minutes 20 and 21, until the replacement), 2", g.PodLimitOverrunMinutes, g.Replacements)
	}
}

// TestFlooredYoungShare: a young workload written at its share (20 GiB, above its 8
// GiB need) under a rollback floor of 12 GiB, between the two, is written as the webhook
// writes it (contract.WrittenOf): the share stays, and no observed-peak request, since
// the floor is above the recommendation's need and the request must hold it. Before,
// the simulator compared the floor with the share, found it lower, and packed the pod by
// its observed peak (7.5 GiB) where the webhook writes none.
func TestFlooredYoungShare(t *testing.T) {
	q := func(g int64) *resource.Quantity { return resource.NewQuantity(g*gib, resource.BinarySI) }
	rec := &gpufracv1.ContainerRecommendation{ContainerName: "main", ConfidencePercent: 100, YoungMarginPercent: 25,
		Target: gpufracv1.GPUResources{Memory: q(8)}, LowerBound: gpufracv1.GPUResources{Memory: q(6)},
		UpperBound: gpufracv1.GPUResources{Memory: q(20)}, MemoryLimit: q(20), ObservedPeakMemory: q(6)}
	dec := recDecision(&gpufracv1.GPUFractionAutoscalerSpec{}, rec, 0.5, 24*time.Hour, 80*gib)
	if !dec.ok || !dec.target.YoungShare || dec.target.RequestPeakMemory <= 0 {
		t.Fatalf("fixture: decision %+v, want a young share with an observed-peak request", dec)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ps := &polState{floors: []*gpufracv1.UpdaterFloor{{Until: metav1.NewTime(now.Add(time.Hour)),
		Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q(12)}}}}}
	got := ps.floored(0, "main", dec, now, 80*gib)
	if got.want.MemoryBytes != 20*gib {
		t.Errorf("memory written %d GiB, want the young share 20 GiB", got.want.MemoryBytes/gib)
	}
	if got.target.RequestPeakMemory > 0 {
		t.Errorf("observed-peak request %d MiB under a floor above the need, want none", got.target.RequestPeakMemory>>20)
	}
	// Below the need the floor changes nothing.
	ps.floors[0].Containers[0].Memory = q(7)
	if got := ps.floored(0, "main", dec, now, 80*gib); got.want.MemoryBytes != 20*gib || got.target.RequestPeakMemory != dec.target.RequestPeakMemory {
		t.Errorf("floor under the need: written %d GiB, request %d MiB; want the decision unchanged", got.want.MemoryBytes/gib, got.target.RequestPeakMemory>>20)
	}
}

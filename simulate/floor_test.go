package simulate

import (
	"fmt"
	"testing"

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

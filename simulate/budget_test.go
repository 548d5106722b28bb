package simulate

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/trace"
)

// TestDisruptionBudgetPerReplacement: the pods of one workload all need a change at
// minute 10 (10 → 20 GiB, inside the bounds). The updater asks the workload's
// disruption budget before each eviction (updater.Budget.Allow, Took): with
// minReplicas 2, two pods are replaced one a cycle (the second would leave one
// running); with minReplicas 1, four pods two a cycle (--max-in-flight 0.5), and with
// --max-in-flight 1 all four at once. Before, the simulator checked minReplicas once
// per cycle, before the cycle's replacements, and had no in-flight limit: every pod
// was replaced at minute 10.
func TestDisruptionBudgetPerReplacement(t *testing.T) {
	for _, tc := range []struct {
		pods, minReplicas int
		maxInFlight       float64
		want              []int // replacements per step from step 11
	}{
		{pods: 2, minReplicas: 2, want: []int{1, 1}},
		{pods: 4, minReplicas: 1, want: []int{2, 2}},
		{pods: 4, minReplicas: 1, maxInFlight: 1, want: []int{4, 0}},
	} {
		t.Run(fmt.Sprintf("%d pods, minReplicas %d, max in flight %v", tc.pods, tc.minReplicas, tc.maxInFlight), func(t *testing.T) {
			var tr trace.Trace
			for n := range tc.pods {
				p := pod("w", 0, repeat(5, 40), repeat(0.2, 40))
				p.Pod = fmt.Sprintf("w-abc-%d", n)
				tr.Pods = append(tr.Pods, p)
			}
			o := gpufracOptions()
			o.Updater.MinLifetime, o.Updater.ReplacementsPerMinute = -1, -1
			o.Updater.MinReplicas, o.Updater.MaxInFlight = tc.minReplicas, tc.maxInFlight
			res := runStub(t, tr, o, growsAtTen)
			if got := replacementsFrom(res, 11, len(tc.want)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("replacements per step from step 11: %v, want %v", got, tc.want)
			}
		})
	}
}

// growsAtTen is a stub decision whose memory target doubles (10 → 20 GiB, bounds 5–40
// GiB) at step 10.
func growsAtTen(k, _ int) decision {
	if k < 10 {
		return memDecision(10, 5, 40)
	}
	return memDecision(20, 5, 40)
}

// replacementsFrom counts the replacements of the first policy's pods in each of the n
// steps from step from on.
func replacementsFrom(res *Result, from, n int) []int {
	got := make([]int, n)
	for _, ch := range res.detail.changes[0] {
		for _, c := range ch[1:] {
			if j := c.step - from; j >= 0 && j < n {
				got[j]++
			}
		}
	}
	return got
}

package simulate

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/trace"
)

// TestReplacementOrder: with one replacement a minute, pods that need a change at the
// same cycle are replaced in the updater's order (updater.ReplacesBefore over autoscaler
// order, each workload's pods oldest first), whatever the size of their change. At
// minute 10 the target of workload a moves 10 → 12 GiB and that of b 10 → 20 GiB; the
// updater replaces a's pod first (its autoscaler is listed first), then b's. Of
// workload c's two pods, listed younger first in the trace, the older (started at
// minute 0) goes first. Before, the simulator replaced the largest relative change
// first, then in trace order: b's pod before a's, and c's younger pod first.
func TestReplacementOrder(t *testing.T) {
	young := pod("c", 3, repeat(5, 40), repeat(0.2, 40))
	young.Pod = "c-abc-young"
	old := pod("c", 0, repeat(5, 43), repeat(0.2, 43))
	old.Pod = "c-abc-old"
	tr := trace.Trace{Pods: []trace.Pod{
		pod("b", 0, repeat(5, 40), repeat(0.2, 40)),
		pod("a", 0, repeat(5, 40), repeat(0.2, 40)),
		young, old,
	}}
	o := gpufracOptions()
	o.Updater.MinLifetime, o.Updater.ReplacementsPerMinute = -1, 1
	res := runStub(t, tr, o, func(k, wc int) decision {
		if k < 10 {
			return memDecision(10, 5, 40)
		}
		switch wc {
		case 0: // b
			return memDecision(20, 5, 40)
		case 1: // a
			return memDecision(12, 5, 40)
		}
		return memDecision(14, 5, 40) // c
	})
	// The first replacement of each run, by step.
	at := map[string]int{}
	for i, ch := range res.detail.changes[0] {
		if len(ch) > 1 {
			at[res.detail.runs[i].name] = ch[1].step
		}
	}
	want := map[string]int{"ns/a-abc-x1": 11, "ns/b-abc-x1": 12, "ns/c-abc-old": 13, "ns/c-abc-young": 14}
	for name, step := range want {
		if at[name] != step {
			t.Errorf("replacements from step %v, want %v", at, want)
			break
		}
	}
}

// TestReplacementOrderServesLongestWaiting: with one replacement a minute, workload a
// (four pods, listed first) and workload b (one pod) need a change from minute 10. The
// updater replaces, among needs as urgent, the workload replaced longest ago first
// (updater.ReplacesBefore): a's oldest pod at minute 10, then b's (never replaced), then
// a's others. Before, the simulator replaced in autoscaler order alone: all four of a's
// pods before b's, b waiting behind a for as long as a needed replacements.
func TestReplacementOrderServesLongestWaiting(t *testing.T) {
	var pods []trace.Pod
	for i := range 4 {
		p := pod("a", i, repeat(5, 40), repeat(0.2, 40))
		p.Pod = fmt.Sprintf("a-abc-x%d", i)
		pods = append(pods, p)
	}
	pods = append(pods, pod("b", 0, repeat(5, 40), repeat(0.2, 40)))
	o := gpufracOptions()
	o.Updater.MinLifetime, o.Updater.ReplacementsPerMinute = -1, 1
	res := runStub(t, trace.Trace{Pods: pods}, o, func(k, wc int) decision {
		if k < 10 {
			return memDecision(10, 5, 40)
		}
		return memDecision(20, 5, 40)
	})
	at := map[string]int{}
	for i, ch := range res.detail.changes[0] {
		if len(ch) > 1 {
			at[res.detail.runs[i].name] = ch[1].step
		}
	}
	want := map[string]int{"ns/a-abc-x0": 11, "ns/b-abc-x1": 12, "ns/a-abc-x1": 13, "ns/a-abc-x2": 14, "ns/a-abc-x3": 15}
	for name, step := range want {
		if at[name] != step {
			t.Errorf("replacements from step %v, want %v", at, want)
			break
		}
	}
}

package simulate

import (
	"fmt"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/trace"
)

// TestMaxInFlightPerDevice: four pods of one workload (10 GiB each, one 80 GiB GPU)
// all need a change at minute 10 (10 → 20 GiB, inside the bounds) and the workload's
// budget lets all four go at once (--max-in-flight 1). Under kai-nvfractions the updater
// knows each pod's GPU (KAI's GPU group) and replaces at most
// --max-in-flight-per-device of one GPU's pods at once (updater.DeviceAllows in its
// deviceGate): one a cycle by default, two with 2, all four with no limit. The
// annotations backend does not say where a pod runs: all four at once. Before, the
// simulator replaced all four in one cycle under kai-nvfractions too.
func TestMaxInFlightPerDevice(t *testing.T) {
	for _, tc := range []struct {
		backend   gpufracv1.BackendType
		perDevice int
		want      []int // replacements per step from step 11
	}{
		{backend: gpufracv1.BackendKAINVFractions, want: []int{1, 1, 1, 1}},
		{backend: gpufracv1.BackendKAINVFractions, perDevice: 2, want: []int{2, 2, 0, 0}},
		{backend: gpufracv1.BackendKAINVFractions, perDevice: -1, want: []int{4, 0, 0, 0}},
		{backend: "", want: []int{4, 0, 0, 0}},
	} {
		t.Run(fmt.Sprintf("backend %q, per device %d", tc.backend, tc.perDevice), func(t *testing.T) {
			var tr trace.Trace
			for n := range 4 {
				p := pod("w", 0, repeat(5, 40), repeat(0.2, 40))
				p.Pod = fmt.Sprintf("w-abc-%d", n)
				tr.Pods = append(tr.Pods, p)
			}
			o := gpufracOptions()
			o.Backend = tc.backend
			o.Updater.MinLifetime, o.Updater.ReplacementsPerMinute = -1, -1
			o.Updater.MaxInFlight, o.Updater.MaxInFlightPerDevice = 1, tc.perDevice
			res := runStub(t, tr, o, growsAtTen)
			if g := res.detail.gpus[0][9]; g != 1 {
				t.Fatalf("%d GPUs held at minute 9, want the four pods on one", g)
			}
			if got := replacementsFrom(res, 11, len(tc.want)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("replacements per step from step 11: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestConsolidationMaxInFlightPerDevice: single-pod workloads a, b, c (25 GiB) and e
// (5 GiB) fill an 80 GiB GPU; d1 and d2 (10 GiB) start a second (kai-nvfractions,
// packed by the target). a ends at minute 19; from minute 20 d1 and d2 fit on the
// first GPU, and consolidation empties the second. The updater replaces at most
// --max-in-flight-per-device of one GPU's pods at once, consolidation's too (its
// candidates pass the deviceGate): d1 from minute 21, d2 from minute 22 by default;
// both from minute 21 with no limit. Before, the simulator moved both at once.
func TestConsolidationMaxInFlightPerDevice(t *testing.T) {
	for _, tc := range []struct {
		perDevice int
		want      [2]int // steps from which d1 and d2's replacements run
	}{
		{perDevice: 0, want: [2]int{21, 22}},
		{perDevice: -1, want: [2]int{21, 21}},
	} {
		t.Run(fmt.Sprintf("per device %d", tc.perDevice), func(t *testing.T) {
			var tr trace.Trace
			names := []string{"a", "b", "c", "e", "d1", "d2"}
			for _, w := range names {
				n := 40
				if w == "a" {
					n = 20
				}
				tr.Pods = append(tr.Pods, pod(w, 0, repeat(2, n), repeat(0.2, n)))
			}
			o := gpufracOptions()
			o.Backend, o.Updater.Consolidate = gpufracv1.BackendKAINVFractions, true
			o.Updater.MinLifetime, o.Updater.ReplacementsPerMinute = -1, -1
			o.Updater.MaxInFlightPerDevice = tc.perDevice
			size := []int64{25, 25, 25, 5, 10, 10}
			res := runStub(t, tr, o, func(_, wc int) decision { return memDecision(size[wc], 1, 40) })
			var got [2]int
			for j := range 2 {
				r := 4 + j
				ch := res.detail.changes[0][r]
				if res.detail.runs[r].name != "ns/"+names[r]+"-abc-x1" || len(ch) != 2 {
					t.Fatalf("run %d %s allocations %v: want %s, replaced once", r, res.detail.runs[r].name, ch, names[r])
				}
				got[j] = ch[1].step
			}
			if got != tc.want || res.Policies[0].Consolidations != 2 {
				t.Errorf("d1, d2 replaced from steps %v, %d consolidations; want %v, 2", got, res.Policies[0].Consolidations, tc.want)
			}
		})
	}
}

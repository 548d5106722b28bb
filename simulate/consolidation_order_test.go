package simulate

import (
	"fmt"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/trace"
)

// TestConsolidationAsTheUpdater: single-pod workloads a, b, c (25 GiB), e (5 GiB) and d
// (25 GiB) fill an 80 GiB GPU and start a second with d; a ends at minute 19, and from
// minute 20 d fits on the first GPU (kai-nvfractions, packed by the target). The
// updater consolidates before a cycle's replacements and only in a cycle without other
// candidates, and moves no pod that is out of date (updater.consolidate, movablePods):
//
//   - e shrinks to 4 GiB at minute 20: d is moved at minute 21, once e's replacement is
//     done (before, the simulator consolidated after the replacements of minute 20);
//   - d's own target falls to 20 GiB at minute 20 and has to persist 3 cycles: d is out
//     of date and not moved (b, c and e are moved onto d's GPU instead); at minute 22 it
//     is replaced for its target (before, the simulator moved it at minute 20, while
//     its change waited on the hysteresis, with its new target).
func TestConsolidationAsTheUpdater(t *testing.T) {
	for _, tc := range []struct {
		name          string
		shrink        int // wc whose target falls 20 % from minute 20
		persist       int
		wantD         int // step from which d's replacement runs
		consolidation int
	}{
		{name: "another pod replaced", shrink: 3, persist: 1, wantD: 22, consolidation: 1},
		{name: "the pod out of date", shrink: 4, persist: 3, wantD: 23, consolidation: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr trace.Trace
			for _, w := range []string{"a", "b", "c", "e", "d"} {
				n := 40
				if w == "a" {
					n = 20
				}
				tr.Pods = append(tr.Pods, pod(w, 0, repeat(2, n), repeat(0.2, n)))
			}
			o := gpufracOptions()
			o.Backend, o.Updater.Consolidate = gpufracv1.BackendKAINVFractions, true
			o.Updater.MinLifetime, o.Updater.PersistCycles = -1, tc.persist
			size := []int64{25, 25, 25, 5, 25}
			res := runStub(t, tr, o, func(k, wc int) decision {
				m := size[wc]
				if k >= 20 && wc == tc.shrink {
					m = m * 4 / 5
				}
				return memDecision(m, 1, 40)
			})
			d := res.detail.changes[0][4]
			if fmt.Sprint(res.detail.runs[4].name) != "ns/d-abc-x1" || len(d) < 2 {
				t.Fatalf("run 4 %s allocations %v: want d, replaced", res.detail.runs[4].name, d)
			}
			if d[1].step != tc.wantD || res.Policies[0].Consolidations != tc.consolidation {
				t.Errorf("d replaced from step %d, %d consolidations; want from %d, %d", d[1].step, res.Policies[0].Consolidations, tc.wantD, tc.consolidation)
			}
		})
	}
}

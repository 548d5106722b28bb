package simulate

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/trace"
)

// stubSizer is a recommender whose decision at each step the test sets (dec, by the step
// last fed), so the tests below drive the simulator's updater directly.
type stubSizer struct {
	k   int
	dec func(k, wc int) decision
}

func (s *stubSizer) feed(_ *timeline, _ []int, k int) { s.k = k }
func (s *stubSizer) decide(*timeline, time.Time)      {}
func (s *stubSizer) decision(wc int) decision         { return s.dec(s.k, wc) }
func (s *stubSizer) incompleteData(int) string        { return "" }

// memDecision is a confident recommendation of memGiB GiB, bounds lo–hi GiB, no compute
// and no observed peak, as the webhook writes it (want) and the updater compares it.
func memDecision(memGiB, loGiB, hiGiB int64) decision {
	t := contract.Target{Memory: memGiB * gib, LowerMemory: loGiB * gib, UpperMemory: hiGiB * gib, MemoryLimit: -1,
		Compute: -1, LowerCompute: -1, UpperCompute: -1, ComputeRequest: -1, PeakMemory: -1, RequestPeakMemory: -1, ControlsMemory: true}
	return decision{ok: true, want: packing.Alloc{MemoryBytes: t.Memory}, target: t, full: true}
}

// runStub replays tr under o (the gpufrac policy alone) with dec as its recommender.
func runStub(t *testing.T, tr trace.Trace, o Options, dec func(k, wc int) decision) *Result {
	t.Helper()
	o.Policies = []string{PolicyGPUFrac}
	o.Annotations.MemoryRequest = backend.AnnotationsMemoryRequestNone
	rp, err := newReplay(&tr, o)
	if err != nil {
		t.Fatal(err)
	}
	s := &stubSizer{dec: dec}
	rp.states[0].spec.sizer, rp.sizers = s, []sizer{s}
	for k := 0; k < rp.tl.steps; k++ {
		rp.step(k)
	}
	return rp.result(&tr)
}

// TestHysteresisObservedEveryCycle: a target 20 % above a pod's 10 GiB (inside its
// bounds) in minutes 2–5, back at 10 GiB in minute 6 and above it again in minutes 7–9.
// The updater observes every workload in every cycle (updater.Hysteresis.Observe with
// no needs in minute 6), so the change has to persist again from minute 7: 3 cycles
// and 5 minutes, past minute 9, and the pod is never replaced. Before, the simulator
// observed a workload only in cycles where a pod of it needed a change, so minute 6 did
// not break the streak and the pod was replaced in minute 7.
func TestHysteresisObservedEveryCycle(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, repeat(5, 15), repeat(0.2, 15))}}
	o := gpufracOptions()
	o.Updater.MinLifetime, o.Updater.PersistCycles, o.Updater.PersistFor = -1, 3, 5*time.Minute
	res := runStub(t, tr, o, func(k, _ int) decision {
		if (k >= 2 && k <= 5) || (k >= 7 && k <= 9) {
			return memDecision(12, 5, 40)
		}
		return memDecision(10, 5, 40)
	})
	if g := res.Policies[0]; g.Replacements != 0 {
		t.Errorf("replacements %d (allocation changes %+v), want 0: the streak broke in minute 6", g.Replacements, res.detail.changes[0][0])
	}
}

package updater

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

var (
	growIn   = Need{Grow: true, Reasons: []string{"grow"}}
	shrinkIn = Need{Shrink: true, Reasons: []string{"shrink"}}
	growOut  = Need{Grow: true, OutOfBounds: true, Reasons: []string{"below lower bound"}}
	urgent   = Need{Grow: true, Urgent: true, Reasons: []string{"oom"}}
)

func TestHysteresisAlternatingNeverPersists(t *testing.T) {
	h := NewHysteresis(3, 0, time.Hour)
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range 40 {
		n := growIn
		if i%2 == 1 {
			n = shrinkIn
		}
		now := t0.Add(time.Duration(i) * time.Minute)
		h.Observe("w", now, []Need{n, n}, time.Time{})
		if ok, reason, _ := h.Allow("w", now, n); ok || reason != SkipNotPersistent {
			t.Fatalf("cycle %d: allowed=%v reason %q for a target alternating around the applied value", i, ok, reason)
		}
	}
	// A change seen every other cycle (nothing in between) does not persist either.
	for i := range 10 {
		now := t0.Add(time.Hour + time.Duration(i)*time.Minute)
		var needs []Need
		if i%2 == 0 {
			needs = []Need{growIn}
		}
		h.Observe("w", now, needs, time.Time{})
		if ok, _, _ := h.Allow("w", now, growIn); ok {
			t.Fatalf("cycle %d: an intermittent change was allowed", i)
		}
	}
}

func TestHysteresisPersistence(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	h := NewHysteresis(3, 5*time.Minute, 0)
	first := -1
	for i := range 10 {
		now := t0.Add(time.Duration(i) * time.Minute)
		h.Observe("w", now, []Need{shrinkIn}, time.Time{})
		if ok, _, _ := h.Allow("w", now, shrinkIn); ok && first < 0 {
			first = i
		}
	}
	if first != 5 { // three cycles, and 5m since the first (cycles at 0..5 min)
		t.Errorf("first allowed at cycle %d, want 5 (3 cycles and 5m)", first)
	}
	// Out of bounds and urgent: no persistence needed.
	h2 := NewHysteresis(3, 5*time.Minute, 0)
	h2.Observe("w", t0, []Need{growOut}, time.Time{})
	if ok, _, msg := h2.Allow("w", t0, growOut); !ok {
		t.Errorf("out of bounds held: %s", msg)
	}
	if ok, _, msg := h2.Allow("w", t0, urgent); !ok {
		t.Errorf("urgent held: %s", msg)
	}
}

func TestHysteresisOneRoundPerInterval(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	h := NewHysteresis(1, 0, time.Hour)
	h.Observe("w", t0, []Need{growOut, growOut}, time.Time{})
	if ok, _, _ := h.Allow("w", t0, growOut); !ok {
		t.Fatal("first round not allowed")
	}
	h.Replaced("w", t0, growOut)
	// The round goes on for the workload's other pods.
	t1 := t0.Add(time.Minute)
	h.Observe("w", t1, []Need{growOut}, time.Time{})
	if ok, _, msg := h.Allow("w", t1, growOut); !ok {
		t.Fatalf("round in progress held: %s", msg)
	}
	h.Replaced("w", t1, growOut)
	// Done: nothing to change ends the round.
	h.Observe("w", t0.Add(2*time.Minute), nil, time.Time{})
	// The target moves back: a new round only an hour after the first started.
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{5 * time.Minute, false}, {59 * time.Minute, false}, {60 * time.Minute, true}} {
		now := t0.Add(tc.at)
		h.Observe("w", now, []Need{shrinkIn}, time.Time{})
		ok, reason, msg := h.Allow("w", now, shrinkIn)
		if ok != tc.want || (!ok && reason != SkipMinInterval) {
			t.Errorf("at +%v: allowed=%v (%s %s), want %v", tc.at, ok, reason, msg, tc.want)
		}
	}
	// Urgent growth is never held by the interval.
	if ok, _, _ := h.Allow("w", t0.Add(3*time.Minute), urgent); !ok {
		t.Error("urgent growth held by the interval")
	}
}

func TestHysteresisOneRoundPerWindow(t *testing.T) {
	w1 := time.Date(2026, 5, 1, 2, 0, 0, 0, time.UTC)
	h := NewHysteresis(1, 0, 0)
	h.Observe("w", w1.Add(time.Minute), []Need{growOut}, w1)
	h.Replaced("w", w1.Add(time.Minute), growOut)
	h.Observe("w", w1.Add(2*time.Minute), nil, w1)
	h.Observe("w", w1.Add(30*time.Minute), []Need{shrinkIn}, w1)
	if ok, reason, _ := h.Allow("w", w1.Add(30*time.Minute), shrinkIn); ok || reason != SkipMinInterval {
		t.Errorf("second round in the same window: allowed=%v %q", ok, reason)
	}
	w2 := w1.Add(24 * time.Hour)
	h.Observe("w", w2, []Need{shrinkIn}, w2)
	if ok, _, msg := h.Allow("w", w2, shrinkIn); !ok {
		t.Errorf("next window held: %s", msg)
	}
}

func TestHysteresisSeedAfterRestart(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	h := NewHysteresis(1, 0, time.Hour)
	h.Seed("w", t0)
	// A round in progress before the restart goes on.
	h.Observe("w", t0.Add(time.Minute), []Need{growOut}, time.Time{})
	if ok, _, msg := h.Allow("w", t0.Add(time.Minute), growOut); !ok {
		t.Fatalf("seeded round cut short: %s", msg)
	}
	h.Seed("w", t0.Add(time.Minute)) // known now: ignored
	h.Observe("w", t0.Add(2*time.Minute), nil, time.Time{})
	h.Observe("w", t0.Add(3*time.Minute), []Need{shrinkIn}, time.Time{})
	if ok, reason, _ := h.Allow("w", t0.Add(3*time.Minute), shrinkIn); ok || reason != SkipMinInterval {
		t.Errorf("new round within the interval of the seeded one: allowed=%v %q", ok, reason)
	}
}

// The whole updater with a recommendation whose target alternates about 12 % around
// the applied 1Gi every cycle, inside its bounds, pods old enough, no budget in the way
// (every pod may be in flight): at most one replacement in 30 cycles. The control
// (the same target every cycle) is replaced, so the test can fail.
func TestUpdaterAlternatingTargetAtMostOneReplacement(t *testing.T) {
	for _, tc := range []struct {
		name      string
		targets   []string
		atMost    int
		atLeast   int
		firstFrom int
	}{
		{"alternating", []string{"1147Mi", "900Mi"}, 1, 0, 0},
		{"steady", []string{"900Mi"}, 3, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
			f.cfg.MaxInFlight, f.cfg.MinReplacementInterval = 1, time.Hour
			f.build()
			f.u.Now = func() time.Time { return f.now }
			evicted, first := 0, -1
			for i := range 30 {
				f.setTarget(tc.targets[i%len(tc.targets)], "768Mi", "1536Mi")
				gfr := f.gfr.DeepCopy()
				cur := &gpufracv1.GPUFractionRecommendation{}
				if err := f.c.Get(t.Context(), client.ObjectKeyFromObject(gfr), cur); err != nil {
					t.Fatal(err)
				}
				cur.Status = gfr.Status
				if err := f.c.Status().Update(t.Context(), cur); err != nil {
					t.Fatal(err)
				}
				before := len(f.livePods())
				f.run()
				if n := before - len(f.livePods()); n > 0 {
					evicted += n
					if first < 0 {
						first = i
					}
				}
				f.now = f.now.Add(time.Minute)
			}
			if evicted > tc.atMost || evicted < tc.atLeast {
				t.Errorf("%d replacements in 30 cycles, want %d–%d", evicted, tc.atLeast, tc.atMost)
			}
			if tc.atLeast > 0 && first != tc.firstFrom {
				t.Errorf("first replacement in cycle %d, want %d (the third cycle with the same change)", first, tc.firstFrom)
			}
		})
	}
}

// Overlapping windows are one opening (docs/updater.md: they merge): a round started in
// it holds the next round until the merged opening has closed, whichever activation of
// whichever window holds it open later, also past the minimum interval.
func TestHysteresisOneRoundPerMergedOpening(t *testing.T) {
	for _, tc := range []struct {
		name    string
		windows Windows
		opened  string // the merged opening's start
		round   string // the first round, inside it
		later   string // after MinInterval, still inside it
		next    string // the next opening
	}{
		{"one schedule, overlapping activations", mustWindows(t, win("0 1,2 * * *", 2*time.Hour, "")),
			"2026-03-01T01:00:00Z", "2026-03-01T01:30:00Z", "2026-03-01T03:30:00Z", "2026-03-02T01:30:00Z"},
		{"two windows, across midnight", mustWindows(t, win("0 22 * * *", 4*time.Hour, ""), win("0 1 * * *", 2*time.Hour, "")),
			"2026-02-28T22:00:00Z", "2026-02-28T22:30:00Z", "2026-03-01T02:30:00Z", "2026-03-01T22:30:00Z"},
		{"Sydney, overlapping on the autumn day", mustWindows(t, win("0 1 * * *", 2*time.Hour, "Australia/Sydney"), win("30 2 * * *", 2*time.Hour, "Australia/Sydney")),
			// 2026-04-05 01:00 AEDT = 04-04 14:00 UTC; 02:30 (first, AEDT) = 15:30 UTC.
			"2026-04-04T14:00:00Z", "2026-04-04T14:10:00Z", "2026-04-04T17:00:00Z", "2026-04-05T15:10:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHysteresis(1, 0, time.Hour)
			round, later, next := at(t, tc.round), at(t, tc.later), at(t, tc.next)
			for _, now := range []time.Time{round, later} {
				if st := tc.windows.State(now); !st.Open || !st.Start.Equal(at(t, tc.opened)) {
					t.Fatalf("at %v: %+v, want open since %s", now, st, tc.opened)
				}
			}
			h.Observe("w", round, []Need{growOut}, tc.windows.State(round).Start)
			h.Replaced("w", round, growOut)
			h.Observe("w", round.Add(time.Minute), nil, tc.windows.State(round.Add(time.Minute)).Start)
			h.Observe("w", later, []Need{shrinkIn}, tc.windows.State(later).Start)
			if ok, reason, _ := h.Allow("w", later, shrinkIn); ok || reason != SkipMinInterval {
				t.Errorf("second round in the same merged opening: allowed=%v %q", ok, reason)
			}
			h.Observe("w", next, []Need{shrinkIn}, tc.windows.State(next).Start)
			if ok, _, msg := h.Allow("w", next, shrinkIn); !ok {
				t.Errorf("next opening held: %s", msg)
			}
		})
	}
}

package updater

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	h.Seed("w", Round{Start: t0, Grow: true, Shrink: true}) // a status of an earlier version
	// A round in progress before the restart goes on.
	h.Observe("w", t0.Add(time.Minute), []Need{growOut}, time.Time{})
	if ok, _, msg := h.Allow("w", t0.Add(time.Minute), growOut); !ok {
		t.Fatalf("seeded round cut short: %s", msg)
	}
	h.Seed("w", Round{Start: t0.Add(time.Minute), Grow: true}) // known now: ignored
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

// A round goes on only in its own direction, and a change never turns back within one
// round: a pod grown in a round is not shrunk back in the same round, whichever way the
// other direction tries to join it (a pod that grows in one resource and shrinks in
// another, a new round started while a slow one is still going), and a restarted
// updater seeded with the round as the status carries it decides as the one that ran
// on. Protective growth that is not urgent (urgentGrowth false) waits for no round.
func TestHysteresisNoTurnWithinARound(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	shrinkOut := Need{Shrink: true, OutOfBounds: true, Reasons: []string{"above upper bound"}}
	bothOut := Need{Grow: true, Shrink: true, OutOfBounds: true, Reasons: []string{"memory below lower bound", "compute above upper bound"}}
	protective := Need{Grow: true, Protective: true, Reasons: []string{"near its limit"}}
	type step struct {
		at    time.Duration
		needs []Need // observed
		try   Need   // Allow, then Replaced when allowed
		want  bool
	}
	for _, tc := range []struct {
		name    string
		restart time.Duration // a restarted Hysteresis, seeded from the first's Round, from this step's time on (0: none)
		steps   []step
	}{
		{"a pod growing and shrinking joins no grow round", 0, []step{
			{0, []Need{growOut, growOut}, growOut, true},
			{time.Minute, []Need{growOut, bothOut}, bothOut, false},
			{2 * time.Minute, []Need{shrinkOut}, shrinkOut, false},
			{61 * time.Minute, []Need{shrinkOut}, shrinkOut, true},
		}},
		{"a new round while a slow one goes on replaces it", 0, []step{
			{0, []Need{growOut, growOut, growOut}, growOut, true},
			{61 * time.Minute, []Need{growOut, shrinkOut}, shrinkOut, true},
			{62 * time.Minute, []Need{growOut}, growOut, false}, // the pod just shrunk, back up
			{122 * time.Minute, []Need{growOut}, growOut, true},
		}},
		{"restart inside a grow round", 2 * time.Minute, []step{
			{0, []Need{growOut, growOut}, growOut, true},
			{time.Minute, []Need{growOut}, growOut, true},
			{2 * time.Minute, []Need{shrinkOut}, shrinkOut, false}, // the target turned back
			{3 * time.Minute, []Need{shrinkOut}, shrinkOut, false},
			{61 * time.Minute, []Need{shrinkOut}, shrinkOut, true},
		}},
		{"restart with a grow round in progress", 2 * time.Minute, []step{
			{0, []Need{growOut, growOut, growOut}, growOut, true},
			{2 * time.Minute, []Need{growOut, growOut}, growOut, true}, // goes on after the restart
		}},
		{"protective growth after a shrink round", 0, []step{
			{0, []Need{shrinkOut}, shrinkOut, true},
			{10 * time.Minute, []Need{protective}, protective, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHysteresis(1, 0, time.Hour)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if tc.restart > 0 && s.at == tc.restart {
					r := h.Round("w")
					h = NewHysteresis(1, 0, time.Hour)
					h.Seed("w", r)
				}
				h.Observe("w", now, s.needs, time.Time{})
				ok, reason, msg := h.Allow("w", now, s.try)
				if ok != s.want {
					t.Fatalf("step %d (+%v, %s): allowed=%v (%s %s), want %v", i, s.at, s.try.Reasons, ok, reason, msg, s.want)
				}
				if ok {
					h.Replaced("w", now, s.try)
				}
			}
		})
	}
}

// A restarted updater goes on with the workload's round as the one before it would
// have: three pods at 1Gi grow (out of bounds) in a round, one replaced; then the
// target turns back and the replacement (1536Mi) is above the upper bound. Within the
// minimum interval it is kept, whether the updater ran on, restarted, or restarted
// after the autoscaler in charge was deleted and another autoscaler of the workload
// (whose recommendation asks for the shrink) took charge. The control: a round that
// started two hours before the restart lets the shrink go.
func TestRestartKeepsTheRound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		restart   bool
		duplicate bool // the round is made by an older autoscaler, deleted before the restart
		longAgo   bool // the round's start is moved two hours back before the restart
		wantKept  bool
	}{
		{"in memory", false, false, false, true},
		{"restart", true, false, false, true},
		{"restart, another autoscaler in charge", true, true, false, true},
		{"control: restart after the interval", true, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
			f.cfg.MinReplacementInterval = time.Hour
			f.setTarget("1536Mi", "1280Mi", "2Gi") // the 1Gi pods grow
			inCharge := "web"
			if tc.duplicate {
				inCharge = f.addOlderDuplicate().Name
			}
			f.build()
			f.run()
			live := f.livePods()
			if len(live) != 2 || live["web-abc-0"] {
				t.Fatalf("first cycle: pods %v, want web-abc-0 replaced", live)
			}
			ctx := t.Context()
			get := func(name string) *gpufracv1.GPUFractionAutoscaler {
				g := &gpufracv1.GPUFractionAutoscaler{}
				if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, g); err != nil {
					t.Fatal(err)
				}
				return g
			}
			for _, name := range []string{"web", inCharge} {
				if r := get(name).Status.Updater.LastRound; r == nil || !r.Grow || r.Shrink {
					t.Fatalf("%s: status.updater.lastRound %+v, want a grow round", name, r)
				}
			}
			// The replacement, at the recommendation of the round.
			repl := f.pods[1].DeepCopy()
			repl.Name, repl.UID, repl.ResourceVersion = "web-abc-3", "uid-web-abc-3", ""
			repl.CreationTimestamp = metav1.NewTime(time.Now())
			repl.Annotations = map[string]string{gpufracv1.AnnotationApplied: `{"backend":"hami","autoscaler":"web","containers":[{"name":"main","memory":"1536Mi","compute":"250m"}]}`}
			if err := f.c.Create(ctx, repl); err != nil {
				t.Fatal(err)
			}
			// The target turns back: the replacement is above the upper bound.
			f.setTarget("1Gi", "768Mi", "1280Mi")
			cur := &gpufracv1.GPUFractionRecommendation{}
			if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.gfr), cur); err != nil {
				t.Fatal(err)
			}
			cur.Status = f.gfr.Status
			if err := f.c.Status().Update(ctx, cur); err != nil {
				t.Fatal(err)
			}
			if tc.duplicate {
				if err := f.c.Delete(ctx, get("web-old")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.longAgo {
				g := get("web")
				st := g.Status.Updater
				back := metav1.NewTime(st.LastRound.Started.Add(-2 * time.Hour))
				st.LastRound.Started, st.LastEvictionTime = back, &back
				if err := f.c.Status().Update(ctx, g); err != nil {
					t.Fatal(err)
				}
			}
			if tc.restart {
				f.u = New(f.c, f.c, f.cfg)
				f.u.Events = f.rec
			}
			f.run()
			if kept := f.livePods()["web-abc-3"]; kept != tc.wantKept {
				t.Fatalf("replacement kept=%v, want %v (pods %v)", kept, tc.wantKept, f.livePods())
			}
			if tc.wantKept {
				st := f.status()
				if len(st.Updates) != 1 || st.Updates[0].Pod != "web-abc-3" || st.Updates[0].SkipReason != SkipMinInterval {
					t.Errorf("updates %+v, want web-abc-3 held by %s", st.Updates, SkipMinInterval)
				}
			}
		})
	}
}

// TestEvictionBurstIsOneCycle: the token bucket holds one cycle's worth of the eviction
// rate by default, so the updater, which evicts at the cycle, can evict at the rate it is
// given (with a bucket of 1 it evicted one pod a cycle: 0.1/s read as one a minute).
func TestEvictionBurstIsOneCycle(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{}, 6}, // 0.1/s × 1m
		{Config{EvictionRate: 0.05, Interval: 30 * time.Second}, 2},
		{Config{EvictionRate: 0.01, Interval: 10 * time.Second}, 1},
		{Config{EvictionRate: -1}, 1},
		{Config{EvictionBurst: 3}, 3},
	} {
		if got := c.cfg.WithDefaults().EvictionBurst; got != c.want {
			t.Errorf("%+v: burst %d, want %d", c.cfg, got, c.want)
		}
	}
}

// TestPersistenceCountsCyclesInEveryMode: a shrink inside the bounds (target 900Mi, the
// pods 1Gi) seen in two Recreate cycles, then updateMode Off (or Initial) for 30 cycles
// in which the target moved above the pods and back, then Recreate again with the
// shrink: it has to persist again (3 cycles, 5 minutes) before a pod is replaced.
// Before, the hysteresis observed only Recreate cycles, so the streak of the first two
// went on across the cycles it never saw and the first Recreate cycle evicted a pod.
// The control keeps the target at 900Mi through the pause: the change persisted, and
// the first Recreate cycle replaces a pod.
func TestPersistenceCountsCyclesInEveryMode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		paused     gpufracv1.UpdateMode
		pauseTgt   string
		wantEvicts bool
	}{
		{"off, target moved", gpufracv1.UpdateModeOff, "1147Mi", false},
		{"initial, target moved", gpufracv1.UpdateModeInitial, "1147Mi", false},
		{"off, target steady", gpufracv1.UpdateModeOff, "900Mi", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
			f.cfg.MaxInFlight, f.cfg.MinReplacementInterval = 1, time.Hour
			f.build()
			f.u.Now = func() time.Time { return f.now }
			ctx := t.Context()
			step := func(mode gpufracv1.UpdateMode, target string) int {
				t.Helper()
				g := &gpufracv1.GPUFractionAutoscaler{}
				if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.gfa), g); err != nil {
					t.Fatal(err)
				}
				g.Spec.UpdatePolicy.UpdateMode = &mode
				if err := f.c.Update(ctx, g); err != nil {
					t.Fatal(err)
				}
				f.setTarget(target, "768Mi", "1536Mi")
				cur := &gpufracv1.GPUFractionRecommendation{}
				if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.gfr), cur); err != nil {
					t.Fatal(err)
				}
				cur.Status = f.gfr.DeepCopy().Status
				if err := f.c.Status().Update(ctx, cur); err != nil {
					t.Fatal(err)
				}
				before := len(f.livePods())
				f.run()
				f.now = f.now.Add(time.Minute)
				return before - len(f.livePods())
			}
			for i := range 2 {
				if n := step(gpufracv1.UpdateModeRecreate, "900Mi"); n != 0 {
					t.Fatalf("Recreate cycle %d evicted %d pod(s) before the change persisted", i+1, n)
				}
			}
			for i := range 30 {
				target := tc.pauseTgt
				if i == 29 {
					target = "900Mi" // the last paused cycle is back at the shrink
				}
				if n := step(tc.paused, target); n != 0 {
					t.Fatalf("%s cycle %d evicted %d pod(s)", tc.paused, i+1, n)
				}
			}
			n := step(gpufracv1.UpdateModeRecreate, "900Mi")
			if got := n > 0; got != tc.wantEvicts {
				t.Fatalf("first Recreate cycle after %s: %d eviction(s), want evictions %v (updates %+v)", tc.paused, n, tc.wantEvicts, f.status().Updates)
			}
			if !tc.wantEvicts {
				if st := f.status(); len(st.Updates) == 0 || st.Updates[0].SkipReason != SkipNotPersistent {
					t.Errorf("updates %+v, want the shrink held as %s", st.Updates, SkipNotPersistent)
				}
			}
		})
	}
}

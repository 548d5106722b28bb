package updater

import (
	"fmt"
	"time"
)

// Hysteresis keeps a workload from being replaced back and forth when its target moves
// around the applied value. It is pure (no API client, no clock: callers pass the time)
// so the updater and the what-if simulator make the same decisions. The zero value is
// not usable; create it with NewHysteresis. Not safe for concurrent use.
//
// Per workload (any string key; the updater uses workload.Ref.String()), once per cycle:
//
//  1. Observe(key, now, needs, windowStart) with every pod's Need (Evaluate);
//  2. Allow(key, now, need) for each pod that would be replaced or changed in place;
//  3. Replaced(key, now, need) after each replacement (eviction or in-place change).
//
// The rules:
//
//   - Exempt: a Need that is Protective (growth for an out-of-memory exit, a peak near
//     the limit or a latency breach, urgent or not) or a Rollback is always allowed and
//     never counted. Such growth rests on what the pod uses now (or on the floor), never
//     goes past the target, and is not the churn these rules are for; with urgentGrowth
//     false it still waits for a window (Admissible), but not for another round.
//   - Persistence: a change inside the bounds (Need.OutOfBounds false) is allowed only
//     after the workload's within-bounds direction (grow, shrink, or both) was the same
//     in at least PersistCycles consecutive observations spanning at least PersistFor.
//     A cycle with no within-bounds change, or with another direction, restarts the
//     count. A target that alternates around the applied value therefore never
//     persists. Changes out of bounds need no persistence.
//   - Interval: the replacements of a workload come in rounds. A round starts with the
//     first replacement that is not exempt, in that replacement's direction (grow,
//     shrink, or both for a pod that grows in one resource and shrinks in another), and
//     goes on while each observation still has a non-exempt change in a direction the
//     round started with; it ends with an observation that has none. A round goes on
//     only for pods whose change lies within its direction: a pod to change the other
//     way (the target turned back) waits for a new round, and a new round starts only
//     MinInterval or more after the previous round started, and, when the workload has
//     resize windows, not in the same window opening as the previous round. A new round
//     replaces the previous one (its direction and start), so a direction never joins a
//     round after it started and a change never turns back within one round.
type Hysteresis struct {
	// PersistCycles is how many consecutive observations a change inside the bounds
	// must be seen in before it applies. ≤ 1: one is enough.
	PersistCycles int
	// PersistFor is how long, from the first of those observations, the change must
	// have persisted. Zero: no duration.
	PersistFor time.Duration
	// MinInterval is the least time between the starts of two rounds of replacements
	// of one workload. Zero: no interval.
	MinInterval time.Duration

	state map[string]*hysteresisState
}

// hysteresisState is one workload's history.
type hysteresisState struct {
	dir        direction // within-bounds direction of the current streak
	count      int       // consecutive observations with dir
	since      time.Time // first observation of the streak
	roundDir   direction // direction of the active round; 0 when none is active
	roundStart time.Time // start of the last round (zero: none yet)
	window     time.Time // window opening of the last observation (zero: no windows)
	lastSeen   time.Time
	seeding    bool // created by Seed and not observed yet
}

// direction is a set of directions: grow, shrink or both.
type direction uint8

const (
	dirGrow direction = 1 << iota
	dirShrink
)

func directionOf(n Need) direction {
	var d direction
	if n.Grow {
		d |= dirGrow
	}
	if n.Shrink {
		d |= dirShrink
	}
	return d
}

func (d direction) String() string {
	switch d {
	case dirGrow:
		return "grow"
	case dirShrink:
		return "shrink"
	case dirGrow | dirShrink:
		return "grow and shrink"
	}
	return "none"
}

// exempt reports whether a Need bypasses the hysteresis: protective growth (urgent or
// not: with urgentGrowth false it waits for a window, not for a round) and rollbacks.
func exempt(n Need) bool { return n.Urgent || n.Rollback || n.Protective }

// NewHysteresis returns a Hysteresis with the given rules (see the fields).
func NewHysteresis(persistCycles int, persistFor, minInterval time.Duration) *Hysteresis {
	return &Hysteresis{PersistCycles: persistCycles, PersistFor: persistFor, MinInterval: minInterval, state: map[string]*hysteresisState{}}
}

func (h *Hysteresis) get(key string) *hysteresisState {
	if h.state == nil {
		h.state = map[string]*hysteresisState{}
	}
	s := h.state[key]
	if s == nil {
		s = &hysteresisState{}
		h.state[key] = s
	}
	return s
}

// Observe records one cycle of a workload at now: needs are the Needs of its pods
// (Evaluate; pods that need nothing may be left out), windowStart the start of the
// resize window open now (WindowState.Start; zero when the workload has no windows or
// none is open). Call it once per workload per cycle, before Allow.
func (h *Hysteresis) Observe(key string, now time.Time, needs []Need, windowStart time.Time) {
	s := h.get(key)
	var within, all direction
	for _, n := range needs {
		if !n.Needed() || exempt(n) {
			continue
		}
		all |= directionOf(n)
		if !n.OutOfBounds {
			within |= directionOf(n)
		}
	}
	switch {
	case within == 0:
		s.dir, s.count, s.since = 0, 0, time.Time{}
	case within == s.dir:
		s.count++
	default:
		s.dir, s.count, s.since = within, 1, now
	}
	if s.roundDir != 0 && all&s.roundDir == 0 {
		s.roundDir = 0 // nothing left in the round's direction: the round is over
	}
	s.window = windowStart
	s.lastSeen = now
	s.seeding = false
}

// Allow reports whether a pod of the workload with need may be replaced (or changed in
// place) at now. When not, reason is SkipNotPersistent or SkipMinInterval and msg says
// until when or why.
func (h *Hysteresis) Allow(key string, now time.Time, need Need) (ok bool, reason, msg string) {
	if !need.Needed() || exempt(need) {
		return true, "", ""
	}
	s := h.get(key)
	if !need.OutOfBounds {
		d := directionOf(need)
		persisted := s.dir&d == d && s.count >= max(1, h.PersistCycles) && (h.PersistFor <= 0 || now.Sub(s.since) >= h.PersistFor)
		if !persisted {
			seen, since := 0, "now"
			if s.dir&d == d && s.count > 0 {
				seen, since = s.count, stamp(s.since)
			}
			return false, SkipNotPersistent, fmt.Sprintf("a change inside the bounds (%s) applies once it persists for %d consecutive cycles and %v; seen in %d since %s",
				d, max(1, h.PersistCycles), h.PersistFor, seen, since)
		}
	}
	if d := directionOf(need); s.roundDir != 0 && d&^s.roundDir == 0 {
		return true, "", "" // the round in progress goes on, in its own direction
	}
	if !s.roundStart.IsZero() {
		if h.MinInterval > 0 && now.Sub(s.roundStart) < h.MinInterval {
			return false, SkipMinInterval, fmt.Sprintf("the workload's last round of replacements started at %s; the next may start at %s (minimum interval %v)",
				stamp(s.roundStart), stamp(s.roundStart.Add(h.MinInterval)), h.MinInterval)
		}
		if !s.window.IsZero() && !s.roundStart.Before(s.window) {
			return false, SkipMinInterval, fmt.Sprintf("the workload was already replaced in this resize window (round started at %s); the next round waits for the next window",
				stamp(s.roundStart))
		}
	}
	return true, "", ""
}

// Replaced records that a pod of the workload with need was replaced (or changed in
// place) at now. A replacement that is not exempt and does not lie within the direction
// of the round in progress (none in progress, or Allow let a new round start) starts a
// round of its own direction at now.
func (h *Hysteresis) Replaced(key string, now time.Time, need Need) {
	if !need.Needed() || exempt(need) {
		return
	}
	s := h.get(key)
	if d := directionOf(need); s.roundDir == 0 || d&^s.roundDir != 0 {
		s.roundDir, s.roundStart = d, now
	}
}

// Round is a workload's last round of replacements (see Hysteresis), as a status
// carries it across a restart of the updater (status.updater.lastRound).
type Round struct {
	// Start is when the round's first replacement was made; zero when there was none.
	Start time.Time
	// Grow and Shrink are the directions the round goes on in; both false once it is
	// over.
	Grow, Shrink bool
}

// Round returns the workload's last round (zero when none is known).
func (h *Hysteresis) Round(key string) Round {
	s := h.state[key]
	if s == nil {
		return Round{}
	}
	return Round{Start: s.roundStart, Grow: s.roundDir&dirGrow != 0, Shrink: s.roundDir&dirShrink != 0}
}

// Seed tells a Hysteresis that knows nothing of the workload yet (a restarted updater)
// its last round, as Round returned it before the restart (status.updater.lastRound):
// a round in progress goes on in its own direction, and the next starts as it would
// have without the restart. A status written before rounds were recorded has only the
// time of the last replacement (status.updater.lastEvictionTime or
// lastInPlaceUpdateTime): pass it as Start with both directions, a round that may still
// be in progress. Of several seeds before the first observation the latest start wins;
// calls for a workload already observed do nothing.
func (h *Hysteresis) Seed(key string, r Round) {
	if r.Start.IsZero() {
		return
	}
	if h.state == nil {
		h.state = map[string]*hysteresisState{}
	}
	var d direction
	if r.Grow {
		d |= dirGrow
	}
	if r.Shrink {
		d |= dirShrink
	}
	if s, ok := h.state[key]; ok {
		if s.seeding && r.Start.After(s.roundStart) {
			s.roundStart, s.roundDir = r.Start, d
		}
		return
	}
	h.state[key] = &hysteresisState{roundStart: r.Start, roundDir: d, seeding: true}
}

// Forget drops the state of workloads last observed before cutoff (gone workloads).
func (h *Hysteresis) Forget(cutoff time.Time) {
	for k, s := range h.state {
		if s.lastSeen.Before(cutoff) {
			delete(h.state, k)
		}
	}
}

package updater

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// windowParser parses resize window schedules exactly as the admission webhook validates
// them: standard 5-field cron expressions (minute hour day-of-month month day-of-week)
// and @-descriptors such as @daily, with github.com/robfig/cron/v3.
var windowParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxWindowSteps bounds the walk over overlapping activations of one schedule (e.g.
// "* * * * *" with a duration of a day): the end reported for such a window is then a
// lower bound.
const maxWindowSteps = 1000

// Window is one parsed resize window: a cron schedule of its starts in a time zone and
// how long each stays open.
type Window struct {
	schedule cron.Schedule
	duration time.Duration
	loc      *time.Location
	spec     string
}

// ParseWindow parses a ResizeWindow. It returns an error for a schedule that does not
// parse (or uses @every, TZ= or CRON_TZ=) or matches no date (February 30), a duration that is not positive, or a time zone
// that time.LoadLocation does not know (empty means UTC; "Local" is rejected because it
// depends on the machine).
func ParseWindow(w gpufracv1.ResizeWindow) (*Window, error) {
	s := strings.TrimSpace(w.Schedule)
	switch {
	case s == "":
		return nil, fmt.Errorf("empty schedule")
	case strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ="):
		return nil, fmt.Errorf("schedule %q: set the time zone in timeZone", w.Schedule)
	case strings.HasPrefix(s, "@every"):
		return nil, fmt.Errorf("schedule %q: @every is not anchored to wall-clock time", w.Schedule)
	}
	sched, err := windowParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", w.Schedule, err)
	}
	if sched.Next(time.Now()).IsZero() {
		// A date that does not exist ("0 2 30 2 *"): the window would never open, and
		// its next start would read as year 1.
		return nil, fmt.Errorf("schedule %q matches no date within five years: the window would never open", w.Schedule)
	}
	if w.Duration.Duration < gpufracv1.MinResizeWindowDuration {
		return nil, fmt.Errorf("window %q: duration %v is under %v: it could open and close between two cycles", w.Schedule, w.Duration.Duration, gpufracv1.MinResizeWindowDuration)
	}
	loc := time.UTC
	if w.TimeZone != "" {
		if w.TimeZone == "Local" {
			return nil, fmt.Errorf("time zone Local depends on the machine; use an IANA name")
		}
		if loc, err = time.LoadLocation(w.TimeZone); err != nil {
			return nil, fmt.Errorf("time zone %q: %w", w.TimeZone, err)
		}
	}
	return &Window{schedule: sched, duration: w.Duration.Duration, loc: loc, spec: s}, nil
}

// String renders the window as "<schedule> for <duration> (<time zone>)".
func (w *Window) String() string {
	return fmt.Sprintf("%s for %v (%s)", w.spec, w.duration, w.loc)
}

// next returns the first start strictly after t (zero when there is none within five
// years, robfig/cron's limit). Starts are computed on the wall clock of the window's
// time zone, so a daily 02:00 start stays at 02:00 local time across daylight-saving
// changes. The schedule is evaluated on the wall clock itself (a clock without
// daylight saving), and each wall-clock start is then placed in real time:
//
//   - a wall-clock time that does not exist (inside the hour skipped when clocks go
//     forward) starts the window right after the jump, as ISC cron (Vixie cron) does:
//     "0 2 * * *" in Europe/Berlin opens at 03:00 CEST on 2026-03-29. Several starts in
//     the gap (and one at the end of the gap) open it once. robfig/cron and Kubernetes
//     CronJobs skip such starts;
//   - a wall-clock time that happens twice (the hour repeated when clocks go back)
//     starts a window only the first time: robfig/cron would start one at both.
func (w *Window) next(t time.Time) time.Time {
	wall := wallClock(t, w.loc)
	for i := 0; i < maxWindowSteps; i++ {
		n := w.schedule.Next(wall)
		if n.IsZero() {
			return n
		}
		if s := w.instant(n); s.After(t) {
			return s.In(t.Location())
		}
		// Already happened: a wall-clock time of the repeated hour whose first
		// occurrence is not after t, or a gap start placed at the jump at or before t.
		wall = n
	}
	return time.Time{}
}

// wallClock returns t's wall-clock reading in loc as a UTC time (a clock without
// daylight-saving changes), on which the cron schedule is evaluated.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant returns the first real time at which the wall clock of the window's time zone
// reads wall (a UTC time from wallClock) or later: the first of two occurrences in a
// repeated hour, and the end of the jump for a time that was skipped.
func (w *Window) instant(wall time.Time) time.Time {
	r := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), wall.Nanosecond(), w.loc)
	if wallClock(r, w.loc).Equal(wall) {
		// It exists; an earlier occurrence (repeated hour) wins.
		first := r
		for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
			if e := r.Add(-back); wallClock(e, w.loc).Equal(wall) {
				first = e
			}
		}
		return first
	}
	// Skipped: the first instant whose wall clock reads wall or later is the jump. The
	// wall clock only moves forward across a gap, so a binary search over the
	// surrounding hours finds it (to the second; transitions are on whole seconds).
	lo, hi := r.Add(-3*time.Hour).Unix(), r.Add(3*time.Hour).Unix()
	for lo < hi {
		mid := lo + (hi-lo)/2
		if wallClock(time.Unix(mid, 0), w.loc).Before(wall) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return time.Unix(lo, 0).In(w.loc)
}

// Open reports whether the window is open at t — some start s with s ≤ t < s+duration —
// and if so when it closes (the latest end of the starts that overlap t, following
// further starts that begin before the current end up to maxWindowSteps).
func (w *Window) Open(t time.Time) (bool, time.Time) {
	var end time.Time
	// Starts in (t-duration, t] hold the window open at t.
	s := w.next(t.Add(-w.duration))
	for i := 0; !s.IsZero() && !s.After(t) && i < maxWindowSteps; i++ {
		if e := s.Add(w.duration); e.After(end) {
			end = e
		}
		s = w.next(s)
	}
	if end.IsZero() || !end.After(t) {
		return false, time.Time{}
	}
	// Later starts before the end extend the window (overlapping activations).
	for i := 0; !s.IsZero() && s.Before(end) && i < maxWindowSteps; i++ {
		if e := s.Add(w.duration); e.After(end) {
			end = e
		}
		s = w.next(s)
	}
	return true, end
}

// WindowState is the combined state of an autoscaler's resize windows at one time.
type WindowState struct {
	// Open is true when a window is open, or when there are no windows (any time).
	Open bool
	// End is when the open windows close (the latest end among those open); zero when
	// none is open or there are no windows.
	End time.Time
	// Start is when the open window opened: the earliest start of the activations that
	// cover the evaluation time, followed back through earlier activations that overlap
	// it (of any of the windows, merged as End is), so it stays the same for the whole
	// opening; zero when none is open or there are no windows. Hysteresis allows one
	// round of replacements per Start.
	Start time.Time
	// NextStart is the first start of a window after End when open, after the
	// evaluation time otherwise; zero without windows.
	NextStart time.Time
	// Unrestricted is true when there are no windows.
	Unrestricted bool
}

// opening says when a change waits for, in event notes and status messages: "in the
// resize window opening at" NextStart (stamp).
func (s WindowState) opening() string {
	return "in the resize window opening at " + stamp(s.NextStart)
}

// Windows is the parsed set of an autoscaler's resize windows.
type Windows []*Window

// ParseWindows parses every window of an update policy (nil policy or no windows: an
// empty, unrestricted set). It returns the first window's error, naming its index.
func ParseWindows(p *gpufracv1.UpdatePolicy) (Windows, error) {
	if p == nil {
		return nil, nil
	}
	out := make(Windows, 0, len(p.ResizeWindows))
	for i, w := range p.ResizeWindows {
		pw, err := ParseWindow(w)
		if err != nil {
			return nil, fmt.Errorf("resizeWindows[%d]: %w", i, err)
		}
		out = append(out, pw)
	}
	return out, nil
}

// State evaluates the windows at t.
func (ws Windows) State(t time.Time) WindowState {
	if len(ws) == 0 {
		return WindowState{Open: true, Unrestricted: true}
	}
	var st WindowState
	for _, w := range ws {
		if open, end := w.Open(t); open {
			st.Open = true
			if end.After(st.End) {
				st.End = end
			}
			if s := w.next(t.Add(-w.duration)); !s.IsZero() && (st.Start.IsZero() || s.Before(st.Start)) {
				st.Start = s
			}
		}
	}
	from := t
	if st.Open {
		// A window that opens before the combined end extends it (a few chained
		// overlaps at most are followed).
		for changed, i := true, 0; changed && i < 16; i++ {
			changed = false
			for _, w := range ws {
				if open, end := w.Open(st.End.Add(-time.Nanosecond)); open && end.After(st.End) {
					st.End, changed = end, true
				}
			}
		}
		from = st.End.Add(-time.Nanosecond)
		// Likewise backwards: the opening began at the earliest start of the chain of
		// overlapping activations that holds it open now, so a round of replacements
		// (Hysteresis) started before a later activation is still in this opening.
		for changed, i := true, 0; changed && i < 16; i++ {
			changed = false
			for _, w := range ws {
				if s := w.next(st.Start.Add(-w.duration)); !s.IsZero() && s.Before(st.Start) {
					st.Start, changed = s, true
				}
			}
		}
	}
	for _, w := range ws {
		if n := w.next(from); !n.IsZero() && (st.NextStart.IsZero() || n.Before(st.NextStart)) {
			st.NextStart = n
		}
	}
	return st
}

// windowState is the plan's window-state step: it evaluates the autoscaler's resize
// windows at now into p.window (p.werr when one does not parse) and status.updater's
// resizeWindowOpen, windowEnd and nextWindowStart.
func (p *plan) windowState(now time.Time) {
	windows, err := ParseWindows(p.gfa.Spec.UpdatePolicy)
	p.werr = err
	if err == nil {
		p.window = windows.State(now)
	}
	p.st.ResizeWindowOpen = err == nil && p.window.Open
	if !p.window.End.IsZero() {
		p.st.WindowEnd = secs(p.window.End)
	}
	if !p.window.NextStart.IsZero() {
		p.st.NextWindowStart = secs(p.window.NextStart)
	}
}

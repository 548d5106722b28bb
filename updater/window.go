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
// parse (or uses @every, TZ= or CRON_TZ=), a duration that is not positive, or a time zone
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
	if w.Duration.Duration <= 0 {
		return nil, fmt.Errorf("window %q: duration %v is not positive", w.Schedule, w.Duration.Duration)
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
// changes. A wall-clock time that does not exist (the hour skipped when clocks go
// forward) has no start that day, as with robfig/cron and Kubernetes CronJobs. A
// wall-clock time that happens twice (the hour repeated when clocks go back) starts a
// window only the first time: robfig/cron would start one at both.
func (w *Window) next(t time.Time) time.Time {
	n := w.schedule.Next(t.In(w.loc))
	for i := 0; !n.IsZero() && i < 4 && repeatedWallClock(n); i++ {
		n = w.schedule.Next(n)
	}
	if n.IsZero() {
		return n
	}
	return n.In(t.Location())
}

// repeatedWallClock reports whether the wall-clock reading of t (in its location)
// already happened up to two hours earlier (a repeated hour after a daylight-saving
// change).
func repeatedWallClock(t time.Time) bool {
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := t.Add(-back)
		if e.Hour() == t.Hour() && e.Minute() == t.Minute() && e.Day() == t.Day() {
			return true
		}
	}
	return false
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
	// Start is when the open window opened (the earliest start, among the open windows,
	// whose activation covers the evaluation time); zero when none is open or there are
	// no windows. Hysteresis allows one round of replacements per Start.
	Start time.Time
	// NextStart is the first start of a window after End when open, after the
	// evaluation time otherwise; zero without windows.
	NextStart time.Time
	// Unrestricted is true when there are no windows.
	Unrestricted bool
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
	}
	for _, w := range ws {
		if n := w.next(from); !n.IsZero() && (st.NextStart.IsZero() || n.Before(st.NextStart)) {
			st.NextStart = n
		}
	}
	return st
}

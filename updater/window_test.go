package updater

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func mustWindows(t *testing.T, ws ...gpufracv1.ResizeWindow) Windows {
	t.Helper()
	out, err := ParseWindows(&gpufracv1.UpdatePolicy{ResizeWindows: ws})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func win(schedule string, d time.Duration, tz string) gpufracv1.ResizeWindow {
	return gpufracv1.ResizeWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWindowState(t *testing.T) {
	for _, tc := range []struct {
		name      string
		windows   []gpufracv1.ResizeWindow
		now       string
		open      bool
		end, next string // RFC 3339 UTC; "" = zero
	}{
		{name: "no windows: any time", now: "2026-03-01T12:00:00Z", open: true},
		{name: "daily 02:00 UTC for 2h, inside", windows: []gpufracv1.ResizeWindow{win("0 2 * * *", 2*time.Hour, "")},
			now: "2026-03-01T03:30:00Z", open: true, end: "2026-03-01T04:00:00Z", next: "2026-03-02T02:00:00Z"},
		{name: "start instant is inside", windows: []gpufracv1.ResizeWindow{win("0 2 * * *", 2*time.Hour, "")},
			now: "2026-03-01T02:00:00Z", open: true, end: "2026-03-01T04:00:00Z", next: "2026-03-02T02:00:00Z"},
		{name: "end instant is outside", windows: []gpufracv1.ResizeWindow{win("0 2 * * *", 2*time.Hour, "")},
			now: "2026-03-01T04:00:00Z", open: false, next: "2026-03-02T02:00:00Z"},
		{name: "before the window", windows: []gpufracv1.ResizeWindow{win("0 2 * * *", 2*time.Hour, "")},
			now: "2026-03-01T01:59:59Z", open: false, next: "2026-03-01T02:00:00Z"},
		{name: "window across midnight", windows: []gpufracv1.ResizeWindow{win("0 23 * * *", 3*time.Hour, "")},
			now: "2026-03-02T01:00:00Z", open: true, end: "2026-03-02T02:00:00Z", next: "2026-03-02T23:00:00Z"},
		{name: "Berlin 02:00 local in winter is 01:00 UTC", windows: []gpufracv1.ResizeWindow{win("0 2 * * *", time.Hour, "Europe/Berlin")},
			now: "2026-01-15T01:30:00Z", open: true, end: "2026-01-15T02:00:00Z", next: "2026-01-16T01:00:00Z"},
		{name: "Berlin 02:00 local in summer is 00:00 UTC", windows: []gpufracv1.ResizeWindow{win("0 2 * * *", time.Hour, "Europe/Berlin")},
			now: "2026-07-15T00:30:00Z", open: true, end: "2026-07-15T01:00:00Z", next: "2026-07-16T00:00:00Z"},
		{name: "Tokyo weekdays 01:00 (UTC+9, previous UTC day)", windows: []gpufracv1.ResizeWindow{win("0 1 * * 1-5", 30*time.Minute, "Asia/Tokyo")},
			// Friday 2026-03-06 01:00 JST = Thursday 16:00 UTC; the next is Monday 01:00 JST = Sunday 16:00 UTC.
			now: "2026-03-05T16:10:00Z", open: true, end: "2026-03-05T16:30:00Z", next: "2026-03-08T16:00:00Z"},
		{name: "New York 22:00 local, evaluated as the next UTC day", windows: []gpufracv1.ResizeWindow{win("0 22 * * *", 4*time.Hour, "America/New_York")},
			// 22:00 EST = 03:00 UTC next day.
			now: "2026-01-10T05:00:00Z", open: true, end: "2026-01-10T07:00:00Z", next: "2026-01-11T03:00:00Z"},
		{name: "two windows: the earlier next start wins", windows: []gpufracv1.ResizeWindow{win("0 4 * * *", time.Hour, ""), win("0 1 * * *", time.Hour, "")},
			now: "2026-03-01T00:00:00Z", open: false, next: "2026-03-01T01:00:00Z"},
		{name: "two overlapping windows merge", windows: []gpufracv1.ResizeWindow{win("0 1 * * *", 2*time.Hour, ""), win("0 2 * * *", 2*time.Hour, "")},
			now: "2026-03-01T01:30:00Z", open: true, end: "2026-03-01T04:00:00Z", next: "2026-03-02T01:00:00Z"},
		{name: "every minute for 2m: always open", windows: []gpufracv1.ResizeWindow{win("* * * * *", 2*time.Minute, "")},
			now: "2026-03-01T00:00:30Z", open: true},
		{name: "descriptor @daily", windows: []gpufracv1.ResizeWindow{win("@daily", time.Hour, "")},
			now: "2026-03-01T00:59:00Z", open: true, end: "2026-03-01T01:00:00Z", next: "2026-03-02T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := mustWindows(t, tc.windows...)
			st := ws.State(at(t, tc.now))
			if st.Open != tc.open {
				t.Fatalf("open = %v, want %v (state %+v)", st.Open, tc.open, st)
			}
			if tc.name == "every minute for 2m: always open" {
				if st.End.Sub(at(t, tc.now)) < time.Hour {
					t.Errorf("end %v: the overlapping starts should extend the window far ahead", st.End)
				}
				return
			}
			check := func(what string, got time.Time, want string) {
				t.Helper()
				if want == "" {
					if !got.IsZero() {
						t.Errorf("%s = %v, want none", what, got)
					}
					return
				}
				if !got.Equal(at(t, want)) {
					t.Errorf("%s = %v, want %s", what, got.UTC(), want)
				}
			}
			check("end", st.End, tc.end)
			check("next start", st.NextStart, tc.next)
		})
	}
}

// Daylight-saving changes: starts follow the wall clock of the window's time zone.
func TestWindowDaylightSaving(t *testing.T) {
	berlin := mustWindows(t, win("0 3 * * *", time.Hour, "Europe/Berlin"))
	// Spring forward in Berlin: 2026-03-29 02:00 CET → 03:00 CEST. 03:00 CEST = 01:00 UTC
	// (the day before it was 03:00 CET = 02:00 UTC).
	if st := berlin.State(at(t, "2026-03-28T02:30:00Z")); !st.Open || !st.End.Equal(at(t, "2026-03-28T03:00:00Z")) {
		t.Errorf("day before spring forward: %+v", st)
	}
	if st := berlin.State(at(t, "2026-03-28T03:30:00Z")); st.Open || !st.NextStart.Equal(at(t, "2026-03-29T01:00:00Z")) {
		t.Errorf("next start across spring forward = %v, want 01:00 UTC (03:00 CEST)", st.NextStart.UTC())
	}
	if st := berlin.State(at(t, "2026-03-29T01:30:00Z")); !st.Open || !st.End.Equal(at(t, "2026-03-29T02:00:00Z")) {
		t.Errorf("spring forward day: %+v", st)
	}
	// Fall back: 2026-10-25 03:00 CEST → 02:00 CET. 03:00 CET = 02:00 UTC.
	if st := berlin.State(at(t, "2026-10-24T02:00:00Z")); st.Open || !st.NextStart.Equal(at(t, "2026-10-25T02:00:00Z")) {
		t.Errorf("next start across fall back = %v, want 02:00 UTC (03:00 CET)", st.NextStart.UTC())
	}
	// A window whose duration spans the change lasts its duration in real time.
	long := mustWindows(t, win("0 1 * * *", 3*time.Hour, "Europe/Berlin"))
	// 2026-03-29 01:00 CET = 00:00 UTC; 3h later is 03:00 UTC (05:00 CEST).
	if st := long.State(at(t, "2026-03-29T02:59:00Z")); !st.Open || !st.End.Equal(at(t, "2026-03-29T03:00:00Z")) {
		t.Errorf("window spanning spring forward: %+v", st)
	}

	// A start inside the skipped hour (02:30 does not exist on 2026-03-08 in New York).
	ny := mustWindows(t, win("30 2 * * *", time.Hour, "America/New_York"))
	st := ny.State(at(t, "2026-03-08T05:00:00Z")) // 00:00 EST
	// As ISC cron does, the start happens right after the jump: 03:00 EDT (07:00 UTC).
	if !st.NextStart.Equal(at(t, "2026-03-08T07:00:00Z")) {
		t.Errorf("next start %v (%v local), want 2026-03-08 03:00 EDT, right after the jump", st.NextStart.UTC(), st.NextStart.In(ny[0].loc))
	}
	// A start inside the repeated hour (01:30 happens twice on 2026-11-01 in New York):
	// at most one window per day.
	rep := mustWindows(t, win("30 1 * * *", 20*time.Minute, "America/New_York"))
	first := rep.State(at(t, "2026-11-01T04:00:00Z")).NextStart // 00:00 EDT
	second := rep.State(first.Add(30 * time.Minute)).NextStart
	if !first.Equal(at(t, "2026-11-01T05:30:00Z")) {
		t.Errorf("first start = %v, want 05:30 UTC (01:30 EDT)", first.UTC())
	}
	if !second.Equal(at(t, "2026-11-02T06:30:00Z")) {
		t.Errorf("second start %v, want the next day's 01:30 EST: the repeated hour must not open the window twice", second.UTC())
	}
	// An hourly window: the repeated 01:30 is skipped, 02:30 EST follows 01:30 EDT.
	hourly := mustWindows(t, win("30 * * * *", 10*time.Minute, "America/New_York"))
	if n := hourly.State(at(t, "2026-11-01T05:35:00Z")).NextStart; !n.Equal(at(t, "2026-11-01T07:30:00Z")) {
		t.Errorf("hourly next start after 01:30 EDT = %v, want 07:30 UTC (02:30 EST)", n.UTC())
	}
}

func TestParseWindowErrors(t *testing.T) {
	for _, w := range []gpufracv1.ResizeWindow{
		win("", time.Hour, ""),
		win("0 25 * * *", time.Hour, ""),
		win("0 2 30 2 *", time.Hour, ""), // February 30: never opens
		win("@every 1h", time.Hour, ""),
		win("CRON_TZ=UTC 0 2 * * *", time.Hour, ""),
		win("0 2 * * *", 0, ""),
		win("0 2 * * *", 30*time.Second, ""), // can open and close between two cycles
		win("0 2 * * *", time.Hour, "Europe/Atlantis"),
		win("0 2 * * *", time.Hour, "Local"),
	} {
		if _, err := ParseWindow(w); err == nil {
			t.Errorf("%+v: accepted", w)
		}
	}
	if ws, err := ParseWindows(nil); err != nil || !ws.State(time.Now()).Unrestricted {
		t.Errorf("nil policy: %v %v", ws, err)
	}
}

// starts lists the window starts in [from, to).
func starts(w *Window, from, to time.Time) []time.Time {
	var out []time.Time
	for s := w.next(from.Add(-time.Nanosecond)); !s.IsZero() && s.Before(to); s = w.next(s) {
		out = append(out, s.UTC())
	}
	return out
}

// Spring forward: a daily start inside the skipped hour opens the window once, right
// after the jump (ISC cron); robfig/cron alone never opens it that day. Autumn: a start
// inside the repeated hour opens it exactly once, the first time.
func TestWindowDaylightSavingGapAndRepeat(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day := func(y int, m time.Month, d int) (time.Time, time.Time) {
		return time.Date(y, m, d, 0, 0, 0, 0, berlin), time.Date(y, m, d+1, 0, 0, 0, 0, berlin)
	}
	for _, tc := range []struct {
		name, schedule string
		span           func() (time.Time, time.Time)
		want           []string
	}{
		// 2026-03-29: 02:00 CET → 03:00 CEST at 01:00 UTC.
		{"spring 02:00", "0 2 * * *", func() (time.Time, time.Time) { return day(2026, 3, 29) }, []string{"2026-03-29T01:00:00Z"}},
		{"spring 02:30", "30 2 * * *", func() (time.Time, time.Time) { return day(2026, 3, 29) }, []string{"2026-03-29T01:00:00Z"}},
		{"spring several in the gap and at its end", "0,15,30,45 2,3 * * *", func() (time.Time, time.Time) { return day(2026, 3, 29) },
			[]string{"2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z", "2026-03-29T01:30:00Z", "2026-03-29T01:45:00Z"}},
		{"day before spring", "0 2 * * *", func() (time.Time, time.Time) { return day(2026, 3, 28) }, []string{"2026-03-28T01:00:00Z"}},
		{"day after spring", "0 2 * * *", func() (time.Time, time.Time) { return day(2026, 3, 30) }, []string{"2026-03-30T00:00:00Z"}},
		// 2026-10-25: 03:00 CEST → 02:00 CET at 01:00 UTC; 02:00–02:59 happens twice.
		{"autumn 02:00", "0 2 * * *", func() (time.Time, time.Time) { return day(2026, 10, 25) }, []string{"2026-10-25T00:00:00Z"}},
		{"autumn 02:30", "30 2 * * *", func() (time.Time, time.Time) { return day(2026, 10, 25) }, []string{"2026-10-25T00:30:00Z"}},
		{"autumn hourly", "0 * * * *", func() (time.Time, time.Time) { return day(2026, 10, 25) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := mustWindows(t, win(tc.schedule, 30*time.Minute, "Europe/Berlin"))[0]
			from, to := tc.span()
			got := starts(w, from, to)
			if tc.want == nil {
				// Hourly on the 25-hour autumn day: 24 distinct wall-clock hours, each once.
				if len(got) != 24 {
					t.Errorf("%d starts on the autumn day, want 24 (the repeated 02:00 once): %v", len(got), got)
				}
				return
			}
			var want []time.Time
			for _, s := range tc.want {
				want = append(want, at(t, s))
			}
			if len(got) != len(want) {
				t.Fatalf("starts %v, want %v", got, want)
			}
			for i := range got {
				if !got[i].Equal(want[i]) {
					t.Errorf("start %d = %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
	// The state on the spring day: open right after the jump, for its duration.
	ws := mustWindows(t, win("0 2 * * *", time.Hour, "Europe/Berlin"))
	if st := ws.State(at(t, "2026-03-29T00:30:00Z")); st.Open || !st.NextStart.Equal(at(t, "2026-03-29T01:00:00Z")) {
		t.Errorf("before the jump: %+v, want closed and opening at 01:00 UTC", st)
	}
	if st := ws.State(at(t, "2026-03-29T01:30:00Z")); !st.Open || !st.Start.Equal(at(t, "2026-03-29T01:00:00Z")) || !st.End.Equal(at(t, "2026-03-29T02:00:00Z")) {
		t.Errorf("after the jump: %+v, want open 01:00–02:00 UTC", st)
	}
}

// Every start of a window on and around each daylight-saving change of 2026 in zones
// with a 30-minute shift (Lord Howe), a 45-minute offset (Chatham), the southern
// hemisphere (Sydney) and a change at midnight (Santiago) is the one ISC cron makes:
// the first real instant at which the zone's wall clock reaches a scheduled time it
// has not reached before (a start in a gap right after the jump, several in one gap
// once, one in a repeated interval only the first time).
func TestWindowStartsMatchISCCronAcrossZones(t *testing.T) {
	zones := []string{"Australia/Lord_Howe", "Pacific/Chatham", "Australia/Sydney", "America/Santiago"}
	scheds := []string{"*/15 * * * *", "30 2 * * *", "0 0 * * *"}
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		// the days of 2026 whose offset changes
		var days []time.Time
		for d := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC); d.Year() == 2026; d = d.Add(24 * time.Hour) {
			_, o1 := d.Add(-36 * time.Hour).In(loc).Zone()
			_, o2 := d.Add(36 * time.Hour).In(loc).Zone()
			if o1 != o2 {
				days = append(days, d)
			}
		}
		for _, s := range scheds {
			w := mustWindows(t, win(s, 30*time.Minute, z))[0]
			for _, d := range days {
				from, to := d.Add(-24*time.Hour), d.Add(24*time.Hour)
				// the oracle: minute by minute, the scheduled wall-clock times passed
				var want []time.Time
				prevMax := wallClock(from.Add(-time.Minute), loc)
				for m := from; m.Before(to); m = m.Add(time.Minute) {
					wc := wallClock(m, loc)
					if wc.After(prevMax) {
						// scheduled wall times in (prevMax, wc]
						n := w.schedule.Next(prevMax)
						if !n.After(wc) {
							want = append(want, m)
						}
						prevMax = wc
					}
				}
				got := starts(w, from, to)
				ok := len(got) == len(want)
				for i := 0; ok && i < len(got); i++ {
					ok = got[i].Equal(want[i])
				}
				if !ok {
					t.Errorf("%s %q around %s: starts %v, want %v", z, s, d.Format("2006-01-02"), got, want)
				}
			}
		}
	}
}

// A resize window shorter than --interval (2m windows, cycles every 5m) opened and
// closed between two cycles: the updater, cycling at :03, :08, …, :58, :63, never saw
// it open and never replaced a pod. The cycle after one that leaves out-of-date pods
// waiting for a window runs when that window opens, if that is sooner than --interval.
func TestWindowShorterThanTheInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		schedule string
		duration time.Duration
		interval time.Duration
		offset   time.Duration // of the first cycle past the hour
	}{
		{"2m hourly, 5m cycles", "0 * * * *", 2 * time.Minute, 5 * time.Minute, 3 * time.Minute},
		{"1m hourly, 10m cycles", "30 * * * *", time.Minute, 10 * time.Minute, 35 * time.Minute},
		{"1m daily, 1h cycles", "17 4 * * *", time.Minute, time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			f.gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{win(tc.schedule, tc.duration, "UTC")}
			f.cfg.Interval = tc.interval
			f.build()
			now := time.Now().UTC().Truncate(24 * time.Hour).Add(tc.offset)
			f.u.Now = func() time.Time { return now }
			f.u.started = now.Add(-time.Hour) // warmed up
			for end := now.Add(26 * time.Hour); now.Before(end) && len(f.livePods()) == 3; {
				f.run()
				next := f.u.nextCycle(now)
				if !next.After(now) || next.Sub(now) > tc.interval {
					t.Fatalf("next cycle %v after %v: want within --interval %v", next, now, tc.interval)
				}
				now = next
			}
			if len(f.livePods()) == 3 {
				t.Fatalf("no pod replaced in 26h of %v cycles with a %v window (%s)", tc.interval, tc.duration, tc.schedule)
			}
		})
	}
}

package recommender

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// recordHistory records the source's gpufrac-history rules (metrics.HistoryRules) over
// [from, to] at phase 0 (every whole minute), as Prometheus evaluating the group would:
// the minute rules first, then the hourly ones, which read them. skip reports the
// minute evaluations that were missed (nil: none).
func recordHistory(t *testing.T, prom *promtest.Server, src metrics.Source, from, to time.Time, skip func(time.Time) bool) {
	t.Helper()
	for _, hourly := range []bool{false, true} {
		for _, r := range metrics.HistoryRules() {
			switch {
			case !hourly && r.Source == src.Name():
				prom.Record(t, r.Record, map[string]string{metrics.HistorySourceLabel: r.Source}, r.Expr, from, to, metrics.HistoryRuleInterval, skip)
			case hourly && r.Source == "":
				prom.Record(t, r.Record, nil, r.Expr, from, to, metrics.HistoryRuleInterval, nil)
			}
		}
	}
}

// A history load that reads the hourly memory from the gpufrac-history recordings builds
// the same model (history.Model, every container's histograms and counts) as one that
// reads the raw series: where the recordings hold every hour; where the rules were
// loaded part way through the history (the hours before, and the hour they were loaded
// in, are read raw); and where one minute evaluation was missed in an hour whose peak
// lay in that minute (the hour's recording is lower than the raw peak: it must be read
// raw, never used). Two pods over 12 hours of 30 s samples: one with a memory that moves
// every sample, one that stays flat and idle for three hours (stale, dropped by both).
// The loads are split into slices of about two hours, so the load's first hour (read
// raw) and hours read from recordings meet across slices.
func TestHistoryFromRecordingsEqualsRaw(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	start := now.Add(-13 * time.Hour).Truncate(time.Minute)
	spike := time.Date(2026, 11, 30, 8, 29, 30, 0, time.UTC) // in the minute recorded at 08:30
	cases := []struct {
		name string
		from time.Time // first minute evaluation recorded
		skip func(time.Time) bool
	}{
		{"every hour recorded", start, nil},
		{"rules loaded at 05:20", time.Date(2026, 11, 30, 5, 20, 0, 0, time.UTC), nil},
		{"evaluation of 08:30 missed", start, func(at time.Time) bool { return at.Equal(spike.Add(30 * time.Second)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := singlePodWorkloads("ml", "moving", "stale")
			prom := promtest.New(t)
			pods := podsOf(objs)
			n := int(now.Sub(start)/(30*time.Second)) + 1
			mem, sm := make([]float64, n), make([]float64, n)
			for i := range mem {
				mem[i], sm[i] = float64(1000+(i*37)%500), 0.3+float64(i%7)/20
				if start.Add(time.Duration(i) * 30 * time.Second).Equal(spike) {
					mem[i] = 9000
				}
			}
			prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[0], "GPU-1"), start, 30*time.Second, mem...)
			prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[0], "GPU-1"), start, 30*time.Second, sm...)
			flat, idle := make([]float64, n), make([]float64, n)
			for i := range flat {
				at := start.Add(time.Duration(i) * 30 * time.Second)
				flat[i], idle[i] = float64(2000+i%3), 0.5
				if at.Hour() >= 3 && at.Hour() < 6 {
					flat[i], idle[i] = 2500, 0
				}
			}
			prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pods[1], "GPU-2"), start, 30*time.Second, flat...)
			prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pods[1], "GPU-2"), start, 30*time.Second, idle...)
			recordHistory(t, prom, metrics.DCGM{}, c.from, now, c.skip)

			models := map[bool]*Recommender{}
			for _, recorded := range []bool{false, true} {
				h := newEngineHarness(t, objs, nil)
				cfg := Config{HistoryLength: 12 * time.Hour, HistorySliceSamples: 300, HistoryFromRecordings: recorded}
				r := New(h.c, &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{}, cfg)
				r.Now = func() time.Time { return now }
				before := len(prom.Queries())
				if err := r.RunOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
				read := strings.Join(prom.Queries()[before:], "\n")
				if got := strings.Contains(read, metrics.HistoryMemoryMax1h); got != recorded {
					t.Errorf("recorded=%v: the load read %s: %v", recorded, metrics.HistoryMemoryMax1h, got)
				}
				models[recorded] = r
			}
			for _, name := range []string{"moving", "stale"} {
				k := containerKey("ml", name, "main")
				raw, rec := models[false].model.Container(k), models[true].model.Container(k)
				if raw == nil || raw.MemoryPeaks < 11 {
					t.Fatalf("%s: raw model %+v, want 11 hours and more of memory peaks", name, raw)
				}
				if rec == nil || !reflect.DeepEqual(*raw, *rec) {
					t.Errorf("%s: the model from the recordings differs from the raw one:\nraw      %+v\nrecorded %+v", name, raw, rec)
				}
			}
			if p, ok := models[false].model.Container(containerKey("ml", "moving", "main")).RecentPeak(now); !ok || p != 9000*metrics.MiB {
				t.Errorf("recent peak %.0f MiB, want the 9000 MiB spike", p/metrics.MiB)
			}
		})
	}
}

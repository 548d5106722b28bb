package metrics_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// The reads of the recordings stand for the raw reads at the recordings' phase. Rules
// evaluated 20 s past each minute over 4 hours of dcgm-exporter samples every 15 s (one
// pod whose memory moves, with blank sentinels the rules and the robust read both drop;
// one flat): RecordingPhase learns the 20 s; at H + 20 s the recorded peaks equal the
// robust raw read of (H − 1h + 20 s, H + 20 s], series for series, and the recorded
// spread is 0 exactly where the raw standard deviation is; RecordedHours holds the whole
// hours, not the hour with a missed minute evaluation nor the hour the rules were loaded
// in.
func TestRecordedReadsEqualRawAtThePhase(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	const phase = 20 * time.Second
	prom := promtest.New(t)
	src := metrics.DCGM{}
	r := &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels, Device: src.DeviceLabels()}
	sel := metrics.Selector{Labels: metrics.DefaultLabels, Namespaces: []string{"ml"}, Device: src.DeviceLabels()}
	n := 4*240 + 1
	moving, flat := make([]float64, n), promtest.Repeat(3000, n)
	for i := range moving {
		moving[i] = float64(1000 + (i*53)%900)
		if i%97 == 0 {
			moving[i] = 9223372036854775794 // DCGM blank sentinel
		}
	}
	lbl := func(pod string) map[string]string {
		return map[string]string{"__name__": metrics.DCGMFBUsed, "namespace": "ml", "pod": pod, "container": "main", "UUID": "GPU-" + pod}
	}
	prom.Add(t, lbl("moving"), t0, 15*time.Second, moving...)
	prom.Add(t, lbl("flat"), t0, 15*time.Second, flat...)
	// Loaded at 00:10:20; the evaluation of 02:30:20 missed.
	missed := t0.Add(150*time.Minute + phase)
	from, end := t0.Add(10*time.Minute+phase), t0.Add(4*time.Hour+phase)
	for _, hourly := range []bool{false, true} {
		for _, rule := range metrics.HistoryRules() {
			if hourly != (rule.Source == "") || (!hourly && rule.Source != src.Name()) {
				continue
			}
			var lbls map[string]string
			if !hourly {
				lbls = map[string]string{metrics.HistorySourceLabel: rule.Source}
			}
			prom.Record(t, rule.Record, lbls, rule.Expr, from, end, metrics.HistoryRuleInterval, func(at time.Time) bool { return !hourly && at.Equal(missed) })
		}
	}

	ctx := context.Background()
	got, ok, err := r.RecordingPhase(ctx, src, t0.Add(4*time.Hour+time.Minute))
	if err != nil || !ok || got != phase {
		t.Fatalf("RecordingPhase %s, %v, %v; want %s", got, ok, err, phase)
	}
	first, last := t0.Add(time.Hour+phase), t0.Add(4*time.Hour+phase)
	whole, err := r.RecordedHours(ctx, src, first, last)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]bool{t0.Add(2*time.Hour + phase).UnixMilli(): true, t0.Add(4*time.Hour + phase).UnixMilli(): true}
	if !reflect.DeepEqual(whole, want) {
		t.Errorf("whole hours %v, want 02:00:20 and 04:00:20 only (%v)", whole, want)
	}

	// Each read, at the whole hours only.
	read := func(q string) []metrics.Series {
		s, err := r.Range(ctx, metrics.SignalMemory, q, first, last, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for i := range s {
			var kept []metrics.Sample
			for _, p := range s[i].Samples {
				if whole[p.Time.UnixMilli()] {
					kept = append(kept, p)
				}
			}
			s[i].Samples = kept
		}
		return s
	}
	rawPeaks, recPeaks := read(src.MemoryPeakQuery(sel, time.Hour)), read(metrics.RecordedPeakQuery(src, sel))
	if len(rawPeaks) != 2 || len(rawPeaks[0].Samples) != 2 || !reflect.DeepEqual(rawPeaks, recPeaks) {
		t.Errorf("recorded peaks differ from the raw read at the phase:\nraw      %+v\nrecorded %+v", rawPeaks, recPeaks)
	}
	zero := func(series []metrics.Series) map[string][]bool {
		out := map[string][]bool{}
		for _, s := range series {
			for _, p := range s.Samples {
				out[s.ID.Pod] = append(out[s.ID.Pod], p.Value == 0)
			}
		}
		return out
	}
	rawFlat, recFlat := zero(read(metrics.FlatQuery(src, sel, time.Hour))), zero(read(metrics.RecordedFlatQuery(src, sel)))
	if !reflect.DeepEqual(rawFlat, recFlat) || !reflect.DeepEqual(rawFlat["flat"], []bool{true, true}) || !reflect.DeepEqual(rawFlat["moving"], []bool{false, false}) {
		t.Errorf("flat hours: raw %v, recorded %v; want the flat pod's 2 hours only", rawFlat, recFlat)
	}
}

package recommender

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// Issue 17: containerCompute.activity looks only at the samples that can count where a
// series is in time order (binary search, then stops past the window); it must answer
// what the scan of every sample answers, at every window and edge, and a series out of
// order is still scanned whole.
func TestActivityOrderedEqualsScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	id := metrics.ContainerID{Namespace: "ml", Pod: "a", Container: "main"}
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for trial := range 200 {
		var samples []metrics.Sample
		at := t0
		for range rng.IntN(200) {
			at = at.Add(time.Duration(1+rng.IntN(3)) * 30 * time.Second) // 30 s to 90 s apart
			v := 0.0
			if rng.IntN(3) == 0 {
				v = rng.Float64()
			}
			samples = append(samples, metrics.Sample{Time: at, Value: v})
		}
		window := []time.Duration{0, time.Minute, 2 * time.Minute}[trial%3]
		s := metrics.Series{ID: id, Window: window, Samples: samples}
		ordered, scanned := containerCompute{}, containerCompute{id: {{s, false}}}
		ordered.add(s)
		if len(samples) > 1 && !ordered[id][0].ordered {
			t.Fatal("decoded-like series not taken as in time order")
		}
		for range 50 {
			from := t0.Add(time.Duration(rng.IntN(240)) * 30 * time.Second)
			to := from.Add(time.Duration(rng.IntN(130)) * 30 * time.Second)
			n, busy, ran := ordered.activity(id, from, to)
			wn, wbusy, wran := scanned.activity(id, from, to)
			if n != wn || busy != wbusy || ran != wran {
				t.Fatalf("trial %d, window %s, (%s, %s]: ordered %d %v %v, scan %d %v %v", trial, window,
					from.Format(time.TimeOnly), to.Format(time.TimeOnly), n, busy, ran, wn, wbusy, wran)
			}
		}
	}
	// Out of order: not taken as ordered, every sample looked at.
	late := metrics.Series{ID: id, Window: time.Minute, Samples: []metrics.Sample{
		{Time: t0.Add(10 * time.Minute), Value: 0.5}, {Time: t0.Add(time.Minute), Value: 0}, {Time: t0.Add(20 * time.Minute), Value: 0}}}
	cpu := containerCompute{}
	cpu.add(late)
	if cpu[id][0].ordered {
		t.Fatal("series out of time order taken as ordered")
	}
	if n, busy, ran := cpu.activity(id, t0, t0.Add(15*time.Minute)); n != 2 || !busy || !ran {
		t.Errorf("out of order: %d %v %v, want 2 true true", n, busy, ran)
	}
}

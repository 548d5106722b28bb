package estimate

import (
	"math"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

const gib = float64(1 << 30)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// feed adds per-minute samples of one pod from start for d: memory bytes and compute ratio.
func feed(m *history.Model, w history.WorkloadKey, pod string, start time.Time, d time.Duration, mem, cpu float64) {
	var ms, cs metrics.Series
	ms.ID = metrics.ContainerID{Namespace: w.Namespace, Pod: pod, Container: "main"}
	cs.ID = ms.ID
	for t := start; t.Before(start.Add(d)); t = t.Add(time.Minute) {
		ms.Samples = append(ms.Samples, metrics.Sample{Time: t, Value: mem})
		cs.Samples = append(cs.Samples, metrics.Sample{Time: t, Value: cpu})
	}
	m.Add(w, metrics.SignalMemory, ms)
	m.Add(w, metrics.SignalCompute, cs)
}

func TestEstimate(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	key := history.ContainerKey{WorkloadKey: w, Container: "main"}
	bucketMem := func(v float64) float64 { // end of v's memory bucket
		return history.MemoryBuckets.GetBucketStart(history.MemoryBuckets.FindBucket(v) + 1)
	}
	tests := []struct {
		name   string
		setup  func(m *history.Model)
		now    time.Time
		ok     bool
		mem    float64 // expected memory target, bytes (0: not checked)
		cpu    float64 // expected compute target
		conf   float64
		within float64 // relative tolerance
	}{
		{name: "empty history", setup: func(*history.Model) {}, now: t0, ok: false},
		{
			name:  "one sample",
			setup: func(m *history.Model) { feed(m, w, "p1", t0, time.Minute, 10*gib, 0.2) },
			now:   t0.Add(time.Minute), ok: true,
			mem: bucketMem(10*gib) * 1.15, cpu: 0.21 * 1.15, conf: 1.0 / 1440, within: 1e-9,
		},
		{
			name:  "long steady history reaches full confidence",
			setup: func(m *history.Model) { feed(m, w, "p1", t0, 48*time.Hour, 20*gib, 0.3) },
			now:   t0.Add(48 * time.Hour), ok: true,
			mem: bucketMem(20*gib) * 1.15, cpu: 0.31 * 1.15, conf: 1, within: 1e-9,
		},
		{
			// The old pod's peaks are older than the peak window (7 days) and decayed.
			name: "old peaks decay away, recent peak still counts",
			setup: func(m *history.Model) {
				feed(m, w, "old", t0, 24*time.Hour, 40*gib, 0.5)
				feed(m, w, "new", t0.Add(8*24*time.Hour), 24*time.Hour, 10*gib, 0.1)
			},
			now: t0.Add(9 * 24 * time.Hour), ok: true,
			mem: bucketMem(10*gib) * 1.15, cpu: 0.11 * 1.15, within: 1e-9, conf: 1,
		},
		{
			name: "a recent spike above p90 lifts memory to the spike plus headroom",
			setup: func(m *history.Model) {
				feed(m, w, "p1", t0, 47*time.Hour, 10*gib, 0.1)
				feed(m, w, "p1", t0.Add(47*time.Hour), time.Minute, 30*gib, 0.1)
			},
			now: t0.Add(48 * time.Hour), ok: true,
			mem: 30 * gib * 1.15, within: 1e-9, conf: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := history.NewModel(history.Options{})
			tc.setup(m)
			e, ok := Config{}.Estimate(m.Container(key), DefaultMemoryHeadroom, tc.now)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			check := func(what string, got, want float64) {
				if want != 0 && math.Abs(got-want) > tc.within*want+1e-9 {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("memory target", e.Target.MemoryBytes, tc.mem)
			check("compute target", e.Target.Compute, tc.cpu)
			check("confidence", e.Confidence, tc.conf)
			if e.LowerBound.MemoryBytes > e.Target.MemoryBytes || e.UpperBound.MemoryBytes < e.Target.MemoryBytes ||
				e.LowerBound.Compute > e.Target.Compute || e.UpperBound.Compute < e.Target.Compute {
				t.Errorf("bounds not ordered: %+v", e)
			}
			if peak, _ := m.Container(key).RecentPeak(tc.now); e.Target.MemoryBytes < peak*1.15-1 {
				t.Errorf("memory target %v below recent peak %v plus headroom", e.Target.MemoryBytes, peak)
			}
		})
	}
}

func TestBoundsWidenWithLowConfidence(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	key := history.ContainerKey{WorkloadKey: w, Container: "main"}
	short, long := history.NewModel(history.Options{}), history.NewModel(history.Options{})
	feed(short, w, "p", t0, 2*time.Hour, 10*gib, 0.2)
	feed(long, w, "p", t0, 72*time.Hour, 10*gib, 0.2)
	es, _ := Config{}.Estimate(short.Container(key), 0.15, t0.Add(2*time.Hour))
	el, _ := Config{}.Estimate(long.Container(key), 0.15, t0.Add(72*time.Hour))
	if es.UpperBound.MemoryBytes <= el.UpperBound.MemoryBytes {
		t.Errorf("upper bound with 2h history %v should exceed that with 72h %v", es.UpperBound.MemoryBytes, el.UpperBound.MemoryBytes)
	}
	if es.LowerBound.MemoryBytes >= el.LowerBound.MemoryBytes {
		t.Errorf("lower bound with 2h history %v should be under that with 72h %v", es.LowerBound.MemoryBytes, el.LowerBound.MemoryBytes)
	}
	if es.Confidence >= 0.5 || el.Confidence != 1 {
		t.Errorf("confidence short=%v long=%v", es.Confidence, el.Confidence)
	}
}

func TestGapsLowerConfidence(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	key := history.ContainerKey{WorkloadKey: w, Container: "main"}
	m := history.NewModel(history.Options{})
	feed(m, w, "p", t0, 3*time.Hour, 10*gib, 0.2)                 // 3h of samples...
	feed(m, w, "p", t0.Add(23*time.Hour), time.Hour, 10*gib, 0.2) // ...and 1h a day later
	e, _ := Config{}.Estimate(m.Container(key), 0.15, t0.Add(24*time.Hour))
	// Memory peaks fill 4 whole hours (5 intervals touched), compute 240 minutes: span ≈ 5h not 24h.
	if e.History > 6*time.Hour || e.History < 4*time.Hour {
		t.Errorf("history = %v, want about 5h (gaps excluded)", e.History)
	}
}

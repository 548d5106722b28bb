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

// TestYoungEvidence checks the young-workload rule: under YoungConfidence, n hours at the
// memory level lift the confidence to min(n/(n+1), YoungConfidence) and widen the memory
// target by 1/n (the upper bound by 2/n); a rising memory keeps n at 1; too little
// history, the rule off, or enough history leave the clock's confidence and no margin.
func TestYoungEvidence(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	key := history.ContainerKey{WorkloadKey: w, Container: "main"}
	base := func(v float64) float64 { // the estimate without the young margin
		return history.MemoryBuckets.GetBucketStart(history.MemoryBuckets.FindBucket(v)+1) * 1.15
	}
	rising := func(m *history.Model) { // 10 % more every hour for 4 hours
		for h := 0; h < 4; h++ {
			feed(m, w, "p1", t0.Add(time.Duration(h)*time.Hour), time.Hour, 10*gib*math.Pow(1.1, float64(h)), 0.2)
		}
	}
	loading := func(m *history.Model) { // a model loading: 10 % more every 5 minutes for 40 minutes
		for i := 0; i < 8; i++ {
			feed(m, w, "p1", t0.Add(time.Duration(i)*5*time.Minute), 5*time.Minute, 10*gib*math.Pow(1.1, float64(i)), 0.2)
		}
	}
	tests := []struct {
		name  string
		young float64
		// minAtLevel is Config.YoungMinAtLevel (0: the default, 15 minutes).
		minAtLevel time.Duration
		setup      func(m *history.Model)
		now        time.Time
		conf       float64
		margin     float64
		n          int
		mem        float64 // memory target, bytes
		upperMem   float64 // memory upper bound, bytes (0: not checked)
	}{
		{name: "3h steady: n=3", young: 0.5, setup: func(m *history.Model) { feed(m, w, "p1", t0, 3*time.Hour, 10*gib, 0.2) },
			now: t0.Add(3 * time.Hour), conf: 0.5, margin: 1.0 / 3, n: 3, mem: base(10*gib) * 4 / 3, upperMem: base(10*gib) * 5 / 3},
		{name: "9h steady under a 0.8 threshold: 9/10 capped at 0.8", young: 0.8, setup: func(m *history.Model) { feed(m, w, "p1", t0, 9*time.Hour, 10*gib, 0.2) },
			now: t0.Add(9 * time.Hour), conf: 0.8, margin: 1.0 / 9, n: 9, mem: base(10*gib) * 10 / 9},
		{name: "3h under a 0.8 threshold: 3/4", young: 0.8, setup: func(m *history.Model) { feed(m, w, "p1", t0, 3*time.Hour, 10*gib, 0.2) },
			now: t0.Add(3 * time.Hour), conf: 0.75, margin: 1.0 / 3, n: 3, mem: base(10*gib) * 4 / 3},
		{name: "rising memory: n stays 1", young: 0.5, setup: rising,
			now: t0.Add(4 * time.Hour), conf: 0.5, margin: 1, n: 1, mem: base(10*gib*math.Pow(1.1, 3)) * 2},
		{name: "under one interval, level held 30 min: n=1", young: 0.5, setup: func(m *history.Model) { feed(m, w, "p1", t0.Add(time.Minute), 30*time.Minute, 10*gib, 0.2) },
			now: t0.Add(31 * time.Minute), conf: 0.5, margin: 1, n: 1, mem: base(10*gib) * 2},
		{name: "under one interval, waiting for a whole one: the clock", young: 0.5, minAtLevel: -1, setup: func(m *history.Model) { feed(m, w, "p1", t0.Add(time.Minute), 30*time.Minute, 10*gib, 0.2) },
			now: t0.Add(31 * time.Minute), conf: 0.5 / 24, mem: base(10 * gib)},
		{name: "under one interval, level held 10 min: the clock", young: 0.5, setup: func(m *history.Model) { feed(m, w, "p1", t0.Add(time.Minute), 10*time.Minute, 10*gib, 0.2) },
			now: t0.Add(11 * time.Minute), conf: (10.0 / 60) / 24, mem: base(10 * gib)},
		{name: "under one interval, level held 30 min with the GPU idle (weights downloading): the clock", young: 0.5, setup: func(m *history.Model) { feed(m, w, "p1", t0.Add(time.Minute), 30*time.Minute, 10*gib, 0) },
			now: t0.Add(31 * time.Minute), conf: 0.5 / 24, mem: base(10 * gib)},
		{name: "under one interval, still loading: the clock", young: 0.5, setup: loading,
			now: t0.Add(40 * time.Minute), conf: (40.0 / 60) / 24, mem: base(10 * gib * math.Pow(1.1, 7))},
		{name: "rule off: the clock", young: -1, setup: func(m *history.Model) { feed(m, w, "p1", t0, 3*time.Hour, 10*gib, 0.2) },
			now: t0.Add(3 * time.Hour), conf: 3.0 / 24, mem: base(10 * gib)},
		{name: "13h: old enough for the clock", young: 0.5, setup: func(m *history.Model) { feed(m, w, "p1", t0, 13*time.Hour, 10*gib, 0.2) },
			now: t0.Add(13 * time.Hour), conf: 13.0 / 24, mem: base(10 * gib)},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			m := history.NewModel(history.Options{})
			c.setup(m)
			e, ok := Config{YoungConfidence: c.young, YoungMinAtLevel: c.minAtLevel}.Estimate(m.Container(key), 0.15, c.now)
			if !ok {
				t.Fatal("no estimate")
			}
			if math.Abs(e.Confidence-c.conf) > 1e-3 || math.Abs(e.YoungMargin-c.margin) > 1e-9 || e.LevelIntervals != c.n {
				t.Errorf("confidence, margin, n = %.4f, %.4f, %d; want %.4f, %.4f, %d", e.Confidence, e.YoungMargin, e.LevelIntervals, c.conf, c.margin, c.n)
			}
			if math.Abs(e.Target.MemoryBytes-c.mem) > 1e-6*c.mem {
				t.Errorf("memory target %.4g GiB, want %.4g GiB", e.Target.MemoryBytes/gib, c.mem/gib)
			}
			if c.upperMem > 0 && math.Abs(e.UpperBound.MemoryBytes-c.upperMem) > 1e-6*c.upperMem {
				t.Errorf("memory upper bound %.4g GiB, want %.4g GiB", e.UpperBound.MemoryBytes/gib, c.upperMem/gib)
			}
		})
	}
}

// TestMemorySpread: with MemorySpreadFactor off (negative) the limit is the target (no
// MemoryLimitBytes), however spiky the history; with a factor, the limit's headroom is the
// spread (the highest per-interval peak over the median one, minus 1, times the factor),
// never below MemoryLimitMinHeadroom (default 0.5; negative: none) nor below the
// headroom that puts the limit at MemoryLimitTypicalFactor × the median per-interval
// peak (default 2; negative: none), where wider than the policy's, capped at
// MaxMemorySpread. The target keeps the policy's headroom either way: the spread is
// burst room, not need.
func TestMemorySpread(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	bucketMem := func(v float64) float64 { // end of v's memory bucket, as Percentile reads it
		return history.MemoryBuckets.GetBucketStart(history.MemoryBuckets.FindBucket(v) + 1)
	}
	median := bucketMem(10 * gib) // the 10 GiB plateau's median per-interval peak
	now := t0.Add(48 * time.Hour)
	for _, tc := range []struct {
		name          string
		spike         float64 // bytes, one minute over a 10 GiB plateau
		factor, limit float64 // limit: MemoryLimitBytes, bytes (0: none)
		floor         float64 // MemoryLimitMinHeadroom (0: the default)
		typical       float64 // MemoryLimitTypicalFactor (0: the default)
	}{
		{"negative is off", 13 * gib, -1, 0, 0, 0},
		{"zero is the default", 13 * gib, 0, 13 * gib * (1 + DefaultMemorySpreadFactor*(13*gib/median-1)), -1, -1},
		{"a spread wider than the headroom is the limit's headroom", 13 * gib, 1, 13 * gib * (13 * gib / median), -1, -1},
		{"the factor scales it", 13 * gib, 1.5, 13 * gib * (1 + 1.5*(13*gib/median-1)), -1, -1},
		{"a spread narrower than the headroom leaves no limit", 11 * gib, 1, 0, -1, -1},
		{"capped", 30 * gib, 1, 30 * gib * (1 + MaxMemorySpread), -1, -1},
		{"the default floor lifts a narrow spread", 11 * gib, 1, 11 * gib * (1 + DefaultMemoryLimitMinHeadroom), 0, -1},
		{"a floor under a wide spread changes nothing", 13 * gib, 1.5, 13 * gib * (1 + 1.5*(13*gib/median-1)), 0.1, -1},
		{"the floor is capped too", 11 * gib, 1, 11 * gib * (1 + MaxMemorySpread), 3, -1},
		{"no floor without a factor", 11 * gib, -1, 0, 0.5, 0},
		{"the default typical factor puts the limit at twice the median peak", 13 * gib, 1, DefaultMemoryLimitTypicalFactor * median, -1, 0},
		{"a typical factor under the floor changes nothing", 13 * gib, 1, 13 * gib * (1 + DefaultMemoryLimitMinHeadroom), 0, 1.2},
		{"the typical factor is capped too", 11 * gib, 1, 11 * gib * (1 + MaxMemorySpread), -1, 4},
		{"a spread wider than the typical factor's is the headroom", 30 * gib, 0.5, 30 * gib * (1 + 0.5*(30*gib/median-1)), -1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := history.NewModel(history.Options{})
			feed(m, w, "p1", t0, 47*time.Hour, 10*gib, 0.1)
			feed(m, w, "p1", t0.Add(47*time.Hour), time.Minute, tc.spike, 0.1)
			c := Config{MemorySpreadFactor: tc.factor, MemoryLimitMinHeadroom: tc.floor, MemoryLimitTypicalFactor: tc.typical}
			e, ok := c.Estimate(m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"}), DefaultMemoryHeadroom, now)
			want := tc.spike * (1 + DefaultMemoryHeadroom)
			if !ok || math.Abs(e.Target.MemoryBytes-want) > 1e-6*want {
				t.Errorf("target %.4g bytes (spread %.3f), want %.4g", e.Target.MemoryBytes, e.MemorySpread, want)
			}
			if math.Abs(e.MemoryLimitBytes-tc.limit) > 1e-6*tc.limit {
				t.Errorf("limit %.4g bytes (spread %.3f), want %.4g", e.MemoryLimitBytes, e.MemorySpread, tc.limit)
			}
			if (tc.factor < 0) != (e.MemorySpread == 0) {
				t.Errorf("spread %v with factor %v", e.MemorySpread, tc.factor)
			}
		})
	}
}

// A workload scaled to zero (or whose exporter is down) for a day, or for most of its
// peak window, reports nothing meanwhile: its estimate stays as at its last sample. It
// read its memory peak window and its contention evidence against the wall clock, so
// the quiet time emptied the window (the target fell from the peak to the p90) and
// decayed the evidence towards the prior (the compute request fell): a shrink from no
// data, written while no pod ran and applied to the pods that came back.
func TestQuietTimeShrinksNothing(t *testing.T) {
	m := history.NewModel(history.Options{})
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	// A rare peak of 20 GiB, then two days at 10 GiB, on a GPU shared with others that
	// saturated in 5 % of the samples.
	feed(m, w, "p1", t0, time.Hour, 20*gib, 0.3)
	feed(m, w, "p1", t0.Add(time.Hour), 48*time.Hour, 10*gib, 0.3)
	st := m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	last := st.LastSample
	for at := t0; !at.After(last); at = at.Add(time.Minute) {
		st.AddDeviceLoad(at, 1, map[bool]int{true: 1}[at.Minute()%20 == 0])
	}
	c := Config{}
	before, ok := c.Estimate(st, DefaultMemoryHeadroom, last)
	if !ok || before.RecentPeakBytes != 20*gib || before.ComputeRequest <= 0 {
		t.Fatalf("at the last sample: recent peak %.1f GiB, compute request %.3f, ok %v; want the 20 GiB peak and a request", before.RecentPeakBytes/gib, before.ComputeRequest, ok)
	}
	for _, quiet := range []time.Duration{24 * time.Hour, 6*24*time.Hour + 12*time.Hour} {
		now := last.Add(quiet)
		m.GC(now, 8*24*time.Hour) // as every cycle does meanwhile
		got, ok := c.Estimate(st, DefaultMemoryHeadroom, now)
		if !ok {
			t.Fatalf("%s without samples: no estimate", quiet)
		}
		if got.Target != before.Target || got.MemoryLimitBytes != before.MemoryLimitBytes || got.ComputeRequest != before.ComputeRequest ||
			got.RecentPeakBytes != before.RecentPeakBytes || got.Confidence != before.Confidence {
			t.Errorf("%s without samples: target %.2f GiB / %.3f, limit %.2f GiB, compute request %.4f, confidence %.2f; want as at the last sample: %.2f GiB / %.3f, %.2f GiB, %.4f, %.2f",
				quiet, got.Target.MemoryBytes/gib, got.Target.Compute, got.MemoryLimitBytes/gib, got.ComputeRequest, got.Confidence,
				before.Target.MemoryBytes/gib, before.Target.Compute, before.MemoryLimitBytes/gib, before.ComputeRequest, before.Confidence)
		}
	}
}

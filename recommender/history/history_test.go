package history

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// t0 is on a whole day, so it is also on every half-life and aggregation boundary used here.
var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

const gib = float64(1 << 30)

// bucketOf returns the bucket a value falls in, so percentiles (which VPA reports as the
// end of a bucket) compare by bucket rather than by float.
func bucketOf(buckets interface{ FindBucket(float64) int }, v float64) int {
	return buckets.FindBucket(v)
}

// percentileBucket is the bucket holding histogram percentile p: VPA returns the start of
// the next bucket, so step back just below it.
func percentileBucket(buckets interface{ FindBucket(float64) int }, v float64) int {
	return buckets.FindBucket(math.Nextafter(v, 0))
}

func TestOptionsDefaults(t *testing.T) {
	o := NewModel(Options{}).Options()
	want := Options{
		MemoryAggregationInterval: DefaultMemoryAggregationInterval,
		HalfLife:                  DefaultHalfLife,
		PeakWindow:                DefaultPeakWindow,
		SampleInterval:            DefaultSampleInterval,
	}
	if o != want {
		t.Errorf("defaults: got %+v, want %+v", o, want)
	}
	set := Options{MemoryAggregationInterval: 5 * time.Minute, HalfLife: time.Hour, PeakWindow: 2 * time.Hour, SampleInterval: 15 * time.Second}
	if got := NewModel(set).Options(); got != set {
		t.Errorf("explicit options changed: got %+v, want %+v", got, set)
	}
}

// TestDecay checks the half-life: a sample one half-life newer weighs twice as much, two
// half-lives four times, in both histograms.
func TestDecay(t *testing.T) {
	const halfLife = time.Hour
	for _, c := range []struct {
		name  string
		later time.Duration // age of the old samples when the new one arrives
		want  string        // which value the median lands on
	}{
		// three old samples of weight 1 against one new one of weight 2: old wins
		{"one half-life", halfLife, "old"},
		// ... of weight 4: new wins
		{"two half-lives", 2 * halfLife, "new"},
		// no decay between samples of the same time: three against one
		{"same time", 0, "old"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newContainerState(Options{HalfLife: halfLife, MemoryAggregationInterval: time.Hour}.withDefaults())
			const oldRatio, newRatio = 0.2, 0.8
			for range 3 {
				s.AddCompute(t0, oldRatio, "")
			}
			s.AddCompute(t0.Add(c.later), newRatio, "")

			// Memory: three pods' peaks in the interval ending at t0+1h, one pod's peak later.
			oldMem, newMem := 2*gib, 8*gib
			for _, pod := range []string{"a", "b", "c"} {
				s.AddMemory(pod, t0.Add(30*time.Minute), oldMem)
			}
			s.AddMemory("d", t0.Add(c.later+30*time.Minute), newMem)

			wantCompute, wantMem := oldRatio, oldMem
			if c.want == "new" {
				wantCompute, wantMem = newRatio, newMem
			}
			if got := percentileBucket(ComputeBuckets, s.Compute.Percentile(0.5)); got != bucketOf(ComputeBuckets, wantCompute) {
				t.Errorf("compute median in bucket %d (%v), want bucket of %v (%d)",
					got, s.Compute.Percentile(0.5), wantCompute, bucketOf(ComputeBuckets, wantCompute))
			}
			if got := percentileBucket(MemoryBuckets, s.Memory.Percentile(0.5)); got != bucketOf(MemoryBuckets, wantMem) {
				t.Errorf("memory median in bucket %d (%v), want bucket of %v (%d)",
					got, s.Memory.Percentile(0.5), wantMem, bucketOf(MemoryBuckets, wantMem))
			}
		})
	}
}

// TestMemoryPeakPerInterval checks that each pod contributes one memory sample per
// aggregation interval, its peak, and that the interval's boundary closes it.
func TestMemoryPeakPerInterval(t *testing.T) {
	s := newContainerState(Options{}.withDefaults())
	s.AddMemory("a", t0.Add(10*time.Minute), 1*gib)
	s.AddMemory("a", t0.Add(20*time.Minute), 3*gib) // new peak: replaces 1 GiB
	s.AddMemory("a", t0.Add(30*time.Minute), 2*gib) // below the peak: ignored
	s.AddMemory("a", t0.Add(time.Hour), 4*gib)      // on the boundary: same interval (max_over_time covers (t-1h, t])
	if s.MemoryPeaks != 1 {
		t.Fatalf("MemoryPeaks = %d after one interval of one pod, want 1", s.MemoryPeaks)
	}
	if got := percentileBucket(MemoryBuckets, s.Memory.Percentile(0)); got != bucketOf(MemoryBuckets, 4*gib) {
		t.Errorf("lowest memory sample in bucket %d, want the peak's (%d): replaced peaks must leave the histogram",
			got, bucketOf(MemoryBuckets, 4*gib))
	}

	s.AddMemory("b", t0.Add(50*time.Minute), 1*gib)          // a second pod: its own peak
	s.AddMemory("a", t0.Add(time.Hour+time.Second), 0.5*gib) // next interval
	s.AddMemory("a", t0.Add(40*time.Minute), 9*gib)          // older than a's current interval: ignored
	if s.MemoryPeaks != 3 {
		t.Errorf("MemoryPeaks = %d, want 3 (a twice, b once)", s.MemoryPeaks)
	}
	if got := percentileBucket(MemoryBuckets, s.Memory.Percentile(1)); got != bucketOf(MemoryBuckets, 4*gib) {
		t.Errorf("highest memory sample in bucket %d, want 4 GiB's (%d): a late sample must not count",
			got, bucketOf(MemoryBuckets, 4*gib))
	}
	if !s.FirstSample.Equal(t0.Add(10*time.Minute)) || !s.LastSample.Equal(t0.Add(time.Hour+time.Second)) {
		t.Errorf("FirstSample, LastSample = %v, %v", s.FirstSample, s.LastSample)
	}
}

// TestRecentPeak checks the peak window: the highest memory peak of any pod in the
// intervals of the last PeakWindow, and none when the window is empty.
func TestRecentPeak(t *testing.T) {
	s := newContainerState(Options{PeakWindow: 6 * time.Hour}.withDefaults())
	now := t0.Add(48 * time.Hour)
	if _, ok := s.RecentPeak(now); ok {
		t.Fatal("RecentPeak of an empty state: ok, want none")
	}
	s.AddMemory("old", now.Add(-30*time.Hour), 40*gib) // far outside the window
	s.AddMemory("a", now.Add(-5*time.Hour), 6*gib)     // inside
	s.AddMemory("b", now.Add(-90*time.Minute), 10*gib) // inside, the highest
	s.AddMemory("a", now.Add(-10*time.Minute), 3*gib)  // inside
	if got, ok := s.RecentPeak(now); !ok || got != 10*gib {
		t.Errorf("RecentPeak = %v, %v; want 10 GiB", got/gib, ok)
	}
	// Six hours later b's peak has left the window; a's at now-10m has not.
	if got, ok := s.RecentPeak(now.Add(6 * time.Hour)); !ok || got != 3*gib {
		t.Errorf("RecentPeak 6h later = %v GiB, %v; want 3 GiB", got/gib, ok)
	}
	if _, ok := s.RecentPeak(now.Add(48 * time.Hour)); ok {
		t.Error("RecentPeak two days after the last sample: ok, want none")
	}
	// The decaying histogram still holds the old peak: the window only bounds RecentPeak.
	if got := percentileBucket(MemoryBuckets, s.Memory.Percentile(1)); got != bucketOf(MemoryBuckets, 40*gib) {
		t.Errorf("memory histogram's max in bucket %d, want 40 GiB's (%d)", got, bucketOf(MemoryBuckets, 40*gib))
	}
}

// TestSpan checks that Span counts covered time, not the distance between the first and
// the last sample, when there are gaps.
func TestSpan(t *testing.T) {
	o := Options{}.withDefaults() // 1m samples, 1h memory intervals
	compute := func(s *ContainerState, from time.Time, n int) {
		for i := range n {
			s.AddCompute(from.Add(time.Duration(i)*o.SampleInterval), 0.5, "")
		}
	}
	for _, c := range []struct {
		name string
		fill func(*ContainerState)
		want time.Duration
	}{
		{"empty", func(*ContainerState) {}, 0},
		{"one sample", func(s *ContainerState) { compute(s, t0, 1) }, time.Minute},
		{"two hours without gaps", func(s *ContainerState) { compute(s, t0, 120) }, 2 * time.Hour},
		{"two hours with a day's gap between them", func(s *ContainerState) {
			compute(s, t0, 60)
			compute(s, t0.Add(25*time.Hour), 60)
		}, 2 * time.Hour},
		{"memory peaks only, hourly for ten hours", func(s *ContainerState) {
			for i := range 10 {
				s.AddMemory("a", t0.Add(time.Duration(i)*time.Hour+time.Minute), gib)
			}
		}, 9*time.Hour + time.Minute}, // first to last sample, plus one sample interval
		{"twelve pods, two hours with a day's gap between them", func(s *ContainerState) {
			// An HPA's (or KEDA's) twelve replicas for an hour, scaled to zero overnight,
			// twelve again: two hours of evidence however many pods gave it.
			for _, from := range []time.Time{t0.Add(time.Minute), t0.Add(25*time.Hour + time.Minute)} {
				for p := range 12 {
					pod := fmt.Sprintf("p%d", p)
					for i := range 60 {
						at := from.Add(time.Duration(i) * o.SampleInterval)
						s.AddCompute(at, 0.5, "")
						s.AddMemory(pod, at, gib)
					}
				}
			}
		}, 2 * time.Hour},
		{"an hour at 1 GiB, an hour of zero memory: both covered", func(s *ContainerState) {
			for i := range 120 {
				at := t0.Add(time.Duration(i+1) * o.SampleInterval)
				mem := gib
				if i >= 60 {
					mem = 0
				}
				s.AddCompute(at, 0, "")
				s.AddMemory("a", at, mem)
			}
		}, 2 * time.Hour},
		{"an hour with memory, an hour with compute alone (memory set aside as stale): both covered", func(s *ContainerState) {
			for i := range 120 {
				at := t0.Add(time.Duration(i+1) * o.SampleInterval)
				s.AddCompute(at, 0, "")
				if i < 60 {
					s.AddMemory("a", at, gib)
				}
			}
		}, 2 * time.Hour},
		{"memory peaks cover a compute gap", func(s *ContainerState) {
			compute(s, t0, 10)
			for i := range 5 {
				s.AddMemory("a", t0.Add(time.Duration(i)*time.Hour+time.Minute), gib)
			}
		}, 4*time.Hour + 2*time.Minute}, // t0 to t0+4h1m, plus one sample interval
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newContainerState(o)
			c.fill(s)
			if got := s.Span(); got != c.want {
				t.Errorf("Span = %v, want %v", got, c.want)
			}
			if got := s.Empty(); got != (c.want == 0) {
				t.Errorf("Empty = %v", got)
			}
		})
	}
}

func series(pod string, from time.Time, step time.Duration, values ...float64) metrics.Series {
	s := metrics.Series{ID: metrics.ContainerID{Namespace: "ns", Pod: pod, Container: "main"}, Source: "test"}
	for i, v := range values {
		s.Samples = append(s.Samples, metrics.Sample{Time: from.Add(time.Duration(i) * step), Value: v})
	}
	return s
}

// TestModelAddSkipsSeenSamples checks that overlapping loads of the same series (history
// bootstrap, then live cycles) count each sample once.
func TestModelAddSkipsSeenSamples(t *testing.T) {
	m := NewModel(Options{})
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	m.Add(w, metrics.SignalCompute, series("p", t0, time.Minute, 0.1, 0.2, 0.3))
	m.Add(w, metrics.SignalCompute, series("p", t0.Add(time.Minute), time.Minute, 0.2, 0.3, 0.4)) // two seen, one new
	m.Add(w, metrics.SignalMemory, series("p", t0.Add(time.Minute), time.Minute, gib, 2*gib))     // one interval
	st := m.Container(ContainerKey{WorkloadKey: w, Container: "main"})
	if st == nil {
		t.Fatal("no state for ns/Deployment/web main")
	}
	if st.ComputeSamples != 4 || st.MemoryPeaks != 1 || st.ComputeSource != "test" {
		t.Errorf("ComputeSamples, MemoryPeaks, ComputeSource = %d, %d, %q; want 4, 1, test", st.ComputeSamples, st.MemoryPeaks, st.ComputeSource)
	}
	if got := m.Containers(w); len(got) != 1 || got[0] != "main" {
		t.Errorf("Containers = %v", got)
	}
	m.Forget(w)
	if m.Container(ContainerKey{WorkloadKey: w, Container: "main"}) != nil || len(m.lastSeen) != 0 {
		t.Error("Forget left state behind")
	}
}

// TestDeviceLoadFollowsAddedSamples: a compute sample's device load counts once, with
// the sample: a load whose sample was seen before, or that has no sample (dropped by the
// reader), adds nothing, and the evidence decays with the histograms' half-life.
func TestDeviceLoadFollowsAddedSamples(t *testing.T) {
	m := NewModel(Options{})
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	s := series("p", t0, time.Minute, 0.5, 0.6, 0.7) // at 0, 1, 2
	s.DeviceLoad = []metrics.DeviceLoad{{Time: at(1), Saturated: true}, {Time: at(2)}, {Time: at(2).Add(time.Second), Saturated: true}}
	m.Add(w, metrics.SignalCompute, s)
	st := m.Container(ContainerKey{WorkloadKey: w, Container: "main"})
	near := func(x, y float64) bool { return math.Abs(x-y) < 0.01 } // a minute's decay
	if n, sat := st.ContentionAt(at(2)); !near(n, 2) || !near(sat, 1) {
		t.Fatalf("evidence %v saturated of %v, want 1 of 2", sat, n)
	}
	// The next cycle reads minutes 1–3 again: only minute 3 is new.
	s = series("p", at(1), time.Minute, 0.6, 0.7, 0.9)
	s.DeviceLoad = []metrics.DeviceLoad{{Time: at(1), Saturated: true}, {Time: at(2), Saturated: true}, {Time: at(3), Saturated: true}}
	m.Add(w, metrics.SignalCompute, s)
	if n, sat := st.ContentionAt(at(3)); !near(n, 3) || !near(sat, 2) {
		t.Errorf("after an overlapping read: %v saturated of %v, want 2 of 3", sat, n)
	}
	n, sat := st.ContentionAt(at(3))
	if n2, sat2 := st.ContentionAt(at(3).Add(DefaultHalfLife)); math.Abs(n2-n/2) > 1e-9 || math.Abs(sat2-sat/2) > 1e-9 {
		t.Errorf("one half-life later: %v saturated of %v, want half of %v of %v", sat2, n2, sat, n)
	}
}

// TestDeviceLoadOrderFree: the evidence does not depend on the order the pods' series
// are fed in (a history load feeds one pod's whole slice, then the next one's): a sample
// older than the evidence enters decayed to it.
func TestDeviceLoadOrderFree(t *testing.T) {
	day := func(pod string, d int, saturated bool) metrics.Series {
		s := metrics.Series{ID: metrics.ContainerID{Namespace: "ns", Pod: pod, Container: "main"}, Source: "test"}
		for i := range 24 * 60 {
			at := t0.Add(time.Duration(d)*24*time.Hour + time.Duration(i)*time.Minute)
			s.Samples = append(s.Samples, metrics.Sample{Time: at, Value: 0.5})
			s.DeviceLoad = append(s.DeviceLoad, metrics.DeviceLoad{Time: at, Saturated: saturated})
		}
		return s
	}
	end := t0.Add(7 * 24 * time.Hour)
	read := func(order ...metrics.Series) (float64, float64) {
		m := NewModel(Options{})
		w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
		for _, s := range order {
			m.Add(w, metrics.SignalCompute, s)
		}
		return m.Container(ContainerKey{WorkloadKey: w, Container: "main"}).ContentionAt(end)
	}
	old, recent := day("b", 0, true), day("a", 6, false) // b saturated a week ago, a not today
	n1, s1 := read(recent, old)
	n2, s2 := read(old, recent)
	if math.Abs(n1-n2) > 1e-6*n2 || math.Abs(s1-s2) > 1e-6*n2 {
		t.Errorf("fed today first: %.1f saturated of %.1f; a week ago first: %.1f of %.1f", s1, n1, s2, n2)
	}
	if s2 > 0.05*n2 {
		t.Errorf("a week-old saturated day weighs %.1f of %.1f: not decayed", s2, n2)
	}
}

// TestGC checks that GC forgets per-pod windows and interval peaks older than the peak
// window (plus two intervals) and dedup entries older than the history length, and keeps
// what is recent and the histograms themselves.
func TestGC(t *testing.T) {
	m := NewModel(Options{PeakWindow: 6 * time.Hour})
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	now := t0.Add(72 * time.Hour)
	m.Add(w, metrics.SignalMemory, series("gone", now.Add(-50*time.Hour), time.Minute, 20*gib))
	m.Add(w, metrics.SignalMemory, series("stale", now.Add(-10*time.Hour), time.Minute, 8*gib))
	m.Add(w, metrics.SignalMemory, series("live", now.Add(-30*time.Minute), time.Minute, 4*gib))
	st := m.Container(ContainerKey{WorkloadKey: w, Container: "main"})
	peaksBefore := st.MemoryPeaks

	m.GC(now, 24*time.Hour)

	if _, ok := st.windows["live"]; !ok {
		t.Error("GC dropped the live pod's current window")
	}
	for _, pod := range []string{"gone", "stale"} {
		if _, ok := st.windows[pod]; ok {
			t.Errorf("GC kept the window of pod %s, older than the peak window", pod)
		}
	}
	if len(st.peaks) != 1 {
		t.Errorf("GC kept %d interval peaks, want 1 (the live pod's)", len(st.peaks))
	}
	if got, ok := st.RecentPeak(now); !ok || got != 4*gib {
		t.Errorf("RecentPeak after GC = %v GiB, %v; want 4 GiB", got/gib, ok)
	}
	seen := map[string]bool{}
	for k := range m.lastSeen {
		seen[k.id.Pod] = true
	}
	if seen["gone"] || !seen["stale"] || !seen["live"] {
		t.Errorf("lastSeen after GC with 24h of history holds pods %v; want stale and live", seen)
	}
	if st.MemoryPeaks != peaksBefore || percentileBucket(MemoryBuckets, st.Memory.Percentile(1)) != bucketOf(MemoryBuckets, 20*gib) {
		t.Error("GC changed the histogram: it only forgets bookkeeping")
	}

	// The live pod's window survived, so a later sample in the same interval still
	// replaces its peak rather than adding a second one.
	m.Add(w, metrics.SignalMemory, series("live", now.Add(-5*time.Minute), time.Minute, 5*gib))
	if st.MemoryPeaks != peaksBefore {
		t.Errorf("MemoryPeaks = %d after a same-interval sample, want %d", st.MemoryPeaks, peaksBefore)
	}
}

// A container whose last sample is older than the history length (renamed or removed
// from the workload's pods) is forgotten, and the workload's version moves so its
// checkpoint is written without it; a container with a sample within it stays.
func TestGCForgetsExpiredContainers(t *testing.T) {
	m := NewModel(Options{})
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	now := t0.Add(72 * time.Hour)
	old := series("web-1", now.Add(-30*time.Hour), time.Minute, 20*gib)
	old.ID.Container = "former"
	m.Add(w, metrics.SignalMemory, old)
	m.Add(w, metrics.SignalMemory, series("web-2", now.Add(-time.Hour), time.Minute, 4*gib))
	v := m.Version(w)

	m.GC(now, 24*time.Hour)

	if got := m.Containers(w); len(got) != 1 || got[0] != "main" {
		t.Errorf("containers after GC: %v, want [main] (former's last sample is 30 h old, the history 24 h)", got)
	}
	if m.Version(w) == v {
		t.Error("the workload's version did not move: its checkpoint would keep the forgotten container")
	}
}

// TestAtLevel checks the evidence of a young workload: the time memory has stayed at its
// highest level. A rise within LevelNoise (5 %) keeps the level's start, a larger rise
// (a trend, a leak, a model load) starts it again, and gaps never count.
func TestAtLevel(t *testing.T) {
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	k := ContainerKey{WorkloadKey: w, Container: "main"}
	steady := func(n int, v float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	tests := []struct {
		name      string
		feed      func(m *Model)
		now       time.Time
		at        time.Duration
		intervals int
	}{
		{name: "no memory", feed: func(m *Model) {
			m.Add(w, metrics.SignalCompute, series("p", t0, time.Minute, 0.1, 0.2))
		}, now: t0.Add(time.Hour)},
		{name: "steady for 3h", feed: func(m *Model) {
			m.Add(w, metrics.SignalMemory, series("p", t0, time.Minute, steady(180, 10*gib)...))
		}, now: t0.Add(180 * time.Minute), at: 3 * time.Hour, intervals: 3},
		{name: "a rise within 5 % keeps the level", feed: func(m *Model) {
			m.Add(w, metrics.SignalMemory, series("p", t0, time.Minute, append(steady(120, 10*gib), steady(60, 10.4*gib)...)...))
		}, now: t0.Add(180 * time.Minute), at: 3 * time.Hour, intervals: 3},
		{name: "a rise of 10 % starts again", feed: func(m *Model) {
			m.Add(w, metrics.SignalMemory, series("p", t0, time.Minute, append(steady(120, 10*gib), steady(60, 11*gib)...)...))
		}, now: t0.Add(180 * time.Minute), at: time.Hour, intervals: 1},
		{name: "a fall keeps the level", feed: func(m *Model) {
			m.Add(w, metrics.SignalMemory, series("p", t0, time.Minute, append(steady(60, 10*gib), steady(120, 5*gib)...)...))
		}, now: t0.Add(180 * time.Minute), at: 3 * time.Hour, intervals: 3},
		{name: "a second pod's higher level starts again", feed: func(m *Model) {
			m.Add(w, metrics.SignalMemory, series("p", t0, time.Minute, steady(180, 10*gib)...))
			m.Add(w, metrics.SignalMemory, series("q", t0.Add(150*time.Minute), time.Minute, steady(30, 20*gib)...))
		}, now: t0.Add(180 * time.Minute), at: 30 * time.Minute, intervals: 0},
		{name: "two pods' samples at one time start the same level in either order", feed: func(m *Model) {
			// p rises 5.7 %, q 4.7 % at 2h, each cycle reading one sample of each (as a
			// live cycle does); fed q first, q's rise within 5 % must not hide p's rise
			// above 5 %: a rise is measured against the highest sample before its time.
			for i := 0; i < 180; i++ {
				q, p := 10*gib, 10*gib
				if i >= 120 {
					q, p = 10.47*gib, 10.57*gib
				}
				m.Add(w, metrics.SignalMemory, series("q", t0.Add(time.Duration(i)*time.Minute), time.Minute, q))
				m.Add(w, metrics.SignalMemory, series("p", t0.Add(time.Duration(i)*time.Minute), time.Minute, p))
			}
		}, now: t0.Add(180 * time.Minute), at: time.Hour, intervals: 1},
		{name: "a gap does not count", feed: func(m *Model) {
			// Two hours of samples, each inside one interval, ten hours apart.
			m.Add(w, metrics.SignalMemory, series("p", t0.Add(time.Minute), time.Minute, steady(60, 10*gib)...))
			m.Add(w, metrics.SignalMemory, series("p", t0.Add(10*time.Hour+time.Minute), time.Minute, steady(60, 10*gib)...))
		}, now: t0.Add(11 * time.Hour), at: 2 * time.Hour, intervals: 2},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			m := NewModel(Options{})
			c.feed(m)
			st := m.Container(k)
			if got := st.AtLevel(c.now); got != c.at {
				t.Errorf("AtLevel = %s, want %s", got, c.at)
			}
			if got := st.LevelIntervals(c.now); got != c.intervals {
				t.Errorf("LevelIntervals = %d, want %d", got, c.intervals)
			}
		})
	}
}

// TestComputeByHour: each compute sample also enters the histogram of its hour of the
// day (UTC), whatever the sample's zone; hours without samples stay nil (no data).
func TestComputeByHour(t *testing.T) {
	m := NewModel(Options{})
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	est := time.FixedZone("UTC-5", -5*3600)
	s := metrics.Series{ID: metrics.ContainerID{Namespace: "ns", Pod: "p1", Container: "main"}}
	for i := range 90 { // 10:00–11:29 UTC, given in UTC-5
		s.Samples = append(s.Samples, metrics.Sample{Time: t0.Add(10*time.Hour + time.Duration(i)*time.Minute).In(est), Value: 0.3})
	}
	m.Add(w, metrics.SignalCompute, s)
	st := m.Container(ContainerKey{WorkloadKey: w, Container: "main"})
	for h := range HoursPerDay {
		want := map[int]int{10: 60, 11: 30}[h]
		if got := st.ComputeHourSamples[h]; got != want {
			t.Errorf("hour %d: %d samples, want %d", h, got, want)
		}
		if (st.ComputeByHour[h] != nil) != (want > 0) {
			t.Errorf("hour %d: histogram present %v, want %v", h, st.ComputeByHour[h] != nil, want > 0)
		}
	}
	if st.ComputeHourDays[10] || st.ComputeHourDays[11] {
		t.Errorf("one day of samples: hours 10/11 seen on more than one day (%v, %v)", st.ComputeHourDays[10], st.ComputeHourDays[11])
	}
	// A second pod loaded after the first (as a history bootstrap does, series by
	// series) adds the next day's 11:00 and an earlier day's 10:00: both now repeat.
	s2 := metrics.Series{ID: metrics.ContainerID{Namespace: "ns", Pod: "p2", Container: "main"}, Samples: []metrics.Sample{
		{Time: t0.Add(-14 * time.Hour), Value: 0.1}, {Time: t0.Add(35 * time.Hour), Value: 0.1}}}
	m.Add(w, metrics.SignalCompute, s2)
	if !st.ComputeHourDays[10] || !st.ComputeHourDays[11] || st.ComputeHourDays[12] {
		t.Errorf("after a second day: hours 10/11/12 repeat %v/%v/%v, want true/true/false", st.ComputeHourDays[10], st.ComputeHourDays[11], st.ComputeHourDays[12])
	}
	if got := st.HourCoverage(11); got != 30*time.Minute+time.Minute {
		t.Errorf("hour 11 covers %s, want 31m", got)
	}
	if got := st.ComputeByHour[10].Percentile(0.5); bucketOf(ComputeBuckets, got-1e-9) != bucketOf(ComputeBuckets, 0.3) {
		t.Errorf("hour 10 median %.3f, want 0.3's bucket", got)
	}
}

// TestNoComputeByHour: with the option set, compute samples reach Compute only.
func TestNoComputeByHour(t *testing.T) {
	m := NewModel(Options{NoComputeByHour: true})
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	m.Add(w, metrics.SignalCompute, metrics.Series{ID: metrics.ContainerID{Namespace: "ns", Pod: "p1", Container: "main"}, Source: "s",
		Samples: []metrics.Sample{{Time: t0.Add(10 * time.Hour), Value: 0.3}}})
	st := m.Container(ContainerKey{WorkloadKey: w, Container: "main"})
	if st.Compute.IsEmpty() || st.ComputeSource != "s" || st.ComputeByHour[10] != nil || st.ComputeHourSamples[10] != 0 {
		t.Errorf("compute empty %v, source %q, hour 10 histogram %v samples %d; want a sample in Compute only", st.Compute.IsEmpty(), st.ComputeSource, st.ComputeByHour[10] != nil, st.ComputeHourSamples[10])
	}
}

// The interval cover remembers (lastCovered) changes nothing: at irregular times (steps
// of a minute, 30 s, 90 s, on and off interval boundaries, sub-millisecond, a sample
// older than the last, more pods' series fed after the first's, older than the evidence
// and then past it, one past a gc that dropped its interval), the covered intervals are
// those of IntervalStart of every sample time. The fidelity evidence fed in that order
// is the decayed sum of the samples' weights.
func TestCoverAtIrregularTimes(t *testing.T) {
	o := Options{}.withDefaults()
	s := newContainerState(o)
	var times []time.Time
	at := t0
	for i := range 400 {
		step := []time.Duration{time.Minute, time.Minute, 30 * time.Second, 90 * time.Second, time.Minute + time.Microsecond}[i%5]
		at = at.Add(step)
		times = append(times, at)
	}
	times = append(times, t0.Add(time.Hour), t0.Add(2*time.Hour).Add(time.Millisecond), times[len(times)-1].Add(-3*time.Hour))
	// A second and a third pod of the workload, fed after the first as a load feeds
	// series: a minute apart, all older than the evidence, then past it.
	for p := range 2 {
		from := t0.Add(time.Duration(p*7) * time.Minute)
		for i := range 300 + p*200 {
			times = append(times, from.Add(time.Duration(i)*time.Minute))
		}
	}
	low := make([]bool, len(times))
	for i, tm := range times {
		src := metrics.DCGMGREngineActive
		if i%7 == 0 {
			src, low[i] = metrics.DCGMGPUUtil, true
		}
		s.AddCompute(tm, 0.5, src)
	}
	want := map[int64]bool{}
	for _, tm := range times {
		want[o.IntervalStart(tm).Unix()] = true
	}
	if len(s.peaks) != len(want) {
		t.Fatalf("%d intervals covered, want %d", len(s.peaks), len(want))
	}
	for k := range want {
		if !s.hasPeak(k) {
			t.Fatalf("interval %s not covered", time.Unix(k, 0).UTC())
		}
	}
	// The evidence is valued at the latest sample; each sample weighs 2^-(age/half-life).
	ref := times[0]
	for _, tm := range times {
		if tm.After(ref) {
			ref = tm
		}
	}
	var all, lowSum float64
	for i, tm := range times {
		w := math.Exp2(-float64(ref.Sub(tm)) / float64(o.HalfLife))
		all += w
		if low[i] {
			lowSum += w
		}
	}
	if f := s.Fidelity; !f.Ref.Equal(ref) || math.Abs(f.All-all) > 1e-9*all || math.Abs(f.Low-lowSum) > 1e-9*all {
		t.Fatalf("fidelity all %v low %v at %s, want %v, %v at %s", f.All, f.Low, f.Ref, all, lowSum, ref)
	}

	// gc drops the intervals before the peak window, the one cover last covered too
	// (a sample older than the window came last); a later sample in it is covered again.
	late := times[len(times)-1].Add(o.PeakWindow + 10*time.Hour)
	old := late.Add(-o.PeakWindow - 5*time.Hour)
	s.AddCompute(late, 0.5, "")
	s.AddCompute(old, 0.5, "")
	s.gc(late)
	if s.hasPeak(o.IntervalStart(old).Unix()) {
		t.Fatal("gc kept the interval of a sample before the peak window")
	}
	s.AddCompute(old.Add(time.Second), 0.5, "")
	for _, tm := range []time.Time{late, old} {
		if !s.hasPeak(o.IntervalStart(tm).Unix()) {
			t.Fatalf("interval of %s not covered after gc", tm)
		}
	}
	if s.hasPeak(o.IntervalStart(times[0]).Unix()) {
		t.Fatal("gc kept an interval before the peak window")
	}
}

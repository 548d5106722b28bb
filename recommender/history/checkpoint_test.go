package history

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// feedDays feeds m workload w's two pods from..to: memory once a minute (a daily
// pattern with noise, a spike on one pod each day) and compute once a minute, one
// compute sample in fifteen from GPU_UTIL (the profiling field missing at that step).
func feedDays(m *Model, w WorkloadKey, seed uint64, from, to time.Time) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, pod := range []string{"p-0", "p-1"} {
		var mem, cpu []metrics.Sample
		var srcs []string
		var loads []metrics.DeviceLoad
		for t := from.Add(time.Minute); !t.After(to); t = t.Add(time.Minute) {
			day := math.Sin(2 * math.Pi * float64(t.Hour()) / 24)
			mv := (10 + 2*day + rng.Float64()) * gib
			if t.Hour() == 15 && t.Minute() == 7 && pod == "p-1" {
				mv = 19 * gib
			}
			mem = append(mem, metrics.Sample{Time: t, Value: mv})
			cpu = append(cpu, metrics.Sample{Time: t, Value: math.Max(0, math.Min(1, 0.3+0.2*day+0.1*rng.NormFloat64()))})
			srcs = append(srcs, metrics.DCGMSMActive)
			if t.Minute()%15 == 0 {
				srcs[len(srcs)-1] = metrics.DCGMGPUUtil
			}
			if pod == "p-1" && t.Minute()%3 == 0 { // on a shared GPU every third minute
				loads = append(loads, metrics.DeviceLoad{Time: t, Saturated: cpu[len(cpu)-1].Value > 0.45})
			}
		}
		id := metrics.ContainerID{Namespace: w.Namespace, Pod: pod, Container: "main"}
		m.Add(w, metrics.SignalMemory, metrics.Series{ID: id, Samples: mem, Source: "x"})
		m.Add(w, metrics.SignalCompute, metrics.Series{ID: id, Samples: cpu, Source: srcs[len(srcs)-1], Sources: srcs, Devices: 1, DeviceLoad: loads})
	}
}

// roundTrip saves w of m and decodes it as the API server would hand it back (JSON).
func roundTrip(t *testing.T, m *Model, w WorkloadKey) []gpufracv1.ContainerCheckpoint {
	t.Helper()
	cps, err := m.SaveCheckpoint(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 1 {
		t.Fatalf("saved %d containers, want 1", len(cps))
	}
	b, err := json.Marshal(gpufracv1.GPUFractionCheckpointStatus{Containers: cps})
	if err != nil {
		t.Fatal(err)
	}
	var back gpufracv1.GPUFractionCheckpointStatus
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back.Containers
}

// TestCheckpointRestoreContinues: a model checkpointed after 2 days, restored into a new
// model and fed days 3–4 (and, again, the samples before the checkpoint, which it must
// skip) reads as the model that was fed all 4 days: every count, bound and peak
// exactly; each percentile within one bucket (the checkpoint's quantization,
// gpufracv1.HistogramCheckpoint). Two seeds.
func TestCheckpointRestoreContinues(t *testing.T) {
	w := WorkloadKey(workload.Ref{Namespace: "ns", Kind: "Deployment", Name: "d"})
	for _, seed := range []uint64{1, 7} {
		cont := NewModel(Options{})
		mid, end := t0.Add(48*time.Hour+37*time.Minute), t0.Add(96*time.Hour)
		feedDays(cont, w, seed, t0, mid)
		cps := roundTrip(t, cont, w)
		restored := NewModel(Options{})
		if err := restored.Restore(w, mid, cps); err != nil {
			t.Fatal(err)
		}
		feedDays(cont, w, seed+100, mid, end)
		feedDays(restored, w, seed, t0, mid) // already in the checkpoint: skipped
		feedDays(restored, w, seed+100, mid, end)

		a, b := cont.Container(ContainerKey{w, "main"}), restored.Container(ContainerKey{w, "main"})
		if a.Span() != b.Span() || a.ComputeSamples != b.ComputeSamples || a.MemoryPeaks != b.MemoryPeaks || !a.FirstSample.Equal(b.FirstSample) ||
			!a.LastSample.Equal(b.LastSample) || a.LevelPeak != b.LevelPeak || !a.LevelSince.Equal(b.LevelSince) || a.Devices != b.Devices ||
			a.ComputeSource != b.ComputeSource || a.ComputeHourSamples != b.ComputeHourSamples || a.ComputeHourDays != b.ComputeHourDays {
			t.Errorf("seed %d: restored state differs:\ncontinuous %+v\nrestored   %+v", seed, summary(a), summary(b))
		}
		pa, oka := a.RecentPeak(end)
		pb, okb := b.RecentPeak(end)
		if pa != pb || oka != okb || pa != 19*gib {
			t.Errorf("seed %d: recent peak %v/%v, restored %v/%v, want 19 GiB", seed, pa, oka, pb, okb)
		}
		na, sa := a.ContentionAt(end)
		nb, sb := b.ContentionAt(end)
		if sa <= 0 || math.Abs(na-nb) > 1e-9*na || math.Abs(sa-sb) > 1e-9*na {
			t.Errorf("seed %d: contention evidence %.3f of %.3f samples, restored %.3f of %.3f", seed, sa, na, sb, nb)
		}
		if fa, fb := a.Fidelity, b.Fidelity; fa.Low <= 0 || math.Abs(fa.All-fb.All) > 1e-9*fa.All || math.Abs(fa.Low-fb.Low) > 1e-9*fa.All ||
			fa.Precise != fb.Precise || fa.Coarse != fb.Coarse || a.ComputeFieldAt(0.9) != metrics.DCGMSMActive || b.ComputeFieldAt(0.9) != metrics.DCGMSMActive {
			t.Errorf("seed %d: compute fidelity %+v, restored %+v", seed, fa, fb)
		}
		if a.LevelIntervals(end) != b.LevelIntervals(end) {
			t.Errorf("seed %d: level intervals %d, restored %d", seed, a.LevelIntervals(end), b.LevelIntervals(end))
		}
		for _, p := range []float64{0.05, 0.5, 0.9, 0.95, 0.99} {
			if d := percentileBucket(MemoryBuckets, a.Memory.Percentile(p)) - percentileBucket(MemoryBuckets, b.Memory.Percentile(p)); d < -1 || d > 1 {
				t.Errorf("seed %d: memory p%v %v, restored %v: %d buckets apart", seed, p*100, a.Memory.Percentile(p), b.Memory.Percentile(p), d)
			}
			if d := percentileBucket(ComputeBuckets, a.Compute.Percentile(p)) - percentileBucket(ComputeBuckets, b.Compute.Percentile(p)); d < -1 || d > 1 {
				t.Errorf("seed %d: compute p%v %v, restored %v: %d buckets apart", seed, p*100, a.Compute.Percentile(p), b.Compute.Percentile(p), d)
			}
			for h := range HoursPerDay {
				x, y := a.ComputeByHour[h].Percentile(p), b.ComputeByHour[h].Percentile(p)
				if d := percentileBucket(ComputeBuckets, x) - percentileBucket(ComputeBuckets, y); d < -1 || d > 1 {
					t.Errorf("seed %d: hour %d compute p%v %v, restored %v", seed, h, p*100, x, y)
				}
			}
		}
	}
}

func summary(s *ContainerState) map[string]any {
	return map[string]any{"span": s.Span(), "compute": s.ComputeSamples, "peaks": s.MemoryPeaks, "first": s.FirstSample, "last": s.LastSample,
		"level": s.LevelPeak, "since": s.LevelSince, "devices": s.Devices, "source": s.ComputeSource, "hours": s.ComputeHourSamples, "days": s.ComputeHourDays}
}

// TestCheckpointRejectsBadInput: a checkpoint that cannot be the model's is an error
// naming what is wrong, and the model keeps what it had.
func TestCheckpointRejectsBadInput(t *testing.T) {
	w := WorkloadKey(workload.Ref{Namespace: "ns", Kind: "Deployment", Name: "d"})
	src := NewModel(Options{})
	feedDays(src, w, 3, t0, t0.Add(26*time.Hour))
	for _, c := range []struct {
		name   string
		break_ func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint
		want   string
	}{
		{"bucket not a number", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Memory.BucketWeights["x"] = 5
			return c
		}, `bucket "x"`},
		{"bucket outside the layout", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Compute.BucketWeights["500"] = 5
			return c
		}, "exceeding histogram buckets"},
		{"weight NaN", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Compute.TotalWeight = math.NaN()
			return c
		}, "total weight"},
		{"negative peak", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].IntervalPeaks[0].Bytes = -1
			return c
		}, "interval peak"},
		{"hour 24", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].ComputeByHour[0].Hour = 24
			return c
		}, "hour 24"},
		{"peaks without a histogram", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Memory = gpufracv1.HistogramCheckpoint{}
			return c
		}, "histogram is empty"},
		{"more saturated than co-tenant samples", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Contention.SaturatedSamples = c[0].Contention.CoTenantSamples + 1
			return c
		}, "contention evidence"},
		{"more low-fidelity than compute samples", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Fidelity.LowFidelitySamples = c[0].Fidelity.AllSamples + 1
			return c
		}, "fidelity evidence"},
		{"container twice", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			return append(c, c[0])
		}, "saved twice"},
		// The decay reference frames the weights: without one (weights at the zero time) the
		// first new sample rescales every restored weight to nothing, so the model keeps only
		// what came after the checkpoint (a shrink); one a year ahead makes every new sample
		// weigh nothing (the histogram never follows a growth).
		{"weights without a reference time", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Compute.ReferenceTimestamp = metav1.Time{}
			return c
		}, "reference time"},
		{"reference time a year after the samples", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].Memory.ReferenceTimestamp = metav1.NewTime(t0.Add(365 * 24 * time.Hour))
			return c
		}, "reference time"},
		// A pod's open interval after the checkpoint's end: every later memory sample of
		// that pod is "older than its current interval" and dropped (no growth seen).
		{"pod window after the samples", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].PodWindows[0].Start = metav1.NewTime(t0.Add(365 * 24 * time.Hour))
			return c
		}, "pod window"},
		{"last sample after the samples' end", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].LastSample = metav1.NewMicroTime(t0.Add(365 * 24 * time.Hour))
			return c
		}, "last sample"},
		{"reference time a year before the samples", func(c []gpufracv1.ContainerCheckpoint) []gpufracv1.ContainerCheckpoint {
			c[0].ComputeByHour[3].Histogram.ReferenceTimestamp = metav1.NewTime(t0.Add(-365 * 24 * time.Hour))
			return c
		}, "reference time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewModel(Options{})
			feedDays(m, w, 9, t0, t0.Add(2*time.Hour))
			before := m.Container(ContainerKey{w, "main"})
			err := m.Restore(w, t0.Add(26*time.Hour), c.break_(roundTrip(t, src, w)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v, want an error with %q", err, c.want)
			}
			if m.Container(ContainerKey{w, "main"}) != before || before.ComputeSamples != 2*120 {
				t.Errorf("the model changed on a failed restore")
			}
		})
	}
}

// TestVersionChangesWithSamples: the version moves when samples are added, not when the
// same samples come again, and a restore moves it.
func TestVersionChangesWithSamples(t *testing.T) {
	w := WorkloadKey(workload.Ref{Namespace: "ns", Kind: "Deployment", Name: "d"})
	m := NewModel(Options{})
	feedDays(m, w, 1, t0, t0.Add(time.Hour))
	v := m.Version(w)
	if v == 0 {
		t.Fatal("version 0 after samples")
	}
	feedDays(m, w, 1, t0, t0.Add(time.Hour))
	if m.Version(w) != v {
		t.Errorf("version moved on samples already seen: %d -> %d", v, m.Version(w))
	}
	feedDays(m, w, 1, t0.Add(time.Hour), t0.Add(2*time.Hour))
	if m.Version(w) == v {
		t.Error("version did not move on new samples")
	}
}

// TestCheckpointOptions: the options a checkpoint records are the defaults filled in, and
// differ when the model's do.
func TestCheckpointOptions(t *testing.T) {
	a, b := Options{}.CheckpointOptions(), Options{HalfLife: time.Hour}.CheckpointOptions()
	if a.HalfLife.Duration != DefaultHalfLife || !a.ComputeByHour || a == b {
		t.Errorf("options %+v and %+v", a, b)
	}
}

// TestCheckpointRestoresHasRun: ActiveAt is not checkpointed, but a restored compute
// histogram with activity says the GPU ran the container's kernels (HasRun), so a young
// workload keeps its young rule across a recommender restart; one whose GPU stayed idle
// (weights still downloading) does not.
func TestCheckpointRestoresHasRun(t *testing.T) {
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		activity float64
		want     bool
	}{{"busy", 0.3, true}, {"idle", 0, false}} {
		m := NewModel(Options{})
		id := metrics.ContainerID{Namespace: "ns", Pod: "p-0", Container: "main"}
		var mem, cpu []metrics.Sample
		for at := t0; at.Before(t0.Add(30 * time.Minute)); at = at.Add(time.Minute) {
			mem = append(mem, metrics.Sample{Time: at, Value: 10 * gib})
			cpu = append(cpu, metrics.Sample{Time: at, Value: tc.activity})
		}
		m.Add(w, metrics.SignalMemory, metrics.Series{ID: id, Samples: mem})
		m.Add(w, metrics.SignalCompute, metrics.Series{ID: id, Samples: cpu})
		key := ContainerKey{WorkloadKey: w, Container: "main"}
		if got := m.Container(key).HasRun(); got != tc.want {
			t.Fatalf("%s: HasRun %v before the checkpoint, want %v", tc.name, got, tc.want)
		}
		restored := NewModel(Options{})
		if err := restored.Restore(w, t0.Add(30*time.Minute), roundTrip(t, m, w)); err != nil {
			t.Fatal(err)
		}
		if got := restored.Container(key).HasRun(); got != tc.want {
			t.Errorf("%s: HasRun %v after the restore, want %v", tc.name, got, tc.want)
		}
	}
}

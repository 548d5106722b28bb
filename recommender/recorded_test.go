package recommender

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/estimate"
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
// the same model (history.Model, every container's histograms and counts; compute is
// read raw unless HistoryComputeFromRecordings, TestHistoryComputeFromRecordingsAtLeastRaw) as one that
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

// A history load that reads whole hours' compute from the recorded quantiles
// (gpufrac:pod_device_gpu_compute:quantile_1h, metrics.Reader.RecordedCompute) builds a
// compute model that is never below the raw one's and close to it: the same sample
// counts (overall and per hour of the day), every percentile and the effective compute
// (estimate.Config.ComputeRequest, also by hour of day) at least the raw ones (the fed
// samples dominate the minute means, metrics.ComputeQuantileWeights), and each percentile
// p at most the raw percentile p + 0.1 + hours/samples + 2^(1h/half-life) − 1 (the
// recorded quantiles are the hour's own, at most one tenth of its minutes apart; PromQL's rank
// floor; the decay within an hour). Pods over 12 hours of 15 s samples: steady, bursty (10 %
// of minutes near full), a daily ramp, and two that start and end within an hour
// (partial hours). The load end is on the whole minute, the recordings' phase 0, so the
// raw minute means and the recorded ones lie on the same minute ends. A run with twice
// the pods makes the same number of queries.
func TestHistoryComputeFromRecordingsAtLeastRaw(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := now.Add(-13 * time.Hour)
	shapes := map[string]func(at time.Time, rng *rand.Rand) (float64, bool){
		"steady": func(_ time.Time, rng *rand.Rand) (float64, bool) { return 0.3 + rng.Float64()/20, true },
		"bursty": func(at time.Time, rng *rand.Rand) (float64, bool) {
			if at.Minute()%10 == 3 {
				return 0.85 + rng.Float64()/10, true
			}
			return 0.05 * rng.Float64(), true
		},
		"ramp": func(at time.Time, rng *rand.Rand) (float64, bool) {
			return float64(at.Hour())/24 + rng.Float64()/5, true
		},
		"late": func(at time.Time, rng *rand.Rand) (float64, bool) { // from 04:37 on
			return 0.2 + rng.Float64()*0.6, !at.Before(time.Date(2026, 11, 30, 4, 37, 0, 0, time.UTC))
		},
		"early": func(at time.Time, rng *rand.Rand) (float64, bool) { // until 07:23
			return 0.4 * rng.Float64(), at.Before(time.Date(2026, 11, 30, 7, 23, 0, 0, time.UTC))
		},
	}
	names := []string{"steady", "bursty", "ramp", "late", "early"}
	run := func(copies int) (map[bool]*Recommender, map[bool]int) {
		var all []string
		for i := 0; i < copies; i++ {
			for _, n := range names {
				all = append(all, fmt.Sprintf("%s-%d", n, i))
			}
		}
		objs := singlePodWorkloads("ml", all...)
		prom := promtest.New(t)
		for i, p := range podsOf(objs) {
			shape := shapes[all[i][:strings.Index(all[i], "-")]]
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var mem, sm []float64
			first := time.Time{}
			for at := start; !at.After(now); at = at.Add(15 * time.Second) {
				v, ok := shape(at, rng)
				if !ok {
					if first.IsZero() {
						continue
					}
					break
				}
				if first.IsZero() {
					first = at
				}
				mem, sm = append(mem, 1000), append(sm, v)
			}
			uuid := fmt.Sprintf("GPU-%d", i)
			prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, uuid), first, 15*time.Second, mem...)
			prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, uuid), first, 15*time.Second, sm...)
		}
		recordHistory(t, prom, metrics.DCGM{}, start, now, nil)
		models, queries := map[bool]*Recommender{}, map[bool]int{}
		for _, recorded := range []bool{false, true} {
			h := newEngineHarness(t, objs, nil)
			cfg := Config{HistoryLength: 12 * time.Hour, HistoryFromRecordings: recorded, HistoryComputeFromRecordings: recorded}
			r := New(h.c, &metrics.Reader{API: prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{}, cfg)
			r.Now = func() time.Time { return now }
			before := len(prom.Queries())
			if err := r.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			read := prom.Queries()[before:]
			if got := strings.Contains(strings.Join(read, "\n"), metrics.HistoryComputeQuantile1h); got != recorded {
				t.Errorf("recorded=%v: the load read %s: %v", recorded, metrics.HistoryComputeQuantile1h, got)
			}
			models[recorded], queries[recorded] = r, len(read)
		}
		return models, queries
	}
	models, queries := run(1)
	if _, twice := run(2); twice[true] != queries[true] {
		t.Errorf("the recorded load made %d queries for %d pods, %d for %d", queries[true], len(names), twice[true], 2*len(names))
	}
	est := estimate.Config{}
	var worst float64
	for _, name := range names {
		k := containerKey("ml", name+"-0", "main")
		raw, rec := models[false].model.Container(k), models[true].model.Container(k)
		if raw == nil || rec == nil || raw.ComputeSamples < 60 {
			t.Fatalf("%s: raw %v, recorded %v, want an hour of compute samples and more", name, raw, rec)
		}
		if raw.ComputeSamples != rec.ComputeSamples || raw.ComputeHourSamples != rec.ComputeHourSamples {
			t.Errorf("%s: %d compute samples from the recordings (by hour %v), %d raw (%v)", name, rec.ComputeSamples, rec.ComputeHourSamples, raw.ComputeSamples, raw.ComputeHourSamples)
		}
		// Per hour of n minutes, the fed share at or below a value is at least the raw
		// share less 1/10 + 1/n (the deciles' spacing, PromQL's rank floor); over the load, less
		// 1/10 + hours/samples; the decay of the fed order within an hour adds at most
		// 2^(1h/half-life) − 1.
		hours := now.Sub(start).Hours() + 1
		slack := 0.1 + hours/float64(raw.ComputeSamples) + math.Exp2(float64(time.Hour)/float64(models[true].model.Options().HalfLife)) - 1
		for _, p := range []float64{0.5, 0.8, 0.9, 0.95, 0.99, 1} {
			r, c := raw.Compute.Percentile(p), rec.Compute.Percentile(p)
			above := raw.Compute.Percentile(math.Min(1, p+slack))
			if c < r || c > above {
				t.Errorf("%s: percentile %g from the recordings %.3f, raw %.3f, raw at %.3f %.3f: want between", name, p, c, r, math.Min(1, p+slack), above)
			}
			worst = math.Max(worst, c-r)
		}
		r, c := est.ComputeRequest(raw.Compute), est.ComputeRequest(rec.Compute)
		rh, ch := est.TimeOfDayComputeRequest(raw), est.TimeOfDayComputeRequest(rec)
		if c < r || ch < rh {
			t.Errorf("%s: effective compute from the recordings %.4f (by hour %.4f), raw %.4f (%.4f): want at least", name, c, ch, r, rh)
		}
		t.Logf("%s: percentiles 0.5/0.9/0.99 raw %.3f/%.3f/%.3f recorded %.3f/%.3f/%.3f; effective compute raw %.4f recorded %.4f (+%.4f); by hour %.4f %.4f",
			name, raw.Compute.Percentile(0.5), raw.Compute.Percentile(0.9), raw.Compute.Percentile(0.99),
			rec.Compute.Percentile(0.5), rec.Compute.Percentile(0.9), rec.Compute.Percentile(0.99), r, c, c-r, rh, ch)
	}
	t.Logf("largest percentile difference %.3f", worst)
}

// Each compute percentile the model reads (estimate's defaults, and the median and 0.95
// it reports) is a rank edge of a whole hour: the recorded quantile at p stands for
// exactly p·60 minutes, and the decaying histogram's later stamps can tip the read past
// it. A recorded quantile standing for one minute more (metrics.HistoryComputeQuantiles)
// makes that the next minute of the hour, not the next decile or the hour's maximum.
func TestComputeQuantilesBesidePercentiles(t *testing.T) {
	n := metrics.HistoryMinutesPerHour
	var upTo []int // minutes at or below each recorded quantile
	sum := 0
	for _, w := range metrics.ComputeQuantileWeights(n) {
		sum += w
		upTo = append(upTo, sum)
	}
	for _, p := range []float64{estimate.DefaultComputeTargetPercentile, estimate.DefaultComputeLowerPercentile,
		estimate.DefaultComputeUpperPercentile, 0.5, 0.95} {
		edge := int(math.Round(p * float64(n)))
		if !slices.Contains(upTo, edge) || !slices.Contains(upTo, edge+1) {
			t.Errorf("percentile %g: the recorded quantiles %v stand for %v minutes of %d, want %d and %d", p, metrics.HistoryComputeQuantiles, upTo, n, edge, edge+1)
		}
	}
}

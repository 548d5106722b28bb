// Command benchquantiles compares, without Prometheus, the compute model a history load
// builds from recorded hourly quantiles (--history-compute-from-recordings) with the one
// it builds from the raw minute means, for several sets of recorded quantiles
// (docs/benchmarks.md, "Results, 2026-12-02: recorded compute, finer quantiles"). Per
// workload of trace.Synthesize (5 pods each, one sample per minute), the raw model takes
// every minute mean of the last -days days; the recorded one takes each clock hour's
// quantiles as PromQL's quantile_over_time computes them, each weighed by
// metrics.QuantileWeights and stamped in ascending order at the hour's last minutes, as
// metrics.Reader.RecordedCompute feeds them. It prints, per set, how many workloads come
// out higher and lower than raw and the distribution of the differences (share of one
// GPU) of the 0.5, 0.9 (the compute target) and 0.95 percentiles and of the effective
// compute (estimate.Config.ComputeRequest). -smooth takes each raw minute as the mean of
// it and the minute before, as Prometheus 2's ranges (closed at the start) read
// samples lying exactly on whole minutes at whole-minute steps, which is what
// hack/benchrules -bootstrap's raw read sees. Run from the repository root:
//
//	go run ./hack/benchquantiles -pods 1000 -days 1
//	go run ./hack/benchquantiles -pods 300 -days 2 -seed 2 -smooth
package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"time"

	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
	"github.com/gpufrac/gpufrac/trace"
)

type quantileSet struct {
	name string
	q    []float64
}

func main() {
	pods := flag.Int("pods", 1000, "GPU pods (5 per workload)")
	days := flag.Int("days", 1, "days of history")
	seed := flag.Uint64("seed", 1, "trace.Synthesize seed")
	smooth := flag.Bool("smooth", false, "raw minute = mean of it and the minute before (Prometheus 2 at whole minutes)")
	flag.Parse()
	dec := []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}
	with := func(extra ...float64) []float64 {
		s := append(slices.Clone(dec), extra...)
		slices.Sort(s)
		return s
	}
	sets := []quantileSet{
		{"deciles (before)", dec},
		{"deciles, 0.91, 0.96, 0.995", with(0.91, 0.96, 0.995)},
		{"deciles, 0.51, 0.92, 0.97", with(0.51, 0.92, 0.97)},
		{"metrics.HistoryComputeQuantiles", metrics.HistoryComputeQuantiles},
	}
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	span := time.Duration(*days) * 24 * time.Hour
	from := end.Add(-span)
	t := trace.Synthesize(trace.SynthOptions{Workloads: *pods / 5, PodsPerWorkload: 5, Duration: span + time.Hour, Step: time.Minute, Seed: *seed, End: end, Namespace: "bench"})
	byWorkload := map[string][]trace.Pod{}
	var order []string
	for _, p := range t.Pods {
		if byWorkload[p.Workload] == nil {
			order = append(order, p.Workload)
		}
		byWorkload[p.Workload] = append(byWorkload[p.Workload], p)
	}
	newHist := func() vpautil.Histogram {
		return vpautil.NewDecayingHistogram(history.ComputeBuckets, history.DefaultHalfLife)
	}
	est := estimate.Config{}
	read := func(h vpautil.Histogram) [4]float64 {
		return [4]float64{h.Percentile(0.5), h.Percentile(0.9), h.Percentile(0.95), est.ComputeRequest(h)}
	}
	diffs := make([][4][]float64, len(sets))
	for _, w := range order {
		raw := newHist()
		fed := make([]vpautil.Histogram, len(sets))
		for i := range fed {
			fed[i] = newHist()
		}
		for _, p := range byWorkload[w] {
			hours := map[int64][]float64{}
			prev := math.NaN()
			for _, pt := range p.Compute {
				if pt.T.After(from) && !pt.T.After(end) {
					v := pt.V
					if *smooth && !math.IsNaN(prev) {
						v = (prev + pt.V) / 2
					}
					raw.AddSample(v, 1, pt.T)
					h := pt.T.Add(-time.Millisecond).Truncate(time.Hour).Add(time.Hour).Unix()
					hours[h] = append(hours[h], pt.V)
				}
				prev = pt.V
			}
			for h, v := range hours {
				slices.Sort(v)
				for i, s := range sets {
					at := time.Unix(h, 0).Add(-time.Duration(len(v)-1) * time.Minute)
					for k, n := range metrics.QuantileWeights(s.q, len(v)) {
						for range n {
							fed[i].AddSample(metrics.QuantileAtLeast(promtest.Quantile(s.q[k], v)), 1, at)
							at = at.Add(time.Minute)
						}
					}
				}
			}
		}
		r := read(raw)
		for i := range sets {
			f := read(fed[i])
			for j := range f {
				diffs[i][j] = append(diffs[i][j], f[j]-r[j])
			}
		}
	}
	fmt.Printf("%d pods × %d days, seed %d, smooth %v: recorded − raw per workload (%d), share of one GPU\n\n", *pods, *days, *seed, *smooth, len(order))
	fmt.Println("| quantiles (points per hour) | read | higher | lower | p50 | p90 | max |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i, s := range sets {
		for j, name := range []string{"percentile 0.5", "percentile 0.9 (target)", "percentile 0.95", "effective compute"} {
			d := diffs[i][j]
			slices.Sort(d)
			higher, lower := 0, 0
			for _, x := range d {
				switch {
				case x > 1e-12:
					higher++
				case x < -1e-12:
					lower++
				}
			}
			fmt.Printf("| %s (%d) | %s | %d | %d | %.3f | %.3f | %.3f |\n", s.name, len(s.q)+1, name, higher, lower, d[len(d)/2], d[len(d)*9/10], d[len(d)-1])
		}
	}
}

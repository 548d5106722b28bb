package metrics_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// The recorded quantiles, each weighed by ComputeQuantileWeights and raised by
// QuantileAtLeast, stochastically dominate the hour's minute means for every count of
// minutes (a partial hour too) and every shape: at any value, the fed weight at or below
// it is at most the count of minute means at or below it. So every percentile of the
// fed samples is at least the raw one's, and the weights add up to the minutes. A whole
// hour gives every quantile a weight: 6 minutes to the 0.8 decile, one to each of the
// top minute ranks.
func TestComputeQuantileWeightsDominate(t *testing.T) {
	w := metrics.ComputeQuantileWeights(metrics.HistoryMinutesPerHour)
	if slices.Contains(w, 0) || w[len(w)-metrics.HistoryComputeTopMinutes-1] != 6 {
		t.Errorf("a whole hour's weights %v (quantiles %v): want none 0 and 6 for the 0.8 decile", w, metrics.HistoryComputeQuantiles)
	}
	for _, x := range w[len(w)-metrics.HistoryComputeTopMinutes:] {
		if x != 1 {
			t.Errorf("a whole hour's weights %v: want 1 for each of the top %d quantiles", w, metrics.HistoryComputeTopMinutes)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]func(i, n int) float64{
		"uniform": func(int, int) float64 { return rng.Float64() },
		"bursty":  func(int, int) float64 { return map[bool]float64{true: 0.95, false: 0.02}[rng.IntN(10) == 0] },
		"ramp":    func(i, n int) float64 { return float64(i) / float64(n) },
		"two":     func(i, _ int) float64 { return float64(i % 2) },
	}
	for name, shape := range shapes {
		for n := 1; n <= 2*metrics.HistoryMinutesPerHour; n++ {
			for trial := 0; trial < 5; trial++ {
				v := make([]float64, n)
				for i := range v {
					v[i] = shape(i, n)
				}
				slices.Sort(v)
				w := metrics.ComputeQuantileWeights(n)
				sum := 0
				for _, x := range w {
					sum += x
				}
				if sum != n {
					t.Fatalf("n=%d: weights %v add up to %d", n, w, sum)
				}
				dec := make([]float64, len(w))
				for k, q := range metrics.HistoryComputeQuantiles {
					dec[k] = metrics.QuantileAtLeast(promtest.Quantile(q, v))
				}
				for _, x := range append(slices.Clone(v), dec...) {
					fed, raw := 0, 0
					for k, d := range dec {
						if d <= x {
							fed += w[k]
						}
					}
					for _, m := range v {
						if m <= x {
							raw++
						}
					}
					if fed > raw {
						t.Fatalf("%s n=%d: %d fed samples at or below %g, %d minute means (weights %v, quantiles %v)", name, n, fed, x, raw, w, dec)
					}
				}
			}
		}
	}
}

package history

import (
	"math"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// BenchmarkAdd feeds one container a day of per-minute compute and memory samples
// through Model.Add, as a history load feeds every container (a day's series a call):
// the per-sample cost of the history model in the recommender's bootstrap.
func BenchmarkAdd(b *testing.B) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	id := metrics.ContainerID{Namespace: "ns", Pod: "p-0", Container: "c"}
	day := func(d int) (compute, memory metrics.Series) {
		compute = metrics.Series{ID: id, Source: metrics.DCGMGREngineActive, Window: time.Minute}
		memory = metrics.Series{ID: id, Source: metrics.DCGMFBUsed}
		for i := range 24 * 60 {
			t := start.Add(time.Duration(d*24*60+i+1) * time.Minute)
			v := 0.3 + 0.2*math.Sin(float64(i)/90)
			compute.Samples = append(compute.Samples, metrics.Sample{Time: t, Value: v})
			memory.Samples = append(memory.Samples, metrics.Sample{Time: t, Value: 20e9 + 1e9*v})
		}
		return compute, memory
	}
	const days = 8
	var compute, memory [days]metrics.Series
	for d := range days {
		compute[d], memory[d] = day(d)
	}
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "w"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m := NewModel(Options{})
		for d := range days {
			m.Add(w, metrics.SignalMemory, memory[d])
			m.Add(w, metrics.SignalCompute, compute[d])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*days*24*60*2), "ns/sample")
}

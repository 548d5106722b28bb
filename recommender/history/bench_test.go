package history

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// BenchmarkAdd feeds one container 8 days of per-minute compute and memory samples
// through Model.Add, as a history load feeds every container (a day's series a call):
// the per-sample cost of the history model in the recommender's bootstrap. With pods=5
// the container's workload has 5 pods, each day's series fed one pod after another
// (as make bench-scale's workloads).
func BenchmarkAdd(b *testing.B) {
	for _, pods := range []int{1, 5} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchmarkAdd(b, pods) })
	}
}

func benchmarkAdd(b *testing.B, pods int) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	day := func(d, pod int) (compute, memory metrics.Series) {
		id := metrics.ContainerID{Namespace: "ns", Pod: fmt.Sprintf("p-%d", pod), Container: "c"}
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
	compute, memory := make([][]metrics.Series, days), make([][]metrics.Series, days)
	for d := range days {
		for p := range pods {
			c, m := day(d, p)
			compute[d], memory[d] = append(compute[d], c), append(memory[d], m)
		}
	}
	w := WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "w"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m := NewModel(Options{})
		for d := range days {
			for p := range pods {
				m.Add(w, metrics.SignalMemory, memory[d][p])
				m.Add(w, metrics.SignalCompute, compute[d][p])
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*days*24*60*2*pods), "ns/sample")
}

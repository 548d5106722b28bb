package recommender

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// BenchmarkCycle measures one steady-state recommender cycle over 10,000 pods in 2,000
// workloads (20 namespaces), with a fake API client and canned Prometheus responses.
// It reports Prometheus queries per cycle, which must not depend on the workload count.
func BenchmarkCycle(b *testing.B) {
	for _, workloads := range []int{200, 2000} {
		b.Run(fmt.Sprintf("workloads=%d/pods=%d", workloads, workloads*5), func(b *testing.B) {
			var objs []client.Object
			prom := &fakeProm{mem: map[string]float64{}, cpu: map[string]float64{}}
			for i := 0; i < workloads; i++ {
				ns, name := fmt.Sprintf("ns-%02d", i%20), fmt.Sprintf("wl-%04d", i)
				for _, o := range deployment(ns, name, 5) {
					objs = append(objs, o)
					if p, ok := o.(*corev1.Pod); ok {
						prom.pods = append(prom.pods, metrics.ContainerID{Namespace: ns, Pod: p.Name, Container: "main"})
						prom.mem[p.Name] = float64(10+i%30) * gib
						prom.cpu[p.Name] = float64(i%90) / 100
					}
				}
				objs = append(objs, gfa(ns, name, name))
			}
			h := newHarness(b, objs, prom)
			h.rec.Config.HistoryLength = time.Hour // keep the one-off bootstrap small
			ctx := context.Background()
			// Bootstrap, then warm-up cycles: with an hour of history the bounds still
			// narrow each minute (VPA's confidence multipliers) and get written; steady
			// state is what every later cycle costs.
			for i := 0; i < 10; i++ {
				if err := h.rec.RunOnce(ctx); err != nil {
					b.Fatal(err)
				}
				h.now = h.now.Add(time.Minute)
			}
			prom.queries.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.now = h.now.Add(time.Minute)
				if err := h.rec.RunOnce(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(prom.queries.Load())/float64(b.N), "queries/cycle")
		})
	}
}

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
//
// The shards=2 case splits the same 2,000 autoscalers between two recommender shards
// (spec.recommenders: the even namespaces name shard "b") and measures one shard's cycle;
// the fake Prometheus answers only for the namespaces a query selects, as Prometheus does.
func BenchmarkCycle(b *testing.B) {
	for _, c := range []struct{ workloads, shards int }{{200, 1}, {2000, 1}, {2000, 2}} {
		name := fmt.Sprintf("workloads=%d/pods=%d", c.workloads, c.workloads*5)
		if c.shards > 1 {
			name += fmt.Sprintf("/shards=%d", c.shards)
		}
		b.Run(name, func(b *testing.B) {
			var objs []client.Object
			prom := &fakeProm{mem: map[string]float64{}, cpu: map[string]float64{}}
			for i := 0; i < c.workloads; i++ {
				ns, name := fmt.Sprintf("ns-%02d", i%20), fmt.Sprintf("wl-%04d", i)
				for _, o := range deployment(ns, name, 5) {
					objs = append(objs, o)
					if p, ok := o.(*corev1.Pod); ok {
						prom.pods = append(prom.pods, metrics.ContainerID{Namespace: ns, Pod: p.Name, Container: "main"})
						prom.mem[p.Name] = float64(10+i%30) * gib
						prom.cpu[p.Name] = float64(i%90) / 100
					}
				}
				g := gfa(ns, name, name)
				if c.shards > 1 && i%20%2 == 0 {
					g = inShard(g, "b")
				}
				objs = append(objs, g)
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
			b.ReportMetric(float64(len(h.rec.tracked)), "workloads/shard")
		})
	}
}

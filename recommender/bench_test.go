package recommender

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
			h, prom := benchFleet(b, c.workloads, c.shards, 10)
			ctx := context.Background()
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

// benchFleet returns a harness over workloads Deployments of 5 pods each in 20
// namespaces (with shards > 1 the even namespaces' autoscalers name shard "b"), after
// the bootstrap and warm-up cycles in all: with an hour of history the bounds still
// narrow each minute (VPA's confidence multipliers) and get written; steady state is
// what every later cycle costs.
func benchFleet(b *testing.B, workloads, shards, cycles int) (*harness, *fakeProm) {
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
		g := gfa(ns, name, name)
		if shards > 1 && i%20%2 == 0 {
			g = inShard(g, "b")
		}
		objs = append(objs, g)
	}
	h := newHarness(b, objs, prom)
	h.rec.Config.HistoryLength = time.Hour // keep the one-off bootstrap small
	for range cycles {
		if err := h.rec.RunOnce(context.Background()); err != nil {
			b.Fatal(err)
		}
		h.now = h.now.Add(time.Minute)
	}
	return h, prom
}

// BenchmarkScrape measures one read of the recommender's /metrics after a steady cycle
// over 10,000 pods in 2,000 workloads: the per-autoscaler and per-pod series gathered,
// checked, sorted and encoded as Prometheus asks for them (text, gzip), and as
// make bench-scale polls them (a few series by name[], which still gathers all).
func BenchmarkScrape(b *testing.B) {
	benchFleet(b, 2000, 1, 2) // the bootstrap, and a cycle that reads the live minute
	reg := WithAutoscalers(prometheus.NewRegistry())
	if err := Register(reg); err != nil {
		b.Fatal(err)
	}
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	for _, c := range []struct{ name, query string }{
		{"prometheus", ""},
		{"by-name", "?name[]=gpufrac_recommender_cycle_duration_seconds"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/metrics"+c.query, nil)
				req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
				req.Header.Set("Accept-Encoding", "gzip")
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
				}
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}

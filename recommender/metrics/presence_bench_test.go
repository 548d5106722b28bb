package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// BenchmarkComputeQueryPresence measures what pruning by Presence saves the PromQL
// engine (go.mod's Prometheus, in process): the compute read (DCGM's ComputeQuery, the
// raw form a clean namespace gets) and the dirty-namespace check (DirtyQuery, compute
// fields) over 6 hours of 1,000 pods publishing one DCGM field at one sample a minute,
// with honor_labels and no MIG: every branch, against the branches Presence keeps.
func BenchmarkComputeQueryPresence(b *testing.B) {
	prom := promtest.New(b)
	const pods, n = 1000, 6 * 60
	start := t0.Add(time.Minute)
	end := t0.Add(6 * time.Hour)
	for p := range pods {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64((i*7+p)%13) / 13
		}
		prom.Add(b, map[string]string{"__name__": DCGMSMActive, "namespace": "ns", "pod": fmt.Sprintf("p-%d", p), "container": "main",
			"UUID": fmt.Sprintf("GPU-%d", p), "job": "dcgm", "instance": "10.0.0.1:9400", "Hostname": "node-a"}, start, time.Minute, v...)
	}
	sel := Selector{Labels: DefaultLabels, Namespaces: []string{"ns"}, Device: DCGM{}.DeviceLabels(), Raw: true}
	present := &Presence{Metrics: map[string]bool{DCGMSMActive: true}}
	for _, c := range []struct {
		name    string
		present *Presence
	}{{"every-branch", nil}, {"pruned", present}} {
		s := sel
		s.Present = c.present
		b.Run("compute/"+c.name, func(b *testing.B) {
			q := DCGM{}.ComputeQuery(s, time.Minute)
			for b.Loop() {
				qry, err := prom.Engine.NewRangeQuery(context.Background(), prom.Storage, nil, q, start, end, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if res := qry.Exec(context.Background()); res.Err != nil {
					b.Fatal(res.Err)
				}
				qry.Close()
			}
		})
		b.Run("dirty/"+c.name, func(b *testing.B) {
			q := s.DirtyQuery(DCGM{}.Fields(SignalCompute), end.Sub(t0))
			for b.Loop() {
				qry, err := prom.Engine.NewInstantQuery(context.Background(), prom.Storage, nil, q, end)
				if err != nil {
					b.Fatal(err)
				}
				if res := qry.Exec(context.Background()); res.Err != nil {
					b.Fatal(res.Err)
				}
				qry.Close()
			}
		})
	}
}

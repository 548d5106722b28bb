package metrics

import (
	"context"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"

	promapi "github.com/gpufrac/gpufrac/prom"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// TestRangeFromSamplesEqualsComputeQuery checks, on the real PromQL engine, that the
// compute read from raw samples answers what the range query of Source.ComputeQuery
// answers over the same steps: per container and step the same mean activity (ratio
// 0–1, from the percent field and from a ratio field), the same source, the devices of
// a container and one device seen by two exporter instances merged with max, and the
// samples of a window with an impossible value (NaN, above the unit's maximum,
// negative) dropped as the robust form drops them. The scrapes are every 15 s, 5 s off
// the minute, so every window holds four samples and the robust form's subquery sees
// each of them. The read through Prometheus' remote read API (a RawReader) answers the
// same, to the bit.
func TestRangeFromSamplesEqualsComputeQuery(t *testing.T) {
	const n = 3 * 240 // three hours every 15 s
	first := t0.Add(5 * time.Second)
	start, end := t0.Add(time.Hour), t0.Add(3*time.Hour)
	for _, tc := range []struct {
		field string
		max   float64
	}{{DCGMGPUUtil, 100}, {DCGMSMActive, 1}} {
		t.Run(tc.field, func(t *testing.T) {
			prom := promtest.New(t)
			add := func(l map[string]string, base float64, phase int, bad map[int]float64) {
				l = maps.Clone(l)
				l["__name__"] = tc.field
				prom.Add(t, l, first, 15*time.Second, varied(n, base*tc.max, 0.6*tc.max, phase, bad)...)
				m := maps.Clone(l)
				m["__name__"] = DCGMFBUsed
				mem := varied(n, 20000, 4000, phase, nil)
				for i := range mem {
					mem[i] += float64(3 * i) // growing: each hour's peak differs
				}
				if bad != nil { // NaN, a DCGM blank sentinel at what would be the window's peak, negative
					mem[300], mem[301], mem[450] = math.NaN(), 9223372036854775794, -1
				}
				prom.Add(t, m, first, 15*time.Second, mem...)
			}
			pod := func(ns string, i int) map[string]string {
				return map[string]string{"namespace": ns, "pod": fmt.Sprintf("p-%d", i), "container": "main", "UUID": fmt.Sprintf("GPU-%d", i), "Hostname": "node-a", "instance": "10.0.0.1:9400"}
			}
			add(pod("a", 0), 0.1, 0, nil)
			add(pod("a", 1), 0.2, 3, map[int]float64{300: math.NaN(), 301: 1.37 * tc.max, 450: -1})
			twice := pod("b", 2)
			add(twice, 0.1, 5, nil)
			twice["instance"] = "10.0.0.2:9400" // the same GPU scraped from a second exporter
			add(twice, 0.3, 9, nil)
			multi := pod("b", 3)
			add(multi, 0.05, 2, nil)
			multi["UUID"] = "GPU-3b" // a second GPU of the same container
			add(multi, 0.25, 7, nil)
			add(pod("elsewhere", 4), 0.5, 1, nil) // not selected

			src := DCGM{}
			r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: src.DeviceLabels()}
			sel := Selector{Labels: DefaultLabels, Device: src.DeviceLabels(), Namespaces: []string{"a", "b"}}
			ctx := context.Background()
			p, err := r.Presence(ctx, sel, append(src.Fields(SignalMemory), src.Fields(SignalCompute)...), start.Add(-time.Minute), end)
			if err != nil {
				t.Fatal(err)
			}
			sel.Present = p
			sr, ok := ComputeSamples(src, sel)
			if !ok {
				t.Fatalf("one compute field, no exported series, no MIG: want a sample read, presence %+v", *p)
			}
			got, err := r.RangeFromSamples(ctx, SignalCompute, sr, start, end, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// The same samples through Prometheus' remote read API (prom.NewAPI is a
			// RawReader; promtest streams chunks of 120 samples, a frame each): the
			// same answer, to the bit, and read that way.
			c, err := api.NewClient(api.Config{Address: prom.URL})
			if err != nil {
				t.Fatal(err)
			}
			rr := &Reader{API: promapi.NewAPI(c, nil), Labels: DefaultLabels, Device: src.DeviceLabels()}
			before := len(prom.Queries())
			remote, err := rr.RangeFromSamples(ctx, SignalCompute, sr, start, end, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if q := prom.Queries()[before:]; len(q) != 1 || !strings.HasPrefix(q[0], promtest.RemoteReadPrefix) {
				t.Fatalf("queries of the remote read: %q, want one remote read", q)
			}
			if !reflect.DeepEqual(remote, got) {
				t.Fatalf("remote read:\n%+v\nquery API:\n%+v", remote, got)
			}
			// The robust form for every namespace (the impossible samples of a/p-1).
			want, err := r.Range(ctx, SignalCompute, src.ComputeQuery(sel, time.Minute), start, end, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) || len(got) != 4 {
				t.Fatalf("%d series from samples, %d from the range query; want 4 each", len(got), len(want))
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.ID != w.ID || g.Source != w.Source || g.Source != tc.field || g.Devices != w.Devices || len(g.Samples) != len(w.Samples) || len(g.Samples) != 121 {
					t.Fatalf("series %d: from samples %v %s, %d devices, %d samples; range query %v %s, %d devices, %d samples; want 121 samples",
						i, g.ID, g.Source, g.Devices, len(g.Samples), w.ID, w.Source, w.Devices, len(w.Samples))
				}
				for j := range w.Samples {
					gs, ws := g.Samples[j], w.Samples[j]
					if !gs.Time.Equal(ws.Time) || math.Abs(gs.Value-ws.Value) > 1e-12 {
						t.Fatalf("%v sample %d: from samples %v at %s, range query %v at %s", w.ID, j, gs.Value, gs.Time, ws.Value, ws.Time)
					}
				}
			}

			// Memory peaks (bytes) of hourly windows, and of one window ending at end
			// (the running interval's instant read), against Source.MemoryPeakQuery
			// read as the load reads it, robust for every namespace; both ways.
			mr, ok := MemorySamples(src, sel)
			if !ok {
				t.Fatal("one memory field: want a sample read of the memory peaks")
			}
			for _, w := range []struct {
				start  time.Time
				window time.Duration
			}{{start, time.Hour}, {end, 30 * time.Minute}} {
				var want []Series
				if w.start.Equal(end) {
					want, err = r.InstantShared(ctx, SignalMemory, src.MemoryPeakQuery(sel, w.window), "", end, w.window)
				} else {
					want, err = r.Range(ctx, SignalMemory, src.MemoryPeakQuery(sel, w.window), w.start, end, w.window)
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, rd := range []*Reader{r, rr} {
					got, err := rd.RangeFromSamples(ctx, SignalMemory, mr, w.start, end, w.window)
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(want) || len(got) != 4 {
						t.Fatalf("memory over %s: %d series from samples, %d from the query; want 4 each", w.window, len(got), len(want))
					}
					for i := range want {
						g, q := got[i], want[i]
						if g.ID != q.ID || g.Source != q.Source || g.Devices != q.Devices || g.Window != q.Window || !reflect.DeepEqual(g.Samples, q.Samples) {
							t.Fatalf("memory over %s, series %d: from samples %+v\nquery %+v", w.window, i, g, q)
						}
					}
				}
			}
		})
	}
}

// TestComputeSamplesOnlyOneSelector checks that ComputeSamples offers a sample read
// only where the compute query is one series selector: not without a Presence, not for
// several fields (the preferred one is chosen per container and step), not where
// series were scraped without honor_labels (relabelled in PromQL), not for an
// instance-relative field on MIG instances (clamped), and not for a source whose field
// renames its labels (HAMi's).
func TestComputeSamplesOnlyOneSelector(t *testing.T) {
	sel := Selector{Labels: DefaultLabels, Device: DCGM{}.DeviceLabels(), Namespaces: []string{"a"}}
	with := func(p *Presence) Selector { s := sel; s.Present = p; return s }
	one := func(metric string) map[string]bool { return map[string]bool{DCGMFBUsed: true, metric: true} }
	for _, tc := range []struct {
		name string
		src  Source
		sel  Selector
		want string // the selector, "" for none
	}{
		{"no presence", DCGM{}, sel, ""},
		{"utilisation only", DCGM{}, with(&Presence{Metrics: one(DCGMGPUUtil), MIG: true}), `DCGM_FI_DEV_GPU_UTIL{namespace=~"a",pod!="",exported_pod=""}`},
		{"SM active off MIG", DCGM{}, with(&Presence{Metrics: one(DCGMSMActive)}), `DCGM_FI_PROF_SM_ACTIVE{namespace=~"a",pod!="",exported_pod="",GPU_I_ID=""}`},
		{"SM active on MIG", DCGM{}, with(&Presence{Metrics: one(DCGMSMActive), MIG: true}), ""},
		{"two fields", DCGM{}, with(&Presence{Metrics: map[string]bool{DCGMSMActive: true, DCGMGPUUtil: true}}), ""},
		{"exported", DCGM{}, with(&Presence{Metrics: one(DCGMGPUUtil), Exported: true}), ""},
		{"no compute field", DCGM{}, with(&Presence{Metrics: map[string]bool{DCGMFBUsed: true}}), ""},
		{"every namespace", DCGM{}, func() Selector { s := with(&Presence{Metrics: one(DCGMGPUUtil)}); s.AllNamespaces = true; return s }(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr, ok := ComputeSamples(tc.src, tc.sel)
			if ok != (tc.want != "") || sr.Selector != tc.want {
				t.Fatalf("ComputeSamples = %q, %v; want %q", sr.Selector, ok, tc.want)
			}
		})
	}
	for _, src := range []Source{HAMi, KAI} {
		p := &Presence{Metrics: map[string]bool{}}
		for _, f := range src.Fields(SignalCompute) {
			p.Metrics[f.Metric] = true
			if sr, ok := ComputeSamples(src, with(p)); ok && (f.Labels != nil || f.NoContainer || f.Device != nil) {
				t.Errorf("%s: a sample read %q for field %s, whose labels are renamed in PromQL", src.Name(), sr.Selector, f.Metric)
			}
			delete(p.Metrics, f.Metric)
		}
	}
}

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

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// TestPresencePrunesOnlyEmptyBranches checks Reader.Presence and the queries it prunes
// on the real PromQL engine: over six hours of samples it finds which fields have
// series, whether any was scraped without honor_labels and whether any is on a MIG
// instance, and the pruned memory peaks, flatness, compute and dirty-namespace reads
// answer exactly as the queries with every branch, for clusters that have each branch
// (exported series, MIG instances, three compute fields, an impossible sample) and for
// the plain cluster whose queries lose every empty branch.
func TestPresencePrunesOnlyEmptyBranches(t *testing.T) {
	const n = 6 * 120 // six hours every 30 s
	start := t0.Add(30 * time.Second)
	end := t0.Add(6 * time.Hour)
	vary := func(base, amp float64, phase int, bad map[int]float64) []float64 {
		return varied(n, base, amp, phase, bad)
	}
	type pod struct {
		ns       string
		exported bool
		mig      bool
		fields   []string // DCGM fields it publishes besides FB_USED
		bad      map[int]float64
	}
	write := func(prom *promtest.Server, pods []pod) {
		for i, p := range pods {
			l := map[string]string{"namespace": p.ns, "pod": fmt.Sprintf("%s-%d", p.ns, i), "container": "main", "UUID": fmt.Sprintf("GPU-%d", i), "Hostname": "node-a"}
			if p.exported {
				l["exported_namespace"], l["exported_pod"], l["exported_container"] = l["namespace"], l["pod"], "main"
				l["namespace"], l["pod"], l["container"] = "gpu-operator", "dcgm-exporter-x", "exporter"
			}
			if p.mig {
				l[MIGInstanceLabel], l[MIGProfileLabel] = "1", "1g.10gb"
			}
			with := func(metric string) map[string]string {
				m := maps.Clone(l)
				m["__name__"] = metric
				return m
			}
			prom.Add(t, with(DCGMFBUsed), start, 30*time.Second, vary(20000, 4000, i, p.bad)...)
			for _, f := range p.fields {
				switch f {
				case DCGMGPUUtil:
					prom.Add(t, with(f), start, 30*time.Second, vary(30, 50, i, nil)...)
				default:
					prom.Add(t, with(f), start, 30*time.Second, vary(0.2, 0.6, i, nil)...)
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		pods []pod
		want Presence
		// pruned are texts the pruned compute query must no longer hold.
		pruned []string
	}{{
		name: "plain",
		pods: []pod{
			{ns: "a", fields: []string{DCGMSMActive}},
			{ns: "a", fields: []string{DCGMSMActive}},
			{ns: "b", fields: []string{DCGMSMActive}, bad: map[int]float64{100: math.NaN()}},
		},
		want:   Presence{Metrics: map[string]bool{DCGMFBUsed: true, DCGMSMActive: true}},
		pruned: []string{"exported_namespace", MIGInstanceLabel + `!=""`, DCGMGREngineActive, DCGMGPUUtil},
	}, {
		name: "every branch",
		pods: []pod{
			{ns: "a", fields: []string{DCGMSMActive, DCGMGPUUtil}},
			{ns: "a", exported: true, fields: []string{DCGMGREngineActive}},
			{ns: "b", mig: true, fields: []string{DCGMSMActive}, bad: map[int]float64{300: -1}},
			{ns: "b", fields: []string{DCGMGPUUtil}},
		},
		want: Presence{Metrics: map[string]bool{DCGMFBUsed: true, DCGMSMActive: true, DCGMGREngineActive: true, DCGMGPUUtil: true}, Exported: true, MIG: true},
	}, {
		name: "series outside the namespaces",
		pods: []pod{
			{ns: "a", fields: []string{DCGMSMActive}},
			{ns: "elsewhere", exported: true, mig: true, fields: []string{DCGMSMActive, DCGMGPUUtil}},
		},
		want:   Presence{Metrics: map[string]bool{DCGMFBUsed: true, DCGMSMActive: true}},
		pruned: []string{"exported_namespace", DCGMGPUUtil},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			prom := promtest.New(t)
			write(prom, tc.pods)
			src := DCGM{}
			r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: src.DeviceLabels()}
			sel := Selector{Labels: DefaultLabels, Device: src.DeviceLabels(), Namespaces: []string{"a", "b"}}
			ctx := context.Background()
			fields := append(src.Fields(SignalMemory), src.Fields(SignalCompute)...)
			p, err := r.Presence(ctx, sel, fields, t0, end)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*p, tc.want) {
				t.Fatalf("presence %+v, want %+v", *p, tc.want)
			}
			pruned := sel
			pruned.Present = p
			q := src.ComputeQuery(pruned, time.Minute)
			for _, s := range tc.pruned {
				if strings.Contains(q, s) {
					t.Errorf("the pruned compute query still reads %s: %s", s, q)
				}
			}
			for _, sig := range []Signal{SignalMemory, SignalCompute} {
				all, err := r.DirtyNamespaces(ctx, sel, src.Fields(sig), t0, end)
				if err != nil {
					t.Fatal(err)
				}
				got, err := r.DirtyNamespaces(ctx, pruned, src.Fields(sig), t0, end)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, all) {
					t.Errorf("%s: pruned dirty namespaces %v, every branch %v", sig, got, all)
				}
			}
			for _, rd := range []struct {
				what   string
				signal Signal
				window time.Duration
				mk     func(Selector, time.Duration) string
			}{
				{"memory peaks", SignalMemory, time.Hour, src.MemoryPeakQuery},
				{"flatness", SignalMemory, time.Hour, func(s Selector, w time.Duration) string { return FlatQuery(src, s, w) }},
				{"compute", SignalCompute, time.Minute, src.ComputeQuery},
			} {
				for _, raw := range []bool{false, true} {
					s, ps := sel, pruned
					s.Raw, ps.Raw = raw, raw
					from := t0.Add(rd.window)
					want, err := r.Range(ctx, rd.signal, rd.mk(s, rd.window), from, end, rd.window)
					if err != nil {
						t.Fatal(err)
					}
					got, err := r.Range(ctx, rd.signal, rd.mk(ps, rd.window), from, end, rd.window)
					if err != nil {
						t.Fatal(err)
					}
					if len(want) == 0 {
						t.Fatalf("%s (raw %v): no series", rd.what, raw)
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s (raw %v): the pruned read differs:\nevery branch %+v\npruned       %+v", rd.what, raw, want, got)
					}
				}
			}
		})
	}
}

// TestPresenceFailureReadsEveryBranch checks that a Presence that could not be found
// is an error (the plan then reads every branch), and that a selector reading every
// namespace (CopiesQuery) is never pruned by the Presence of its namespaces.
func TestPresenceFailureReadsEveryBranch(t *testing.T) {
	prom := promtest.New(t)
	prom.SetFailure(fmt.Errorf("overloaded"))
	r := &Reader{API: prom.API(t), Labels: DefaultLabels}
	sel := Selector{Labels: DefaultLabels, Device: DCGM{}.DeviceLabels(), Namespaces: []string{"a"}}
	if p, err := r.Presence(context.Background(), sel, DCGM{}.Fields(SignalCompute), t0, t0.Add(time.Hour)); err == nil {
		t.Fatalf("presence %+v from a failing Prometheus, want an error", p)
	}
	none := &Presence{Metrics: map[string]bool{}}
	sel.Present = none
	all := sel
	all.Present = nil
	for _, sig := range []Signal{SignalMemory, SignalCompute} {
		if got, want := CopiesQuery(DCGM{}, sel, sig, time.Minute), CopiesQuery(DCGM{}, all, sig, time.Minute); got != want {
			t.Errorf("%s: the copies query over every namespace was pruned:\n%s\nwant\n%s", sig, got, want)
		}
	}
}

// varied returns n samples that vary between base and base + amp in a cycle of 13
// (shifted by phase), with the values of bad at their indexes: impossible samples
// among valid ones.
func varied(n int, base, amp float64, phase int, bad map[int]float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = base + amp*float64((i*7+phase)%13)/13
		if b, ok := bad[i]; ok {
			v[i] = b
		}
	}
	return v
}

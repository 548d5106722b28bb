package metrics

import (
	"context"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// TestSplitQueryEqualsRobust checks the split of long reads (clean.go) on the real
// PromQL engine: over six hours of varying samples in namespaces that each hold one kind
// of impossible sample (NaN, +Inf, negative, a blank sentinel, a MIG instance's
// overshoot, one in series scraped without honor_labels) and in clean namespaces (with
// honor_labels, without, HAMi ≤ 2.8's own label names), DirtyNamespaces names exactly
// the namespaces holding one, and the memory peaks, flatness and compute read with
// SplitQuery decode to the same series, sample for sample, as the robust queries.
func TestSplitQueryEqualsRobust(t *testing.T) {
	const n = 6 * 120 // six hours every 30 s
	start := t0.Add(30 * time.Second)
	end := t0.Add(6 * time.Hour)
	vary := func(base, amp float64, bad map[int]float64) []float64 { return varied(n, base, amp, 0, bad) }
	series := func(metric, ns string, exported bool, extra map[string]string) map[string]string {
		l := map[string]string{"__name__": metric, "namespace": ns, "pod": ns + "-0", "container": "main", "UUID": "GPU-" + ns}
		if exported {
			l["exported_namespace"], l["exported_pod"], l["exported_container"] = ns, ns+"-0", "main"
			l["namespace"], l["pod"], l["container"] = "gpu-operator", "dcgm-exporter-x", "exporter"
		}
		maps.Copy(l, extra)
		return l
	}
	for _, tc := range []struct {
		src   Source
		write func(prom *promtest.Server)
		dirty []string
	}{{
		src: DCGM{},
		write: func(prom *promtest.Server) {
			add := func(ns string, exported bool, extra map[string]string, fb, sm, util []float64) {
				prom.Add(t, series(DCGMFBUsed, ns, exported, extra), start, 30*time.Second, fb...)
				prom.Add(t, series(DCGMSMActive, ns, exported, extra), start, 30*time.Second, sm...)
				prom.Add(t, series(DCGMGPUUtil, ns, exported, extra), start, 30*time.Second, util...)
			}
			add("clean", false, nil, vary(20000, 4000, nil), vary(0.3, 0.5, nil), vary(30, 50, nil))
			add("exported", true, nil, vary(10000, 9000, nil), vary(0.1, 0.8, nil), vary(10, 80, nil))
			add("nan", false, nil, vary(20000, 4000, map[int]float64{300: math.NaN()}), vary(0.3, 0.5, nil), vary(30, 50, nil))
			add("inf", false, nil, vary(20000, 4000, nil), vary(0.3, 0.5, nil), vary(30, 50, map[int]float64{500: math.Inf(1)}))
			add("negative", false, nil, vary(20000, 4000, nil), vary(0.3, 0.5, map[int]float64{42: -0.2}), vary(30, 50, nil))
			add("sentinel", false, nil, vary(20000, 4000, map[int]float64{600: 9223372036854775794}), vary(0.3, 0.5, nil), vary(30, 50, nil))
			add("mig", false, map[string]string{MIGInstanceLabel: "1", MIGProfileLabel: "1g.10gb"},
				vary(5000, 4000, nil), vary(0.3, 0.5, map[int]float64{100: 1.4, 101: 1.3}), nil)
			add("exported-bad", true, nil, vary(10000, 9000, map[int]float64{200: -5}), vary(0.1, 0.8, nil), vary(10, 80, nil))
		},
		dirty: []string{"exported-bad", "inf", "mig", "nan", "negative", "sentinel"},
	}, {
		src: HAMi,
		write: func(prom *promtest.Server) {
			legacy := func(metric, ns string) map[string]string {
				return map[string]string{"__name__": metric, "podnamespace": ns, "podname": ns + "-0", "ctrname": "main", "deviceuuid": "GPU-" + ns, "vdeviceid": "0"}
			}
			prom.Add(t, series(HAMiMemory, "clean", false, map[string]string{"device_uuid": "GPU-clean"}), start, 30*time.Second, vary(2e10, 4e9, nil)...)
			prom.Add(t, series(HAMiUtilization, "clean", false, map[string]string{"device_uuid": "GPU-clean"}), start, 30*time.Second, vary(30, 50, nil)...)
			prom.Add(t, legacy(HAMiLegacyMemory, "legacy"), start, 30*time.Second, vary(2e10, 4e9, nil)...)
			prom.Add(t, legacy(HAMiLegacyUtilization, "legacy"), start, 30*time.Second, vary(30, 50, nil)...)
			prom.Add(t, legacy(HAMiLegacyMemory, "legacy-bad"), start, 30*time.Second, vary(2e10, 4e9, map[int]float64{7: math.NaN()})...)
			prom.Add(t, legacy(HAMiLegacyUtilization, "legacy-bad"), start, 30*time.Second, vary(30, 50, map[int]float64{8: 130})...)
		},
		dirty: []string{"legacy-bad"},
	}} {
		t.Run(tc.src.Name(), func(t *testing.T) {
			prom := promtest.New(t)
			tc.write(prom)
			r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: tc.src.DeviceLabels()}
			sel := Selector{Labels: DefaultLabels, Device: tc.src.DeviceLabels(),
				Namespaces: []string{"clean", "exported", "nan", "inf", "negative", "sentinel", "mig", "exported-bad", "legacy", "legacy-bad"}}
			ctx := context.Background()
			dirty := map[string]bool{}
			for _, sig := range []Signal{SignalMemory, SignalCompute} {
				d, err := r.DirtyNamespaces(ctx, sel, tc.src.Fields(sig), t0, end)
				if err != nil {
					t.Fatal(err)
				}
				maps.Copy(dirty, d)
			}
			if got := slices.Sorted(maps.Keys(dirty)); !slices.Equal(got, tc.dirty) {
				t.Fatalf("dirty namespaces %v, want %v", got, tc.dirty)
			}
			for _, q := range []struct {
				what   string
				signal Signal
				window time.Duration
				mk     func(Selector, time.Duration) string
			}{
				{"memory peaks", SignalMemory, time.Hour, tc.src.MemoryPeakQuery},
				{"flatness", SignalMemory, time.Hour, func(s Selector, w time.Duration) string { return FlatQuery(tc.src, s, w) }},
				{"compute", SignalCompute, time.Minute, tc.src.ComputeQuery},
			} {
				from := t0.Add(q.window)
				robust, err := r.Range(ctx, q.signal, q.mk(sel, q.window), from, end, q.window)
				if err != nil {
					t.Fatal(err)
				}
				split, err := r.Range(ctx, q.signal, SplitQuery(sel, dirty, func(s Selector) string { return q.mk(s, q.window) }), from, end, q.window)
				if err != nil {
					t.Fatal(err)
				}
				if len(robust) == 0 {
					t.Fatalf("%s: no series", q.what)
				}
				if !reflect.DeepEqual(robust, split) {
					t.Errorf("%s: the split read differs from the robust one:\nrobust %+v\nsplit  %+v", q.what, robust, split)
				}
			}
		})
	}
}

// TestSplitQueryForms checks which form SplitQuery renders: every namespace robust when
// which are dirty is unknown (nil) or when all are, every one raw when none is, and
// otherwise the clean ones raw or the dirty ones robust.
func TestSplitQueryForms(t *testing.T) {
	sel := Selector{Labels: DefaultLabels, Namespaces: []string{"a", "b"}}
	mk := func(s Selector) string {
		form := "robust"
		if s.Raw {
			form = "raw"
		}
		return form + ":" + NamespaceRegex(s.Namespaces)
	}
	for _, tc := range []struct {
		dirty map[string]bool
		want  string
	}{
		{nil, "robust:a|b"},
		{map[string]bool{}, "raw:a|b"},
		{map[string]bool{"a": true, "b": true}, "robust:a|b"},
		{map[string]bool{"b": true, "elsewhere": true}, "(raw:a) or (robust:b)"},
	} {
		if got := SplitQuery(sel, tc.dirty, mk); got != tc.want {
			t.Errorf("dirty %v: %q, want %q", tc.dirty, got, tc.want)
		}
	}
}

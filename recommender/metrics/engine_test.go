package metrics

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// These tests run the sources' PromQL on the real engine (promtest) over samples with
// the exporters' published names, labels and units.

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func engineReader(t *testing.T, src Source) (*promtest.Server, *Reader, Selector) {
	prom := promtest.New(t)
	r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: src.DeviceLabels()}
	return prom, r, Selector{Labels: DefaultLabels, Namespaces: []string{"ml"}, Device: src.DeviceLabels()}
}

func dcgmSeries(metric, pod string) map[string]string {
	return map[string]string{"__name__": metric, "namespace": "ml", "pod": pod, "container": "main", "UUID": "GPU-1", "gpu": "0", "Hostname": "node-1", "modelName": "NVIDIA A100-SXM4-80GB"}
}

func dropped(signal Signal, reason string) float64 {
	return testutil.ToFloat64(SamplesDropped.WithLabelValues(string(signal), reason))
}

// Kind 3 (issue 13): the range filter runs inside PromQL, so the impossible samples are
// counted by a companion query: every one, by reason, once, while the targets stay as
// the filter makes them.
func TestImpossibleSamplesAreCounted(t *testing.T) {
	prom, r, sel := engineReader(t, DCGM{})
	sentinel := 9223372036854775794.0
	nan := math.NaN()
	// 120 samples every 30 s (one hour): FB_USED (MiB) with 3 blank sentinels, 2 NaN
	// and 1 negative; SM_ACTIVE (ratio) with 3 samples at 1.37; GPU_UTIL (percent) with
	// 2 at 104 and 1 at +Inf.
	fb, sm, util := promtest.Repeat(20000, 120), promtest.Repeat(0.5, 120), promtest.Repeat(60, 120)
	for _, i := range []int{10, 11, 70} {
		fb[i] = sentinel
	}
	fb[30], fb[31], fb[90] = nan, nan, -1
	fb[50] = 30000 // the window's true peak
	for _, i := range []int{5, 6, 100} {
		sm[i] = 1.37
	}
	util[40], util[41], util[42] = 104, 104, math.Inf(1)
	start := t0.Add(30 * time.Second)
	prom.Add(t, dcgmSeries(DCGMFBUsed, "p1"), start, 30*time.Second, fb...)
	prom.Add(t, dcgmSeries(DCGMSMActive, "p1"), start, 30*time.Second, sm...)
	prom.Add(t, dcgmSeries(DCGMGPUUtil, "p1"), start, 30*time.Second, util...)
	end := t0.Add(time.Hour)
	ctx := context.Background()

	before := map[string]float64{}
	for _, reason := range []string{DropOutOfRange, DropNaN, DropNegative, DropInf} {
		before["memory/"+reason] = dropped(SignalMemory, reason)
		before["compute/"+reason] = dropped(SignalCompute, reason)
	}
	// Counted over two loads that tile the hour: each sample once.
	mid := t0.Add(25 * time.Minute)
	for _, w := range [][2]time.Time{{t0, mid}, {mid, end}} {
		d, err := r.CountDropped(ctx, SignalMemory, sel, DCGM{}.Fields(SignalMemory), w[0], w[1])
		if err != nil {
			t.Fatal(err)
		}
		d.Record(SignalMemory)
	}
	drops, err := r.CountDropped(ctx, SignalCompute, sel, DCGM{}.Fields(SignalCompute), t0, end)
	if err != nil {
		t.Fatal(err)
	}
	drops.Record(SignalCompute)
	want := map[string]float64{"memory/" + DropOutOfRange: 3, "memory/" + DropNaN: 2, "memory/" + DropNegative: 1, "memory/" + DropInf: 0,
		"compute/" + DropOutOfRange: 5, "compute/" + DropInf: 1, "compute/" + DropNaN: 0, "compute/" + DropNegative: 0}
	for k, n := range want {
		sig, reason := Signal(k[:len(k)-len(k[indexSlash(k):])]), k[indexSlash(k)+1:]
		if d := dropped(sig, reason) - before[k]; d != n {
			t.Errorf("samples_dropped_total{%s} += %v, want %v", k, d, n)
		}
	}
	if got := drops.Total("ml", "p1"); got != 6 {
		t.Errorf("compute drops for ml/p1: %v, want 6", got)
	}

	// The targets stay as the in-PromQL filter makes them: the hour's peak is the valid
	// 30000 MiB, the mean SM_ACTIVE of valid samples is 0.5.
	mem, err := r.Instant(ctx, SignalMemory, DCGM{}.MemoryPeakQuery(sel, time.Hour), end)
	if err != nil || len(mem) != 1 {
		t.Fatalf("memory: %v %v", mem, err)
	}
	if got := mem[0].Samples[0].Value; got != 30000*MiB {
		t.Errorf("memory peak %v, want %v (the valid peak)", got, 30000*MiB)
	}
	cpu, err := r.Instant(ctx, SignalCompute, DCGM{}.ComputeQuery(sel, time.Hour), end)
	if err != nil || len(cpu) != 1 {
		t.Fatalf("compute: %v %v", cpu, err)
	}
	if got := cpu[0].Samples[0].Value; math.Abs(got-0.5) > 1e-9 || cpu[0].Source != DCGMSMActive {
		t.Errorf("compute %v from %s, want 0.5 from SM_ACTIVE", got, cpu[0].Source)
	}
}

func indexSlash(s string) int {
	for i := range s {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// Impossible samples are counted only in the namespaces that hold one in the window
// counted (Reader.CountDropped asks DirtyNamespaces first), over the same aligned window:
// a sentinel 3 s after the window's start, which alignment to the 15 s resolution puts
// inside it, is still counted; the clean namespace is not counted at all, and a window
// with no impossible sample sends no count query.
func TestCountOnlyInDirtyNamespaces(t *testing.T) {
	prom, r, sel := engineReader(t, DCGM{})
	sel.Namespaces = []string{"ml", "clean"}
	dirty, clean := dcgmSeries(DCGMFBUsed, "p1"), dcgmSeries(DCGMFBUsed, "p2")
	clean["namespace"] = "clean"
	prom.Add(t, dirty, t0.Add(18*time.Second), 30*time.Second, 9223372036854775794, 20000, 20000)
	prom.Add(t, dirty, t0.Add(2*time.Hour), 30*time.Second, promtest.Repeat(20000, 10)...)
	prom.Add(t, clean, t0, 30*time.Second, promtest.Repeat(10000, 300)...)
	ctx := context.Background()
	counts := func() []string {
		var out []string
		for _, q := range prom.Queries() {
			if strings.Contains(q, "changes((timestamp(") {
				out = append(out, q)
			}
		}
		return out
	}
	d, err := r.CountDropped(ctx, SignalMemory, sel, DCGM{}.Fields(SignalMemory), t0.Add(20*time.Second), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Total("ml", "p1"); got != 1 {
		t.Errorf("ml/p1: %v impossible samples counted, want the sentinel at 00:00:18", got)
	}
	if q := counts(); len(q) != 1 || !strings.Contains(q[0], `namespace=~"ml"`) || strings.Contains(q[0], "clean") {
		t.Errorf("count queries %q, want one over namespace ml only", q)
	}
	d, err = r.CountDropped(ctx, SignalMemory, sel, DCGM{}.Fields(SignalMemory), t0.Add(time.Hour), t0.Add(3*time.Hour))
	if err != nil || len(d) != 0 {
		t.Errorf("clean window: %v, %v; want no counts", d, err)
	}
	if q := counts(); len(q) != 1 {
		t.Errorf("a clean window sent a count query: %q", q[1:])
	}
}

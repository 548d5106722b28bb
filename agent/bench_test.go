package agent

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// benchNode builds 8 GPUs with 100 processes of 100 single-container pods spread
// over them (12–13 per GPU), each with a cgroup file in a fake proc root and a
// utilisation sample per cycle.
func benchNode(b *testing.B) (*Sampler, []*fakeGPU) {
	c := newCluster(b)
	const gpus, procs = 8, 100
	gs := make([]*fakeGPU, gpus)
	devs := make([]nvml.Device, gpus)
	for i := range gs {
		gs[i] = &fakeGPU{uuid: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), name: "NVIDIA H100 80GB HBM3", total: 80 * gib, used: 40 * gib}
		devs[i] = gs[i].device()
	}
	for p := 0; p < procs; p++ {
		pid := uint32(10000 + p)
		c.proc(pid, c.addContainer(fmt.Sprintf("ns-%d", p%10), fmt.Sprintf("wl-%d-5d8f7-abcde", p), "main", p%2 == 0))
		g := gs[p%gpus]
		g.compute = append(g.compute, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: uint64(p+1) << 24})
	}
	now := t0
	s := newSampler(fakeLib(devs...), c.attributor(), &now)
	s.cfg.Now = time.Now
	return s, gs
}

// refreshSamples gives every process one utilisation sample at ts.
func refreshSamples(gs []*fakeGPU, ts uint64) {
	for _, g := range gs {
		g.samples = g.samples[:0]
		for _, p := range g.compute {
			g.samples = append(g.samples, nvml.ProcessUtilizationSample{Pid: p.Pid, TimeStamp: ts, SmUtil: p.Pid % 100})
		}
	}
}

// BenchmarkSampleCycle is one sampling cycle on 8 GPUs with 100 processes: NVML
// calls on the go-nvml mock (whose call recording is included), 100 /proc/<pid>/cgroup
// reads and parses, attribution, aggregation.
func BenchmarkSampleCycle(b *testing.B) {
	s, gs := benchNode(b)
	cycles(b, s, gs, nil)
	b.StopTimer()
	if got := len(s.Snapshot().Usage); got != 100 {
		b.Fatalf("%d usages, want 100", got)
	}
}

// BenchmarkScrape is one Prometheus scrape of the agent's collector (Collect and
// text encoding) on the same node.
func BenchmarkScrape(b *testing.B) {
	s, gs := benchNode(b)
	now := time.Now()
	refreshSamples(gs, us(now))
	s.SampleOnce(now)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		scrape(b, reg)
	}
}

// BenchmarkCycleAndScrape is what one scrape costs when the agent samples once per
// scrape: a cycle plus a scrape.
func BenchmarkCycleAndScrape(b *testing.B) {
	s, gs := benchNode(b)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	cycles(b, s, gs, reg)
}

// cycles times b.N sampling cycles one second apart, each followed by a scrape of reg
// when reg is not nil.
func cycles(b *testing.B, s *Sampler, gs []*fakeGPU, reg *prometheus.Registry) {
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = nextSecond(b, gs, now)
		s.SampleOnce(now)
		if reg != nil {
			scrape(b, reg)
		}
	}
}

// nextSecond refreshes the GPUs' process samples to one second after now, outside the
// timer, and returns that time.
func nextSecond(b *testing.B, gs []*fakeGPU, now time.Time) time.Time {
	b.StopTimer()
	defer b.StartTimer()
	now = now.Add(time.Second)
	refreshSamples(gs, us(now))
	return now
}

// scrape gathers reg and encodes it as Prometheus text, as one scrape does.
func scrape(b *testing.B, reg *prometheus.Registry) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			b.Fatal(err)
		}
	}
}

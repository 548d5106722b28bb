package trace

import (
	"math"
	"reflect"
	"sort"
	"testing"
	"time"
)

func TestSynthesizeDeterministic(t *testing.T) {
	opts := SynthOptions{Workloads: 3, PodsPerWorkload: 2, Duration: 6 * time.Hour, Seed: 42, End: testEnd}
	a, b := Synthesize(opts), Synthesize(opts)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same options, different traces")
	}
	opts.Seed = 43
	if c := Synthesize(opts); reflect.DeepEqual(a.Pods[0].Memory, c.Pods[0].Memory) {
		t.Error("different seeds, same memory series")
	}
	// Adding workloads and pods leaves the earlier ones unchanged.
	opts.Seed, opts.Workloads, opts.PodsPerWorkload = 42, 5, 3
	more := Synthesize(opts)
	for w := 0; w < 3; w++ {
		for r := 0; r < 2; r++ {
			if !reflect.DeepEqual(a.Pods[w*2+r], more.Pods[w*3+r]) {
				t.Errorf("workload %d pod %d changed when adding workloads", w, r)
			}
		}
	}
}

func TestSynthesizeShape(t *testing.T) {
	end := testEnd.Add(30 * time.Second) // truncated to the step
	tr := Synthesize(SynthOptions{Workloads: 4, PodsPerWorkload: 3, Duration: 2 * time.Hour, Step: 30 * time.Second, Seed: 1, End: end})
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(tr.Pods) != 12 || len(tr.Workloads()) != 4 {
		t.Fatalf("%d pods, %d workloads", len(tr.Pods), len(tr.Workloads()))
	}
	for _, p := range tr.Pods {
		if len(p.Memory) != 240 || len(p.Compute) != 240 {
			t.Fatalf("pod %s: %d memory, %d compute samples, want 240", p.Pod, len(p.Memory), len(p.Compute))
		}
		if !p.Memory[239].T.Equal(end) || !p.Memory[0].T.Equal(end.Add(-239*30*time.Second)) {
			t.Errorf("pod %s spans %v..%v", p.Pod, p.Memory[0].T, p.Memory[239].T)
		}
		if d, rs, ok := SplitDeploymentPodName(p.Pod); !ok || d != p.Workload || rs != p.ReplicaSet || p.Namespace != "synth" || p.Container != "inference" {
			t.Errorf("pod %s/%s owned by %s/%s", p.Namespace, p.Pod, p.Workload, p.ReplicaSet)
		}
		// Latency only at busy samples.
		busy := map[int64]bool{}
		for _, pt := range p.Compute {
			if pt.V > 0 {
				busy[pt.T.UnixMilli()] = true
			}
		}
		for _, pt := range p.LatencyP95 {
			if !busy[pt.T.UnixMilli()] || pt.V <= 0 {
				t.Fatalf("pod %s latency %v at an idle sample", p.Pod, pt)
			}
		}
	}
}

// TestSynthesizeStatistics checks that the default model reproduces the published
// GenTD26 statistics it is built from. Tolerances: with 200 workloads, the fleet
// share of busy samples has a standard error of about 0.015 (per-workload Beta with
// sd ≈ 0.21) and the mean duty cycle about 0.004; the tolerances are ≈ 2.5 standard
// errors plus the small bias bursts and the 0.95 cap add (documented on
// SynthModel): zero share 0.67 ± 0.04, mean duty cycle 0.07 ± 0.015. Peak memory
// median 37.1 GiB ± 2 GiB (log-normal sigma 0.15 → se ≈ 0.5 GiB), never above
// 47.3 GiB; every pod's peak/mean within 1.6–2.0 ± 0.05 (spikes add a little mean).
func TestSynthesizeStatistics(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		tr := Synthesize(SynthOptions{Workloads: 200, Duration: 24 * time.Hour, Seed: seed, End: testEnd})
		zf, mean := dutyCycleStats(t, tr)
		var peaks []float64
		for _, p := range tr.Pods {
			var peak, total float64
			for _, pt := range p.Memory {
				peak = math.Max(peak, pt.V)
				total += pt.V
			}
			peaks = append(peaks, peak/(1<<30))
			if r := peak / (total / float64(len(p.Memory))); r < 1.55 || r > 2.05 {
				t.Errorf("seed %d pod %s: peak/mean memory %.2f outside 1.6–2.0 ± 0.05", seed, p.Pod, r)
			}
		}
		sort.Float64s(peaks)
		med := peaks[len(peaks)/2]
		t.Logf("seed %d: zero share %.3f, mean duty %.4f, peak memory median %.1f GiB max %.1f GiB", seed, zf, mean, med, peaks[len(peaks)-1])
		if math.Abs(zf-0.67) > 0.04 {
			t.Errorf("seed %d: zero duty-cycle share %.3f, want 0.67 ± 0.04", seed, zf)
		}
		if math.Abs(mean-0.07) > 0.015 {
			t.Errorf("seed %d: mean duty cycle %.4f, want 0.07 ± 0.015", seed, mean)
		}
		if math.Abs(med-37.1) > 2 {
			t.Errorf("seed %d: median peak memory %.1f GiB, want 37.1 ± 2", seed, med)
		}
		if peaks[len(peaks)-1] > 47.3+1e-9 {
			t.Errorf("seed %d: peak memory %.2f GiB above 47.3", seed, peaks[len(peaks)-1])
		}
	}
}

func TestSynthesizeModelSwitches(t *testing.T) {
	// Restarts are the only source of zero memory: turned off, none remain.
	m := SynthModel{RestartsPerDay: -1, BurstsPerDay: -1}
	tr := Synthesize(SynthOptions{Workloads: 20, Duration: 48 * time.Hour, Seed: 9, End: testEnd, Model: m})
	on := Synthesize(SynthOptions{Workloads: 20, Duration: 48 * time.Hour, Seed: 9, End: testEnd})
	count := func(tr Trace) (n int) {
		for _, p := range tr.Pods {
			for _, pt := range p.Memory {
				if pt.V == 0 {
					n++
				}
			}
		}
		return n
	}
	if n := count(tr); n != 0 {
		t.Errorf("%d zero memory samples with restarts off", n)
	}
	if count(on) == 0 {
		t.Error("no restarts (zero memory samples) with the default model over 20 pod-days x 2")
	}
}

// TestSynthesizeArrivals checks ArrivingWorkloads: with 0.5, some but not all workloads
// start late, each between 10 % and 75 % of the trace, all pods of a workload together,
// and what is left of an arriving pod is the same series as without arrivals (its draws
// are unchanged, only cut).
func TestSynthesizeArrivals(t *testing.T) {
	opts := SynthOptions{Workloads: 20, PodsPerWorkload: 2, Duration: 10 * time.Hour, Seed: 7, End: testEnd}
	base := Synthesize(opts)
	opts.Model.ArrivingWorkloads = 0.5
	tr := Synthesize(opts)
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	start := base.Pods[0].Memory[0].T
	late := map[string]time.Time{}
	for i, p := range tr.Pods {
		first := p.Memory[0].T
		if first.Equal(start) {
			if !reflect.DeepEqual(p, base.Pods[i]) {
				t.Errorf("%s: present from the start but changed by arrivals", p.Pod)
			}
			continue
		}
		if d := first.Sub(start); d < time.Hour || d > 7*time.Hour+30*time.Minute {
			t.Errorf("%s: arrives %s into a 10h trace, want 1h–7h30m", p.Pod, d)
		}
		if at, ok := late[p.Workload]; ok && !at.Equal(first) {
			t.Errorf("%s: pods of one workload arrive at %s and %s", p.Workload, at, first)
		}
		late[p.Workload] = first
		b := base.Pods[i]
		if cut := b.Memory[len(b.Memory)-len(p.Memory):]; !reflect.DeepEqual(cut, p.Memory) || len(p.Compute) != len(p.Memory) {
			t.Errorf("%s: the arriving pod's samples are not the tail of its series", p.Pod)
		}
	}
	if len(late) == 0 || len(late) == 20 {
		t.Errorf("%d of 20 workloads arrive late with ArrivingWorkloads 0.5", len(late))
	}
}

// TestSynthOptionsValidate: gpufrac simulate's defaults are valid, and so are valid
// names; options Synthesize would silently replace by its defaults, that make no trace,
// or whose names the API server would refuse (the manifests would not apply) are
// refused.
func TestSynthOptionsValidate(t *testing.T) {
	if err := SynthReplayOptions().Validate(); err != nil {
		t.Fatalf("simulate's defaults: %v", err)
	}
	named := SynthReplayOptions()
	named.Namespace, named.Container, named.WorkloadPrefix = "team-a", "server", "llm.chat"
	if err := named.Validate(); err != nil {
		t.Fatalf("valid names: %v", err)
	}
	for name, mutate := range map[string]func(*SynthOptions){
		"no workloads":      func(o *SynthOptions) { o.Workloads = 0 },
		"no pods":           func(o *SynthOptions) { o.PodsPerWorkload = -1 },
		"negative duration": func(o *SynthOptions) { o.Duration = -time.Hour },
		"one sample":        func(o *SynthOptions) { o.Duration = 90 * time.Second },
		"under one step":    func(o *SynthOptions) { o.Duration = time.Nanosecond },
		"arriving above 1":  func(o *SynthOptions) { o.Model.ArrivingWorkloads = 1.5 },
		"arriving NaN":      func(o *SynthOptions) { o.Model.ArrivingWorkloads = math.NaN() },
		"bad namespace":     func(o *SynthOptions) { o.Namespace = "Team_A" },
		"bad container":     func(o *SynthOptions) { o.Container = "my.server" },
		"bad prefix":        func(o *SynthOptions) { o.WorkloadPrefix = "Bad_Name" },
	} {
		o := SynthReplayOptions()
		mutate(&o)
		if o.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

package simulate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/trace"
)

// TestNoComputeIsNotZero: a trace whose pods have no compute sample has unknown compute
// utilisation and contention, "-" in the table and null in JSON, not 0 %; when only some
// pods lack compute samples the figures are kept and the heading says how many pods
// count as idle. vsClairvoyant is null in JSON when clairvoyant-memory did not run.
func TestNoComputeIsNotZero(t *testing.T) {
	for _, c := range []struct {
		name        string
		noCompute   []bool // per pod: drop its compute samples
		policies    []string
		known       bool
		note        string
		nullVsClair bool
	}{
		{"all pods with compute", []bool{false, false, false}, []string{PolicyOnePerPod, PolicyClairvoyantMemory}, true, "", false},
		{"one pod without", []bool{false, true, false}, []string{PolicyOnePerPod, PolicyClairvoyantMemory}, true, "1 of 3 pods without compute samples count as idle", false},
		{"two pods without", []bool{true, true, false}, []string{PolicyOnePerPod, TimeSlicing(2)}, true, "2 of 3 pods without compute samples count as idle", true},
		{"no pod with compute", []bool{true, true, true}, []string{PolicyOnePerPod, PolicyClairvoyantMemory}, false, "no compute samples: compute util and contention unknown", false},
		{"no compute, no clairvoyant", []bool{true, true, true}, []string{PolicyOnePerPod, TimeSlicing(2)}, false, "no compute samples", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tr trace.Trace
			for i, drop := range c.noCompute {
				p := pod(string(rune('a'+i)), 0, repeat(10, 30), repeat(0.6, 30))
				if drop {
					p.Compute = nil
				}
				tr.Pods = append(tr.Pods, p)
			}
			res, err := Run(&tr, Options{GPUMemoryBytes: 80 * gib, Policies: c.policies})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range res.Policies {
				if p.ComputeKnown != c.known {
					t.Errorf("%s: ComputeKnown %v, want %v", p.Policy, p.ComputeKnown, c.known)
				}
			}
			rep := &Report{Input: "t", Format: "long", Runs: []*Result{res}}
			var text bytes.Buffer
			if err := rep.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(text.String(), "\n")
			if c.note == "" && strings.Contains(lines[0], "compute samples") || c.note != "" && !strings.Contains(lines[0], c.note) {
				t.Errorf("heading %q, want note %q", lines[0], c.note)
			}
			for _, l := range lines[2:] {
				if f := strings.Fields(l); len(f) > 0 {
					// contention "N (x%)" is two fields when known, "-" when not; compute util
					// is the fourth field from the end.
					if util := f[len(f)-4]; (util == "-") == c.known {
						t.Errorf("%s: compute util %q, known %v", f[0], util, c.known)
					}
				}
			}
			var js bytes.Buffer
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var got struct {
				Runs []struct {
					Trace struct {
						PodsWithoutCompute *int `json:"podsWithoutCompute"`
					} `json:"trace"`
					Policies []map[string]any `json:"policies"`
				} `json:"runs"`
			}
			if err := json.Unmarshal(js.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			without := 0
			for _, d := range c.noCompute {
				if d {
					without++
				}
			}
			if pw := got.Runs[0].Trace.PodsWithoutCompute; pw == nil || *pw != without {
				t.Errorf("podsWithoutCompute %v, want %d", pw, without)
			}
			for _, p := range got.Runs[0].Policies {
				for _, k := range []string{"computeUtilisation", "contentionShare", "contentionPodMinutes"} {
					if v, ok := p[k]; !ok || (v == nil) == c.known {
						t.Errorf("%s: %s = %v (present %v), known %v", p["policy"], k, v, ok, c.known)
					}
				}
				if v, ok := p["vsClairvoyant"]; !ok || (v == nil) != c.nullVsClair {
					t.Errorf("%s: vsClairvoyant = %v (present %v), want null: %v", p["policy"], v, ok, c.nullVsClair)
				}
				if v, ok := p["memoryUtilisation"]; !ok || v == nil {
					t.Errorf("%s: memoryUtilisation = %v, want a number", p["policy"], v)
				}
			}
		})
	}
}

// TestNoMemoryIsAnError: a trace pod without a memory sample would be packed as needing
// no memory (the clairvoyant bounds by 0 bytes); Run refuses the trace and names the pod
// and how many there are, for one pod and for several.
func TestNoMemoryIsAnError(t *testing.T) {
	for _, c := range []struct {
		noMemory []bool
		want     []string
	}{
		{[]bool{false, true, false}, []string{"1 of 3 trace pods have no GPU memory sample", "ns/b-abc-x1 container main"}},
		{[]bool{true, false, true}, []string{"2 of 3 trace pods", "ns/a-abc-x1 container main and 1 more"}},
		{[]bool{true}, []string{"1 of 1 trace pods"}},
	} {
		var tr trace.Trace
		for i, drop := range c.noMemory {
			p := pod(string(rune('a'+i)), 0, repeat(10, 30), repeat(0.2, 30))
			if drop {
				p.Memory = nil
			}
			tr.Pods = append(tr.Pods, p)
		}
		_, err := Run(&tr, Options{GPUMemoryBytes: 80 * gib, Policies: []string{PolicyOnePerPod, PolicyClairvoyantMemory}})
		if err == nil {
			t.Errorf("%v: no error", c.noMemory)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q, want %q", c.noMemory, err, w)
			}
		}
	}
}

// TestNoMemoryLifetimeIsAnError: with Lookback a gap longer than it starts a new pod,
// so a lifetime of duty-cycle samples only is a pod without a memory sample, as
// TestNoMemoryIsAnError's: it would be charged and packed as 0 bytes (mean memory
// utilisation halved here, the clairvoyant bound sized at 0). Run refuses it and names
// the lifetime.
func TestNoMemoryLifetimeIsAnError(t *testing.T) {
	gap := pod("gap", 0, repeat(30, 10), repeat(0.2, 10))
	late := pod("gap", 60, repeat(30, 10), repeat(0.2, 10)) // after a 50-minute gap
	gap.Compute = append(gap.Compute, late.Compute...)      // its memory exporter was down
	tr := trace.Trace{Pods: []trace.Pod{gap}}
	_, err := Run(&tr, Options{GPUMemoryBytes: 80 * gib, Policies: []string{PolicyOnePerPod, PolicyClairvoyantMemory}, Lookback: 30 * time.Minute})
	if err == nil || !strings.Contains(err.Error(), "ns/gap-abc-x1#2 container main") || !strings.Contains(err.Error(), "no GPU memory sample") {
		t.Errorf("error %v, want one naming lifetime ns/gap-abc-x1#2 without a memory sample", err)
	}
	// Without Lookback the gap is an exporter gap of one pod, its memory the last sample.
	if _, err := Run(&tr, Options{GPUMemoryBytes: 80 * gib, Policies: []string{PolicyOnePerPod}}); err != nil {
		t.Error(err)
	}
}

// TestPodsAboveGPU: pods whose memory exceeds one GPU of the run's size overrun under
// every policy; the run counts them and its heading says so, per GPU size, counting a
// pod with several lifetimes once.
func TestPodsAboveGPU(t *testing.T) {
	big := pod("big", 0, append(repeat(50, 10), repeat(70, 5)...), repeat(0.2, 15))
	gap := pod("gap", 0, repeat(60, 5), repeat(0.2, 5)) // two lifetimes, split by a gap over the 5-minute Lookback
	late := pod("gap", 30, repeat(60, 5), repeat(0.2, 5))
	gap.Memory, gap.Compute = append(gap.Memory, late.Memory...), append(gap.Compute, late.Compute...)
	small := pod("small", 0, repeat(10, 15), repeat(0.2, 15))
	tr := trace.Trace{Pods: []trace.Pod{big, gap, small}}
	for _, c := range []struct {
		gpuGiB int64
		above  int
	}{{80, 0}, {70, 0}, {64, 1}, {48, 2}, {8, 3}} {
		res, err := Run(&tr, Options{GPUMemoryBytes: c.gpuGiB * gib, Policies: []string{PolicyOnePerPod}, Lookback: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Trace.Pods != 4 {
			t.Fatalf("%d pod lifetimes, want 4 (gap has two)", res.Trace.Pods)
		}
		if res.Trace.PodsAboveGPU != c.above {
			t.Errorf("%d GiB: %d pods above one GPU, want %d", c.gpuGiB, res.Trace.PodsAboveGPU, c.above)
		}
		var b bytes.Buffer
		if err := (&Report{Runs: []*Result{res}}).WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "use more memory than one GPU"); got != (c.above > 0) {
			t.Errorf("%d GiB: heading says pods above one GPU: %v, want %v:\n%s", c.gpuGiB, got, c.above > 0, b.String())
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpufrac/gpufrac/simulate"
)

func TestSimulateSyntheticJSON(t *testing.T) {
	stdout, stderr, err := run(t, "simulate", "--format", "synthetic", "--synth-workloads", "4", "--synth-duration", "6h",
		"--gpu-memory", "48Gi,80Gi", "--output-format", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stderr, "simulating 8 pods, 4 workloads") {
		t.Errorf("summary %q", stderr)
	}
	var rep simulate.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].GPUMemoryBytes != 48<<30 || rep.Runs[1].GPUMemoryBytes != 80<<30 {
		t.Fatalf("runs %+v", rep.Runs)
	}
	for _, r := range rep.Runs {
		if len(r.Policies) != len(simulate.DefaultPolicies) {
			t.Fatalf("%d policies, want %d", len(r.Policies), len(simulate.DefaultPolicies))
		}
		one := r.Policies[0]
		if one.Policy != simulate.PolicyOnePerPod || one.GPUsPerPod != 1 || one.GPUMinutes != one.PodMinutes || one.GPUMinutes == 0 {
			t.Errorf("one-per-pod %+v", one)
		}
	}
}

func TestSimulateMarkdownAndPlots(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "sim.md")
	plots := filepath.Join(dir, "plots")
	_, _, err := run(t, "simulate", "--format", "synthetic", "--synth-workloads", "3", "--synth-duration", "3h",
		"--gpu-memory", "80Gi", "--warm-up", "0,1h", "--markdown", "--plots", plots, "--plot-format", "svg,png", "--output", md)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "markdown", string(b), "# What-if simulation", "## 80Gi GPUs\n", "## 80Gi GPUs, after 1h of history",
		"| `gpufrac` |", "![GPUs held over time per policy, 80Gi GPUs](plots/sim-80gi-gpus.svg)", "plots/sim-80gi-warm1h-headroom.svg")
	for _, f := range []string{"sim-80gi-gpus.svg", "sim-80gi-gpus.png", "sim-80gi-memory.svg", "sim-80gi-headroom.png", "sim-80gi-warm1h-memory.png"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
}

// TestSimulateBadInput: bad trace input fails with the file and line.
func TestSimulateBadInput(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, fstest.MapFS{
		"pod_gpu_memory_used_bytes_anon.csv": {Data: []byte("timestamp_anon,value,container_ip\n1662858720.0,100.0,aa\n1662858780.0,lots,aa\n")},
		"pod_gpu_duty_cycle_anon.csv":        {Data: []byte("value,timestamp_anon,container_ip\n0.0,1662858720.0,aa\n")},
	}); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "simulate", "--format", "gentd26", "--input", dir)
	if err == nil || !strings.Contains(err.Error(), "pod_gpu_memory_used_bytes_anon.csv:3:") || !strings.Contains(err.Error(), dir) {
		t.Errorf("gentd26: error %v, want the directory and pod_gpu_memory_used_bytes_anon.csv:3:", err)
	}

	long := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(long, []byte("timestamp,namespace,pod,container,workload,memory_bytes,compute_ratio\n1662858720,ns,sd-1,main,sd,1e9,0.5\n1662858780,ns,sd-1,main,sd,1e9,-0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "simulate", "--format", "long", "--input", long)
	if err == nil || !strings.Contains(err.Error(), long+":3:") {
		t.Errorf("long: error %v, want %s:3:", err, long)
	}
}

// TestSimulateFold replays the parts of a two-fold split: each keeps whole workloads,
// the two together are the trace, and the report names the part.
func TestSimulateFold(t *testing.T) {
	pods := 0
	for _, k := range []string{"0/2", "1/2"} {
		stdout, stderr, err := run(t, "simulate", "--format", "synthetic", "--synth-workloads", "5", "--synth-duration", "3h",
			"--policies", "one-per-pod", "--fold", k, "--fold-seed", "3")
		if err != nil {
			t.Fatal(err)
		}
		var n, w int
		if _, err := fmt.Sscanf(stderr, "simulating %d pods, %d workloads", &n, &w); err != nil || n != 2*w {
			t.Errorf("fold %s: summary %q: want 2 pods per workload", k, stderr)
		}
		pods += n
		if want := "synthetic (fold " + k + " seed 3)"; !strings.Contains(stdout, want) {
			t.Errorf("fold %s: report does not name the part (%q):\n%s", k, want, stdout)
		}
	}
	if pods != 10 {
		t.Errorf("the two folds replayed %d pods, want the trace's 10", pods)
	}
}

func TestSimulateFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "synthetic", "--output-format", "xml"}, "--output-format"},
		{[]string{"--format", "synthetic", "--markdown", "--output-format", "json"}, "conflicts"},
		{[]string{"--format", "synthetic", "--policies", "bogus"}, `unknown policy "bogus"`},
		{[]string{"--format", "synthetic", "--pods", "3"}, "--pods applies to --format gentd26 only"},
		{[]string{"--format", "gentd26"}, "--input is required"},
		{[]string{"--format", "synthetic", "--gpu-memory", "lots"}, "--gpu-memory"},
		{[]string{"--format", "synthetic", "--plot-format", "gif"}, "--plot-format"},
		{[]string{"--format", "synthetic", "--resize-window-schedule", "every day"}, "resize window schedule"},
		{[]string{"--format", "parquet", "--input", "x"}, "--format"},
		{[]string{"--format", "synthetic", "--replacements-per-minute", "0"}, "--replacements-per-minute"},
		{[]string{"--format", "synthetic", "--interval", "0s"}, "--interval"},
		{[]string{"--format", "synthetic", "--warm-up", "100h"}, "covers the whole trace"},
		{[]string{"--format", "synthetic", "--fold", "2/2"}, `--fold "2/2": want K/N`},
		{[]string{"--format", "synthetic", "--synth-workloads", "2", "--fold", "0/3"}, "fold 0/3: the trace has 2 workloads"},
	} {
		_, _, err := run(t, append([]string{"simulate"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}

func TestSimulateGenTD26(t *testing.T) {
	data := filepath.Join("..", "..", "..", "shared", "data", "gentd26")
	if _, err := os.Stat(data); err != nil {
		t.Skip("shared data absent")
	}
	stdout, _, err := run(t, "simulate", "--input", data, "--pods", "10", "--duration", "3h", "--gpu-memory", "80Gi")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range simulate.DefaultPolicies {
		if !strings.Contains(stdout, p) {
			t.Errorf("table lacks %s:\n%s", p, stdout)
		}
	}
	if !strings.Contains(stdout, "80Gi GPUs; "+data+": 10 pods") {
		t.Errorf("table header:\n%s", stdout)
	}
}

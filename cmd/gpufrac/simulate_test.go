package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

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

// TestSimulateSummaryAndReportTimes: the stderr summary gives the first and last
// samples, labelled as such, and the report the bounds of the steps replayed, whose first
// ends at the first sample: the two start times differ by one step and must not read as
// the same instant (they were "T..." and "T-1m to").
func TestSimulateSummaryAndReportTimes(t *testing.T) {
	for _, dur := range []string{"3h", "6h", "25h"} {
		stdout, stderr, err := run(t, "simulate", "--format", "synthetic", "--synth-workloads", "2", "--synth-duration", dur,
			"--gpu-memory", "80Gi", "--output-format", "json")
		if err != nil {
			t.Fatal(err)
		}
		var rep simulate.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		tr := rep.Runs[0].Trace
		step, err := time.ParseDuration(rep.Runs[0].Settings.Step)
		if err != nil {
			t.Fatal(err)
		}
		var first, last string
		if i := strings.Index(stderr, "first sample "); i < 0 {
			t.Fatalf("%s: summary %q does not label its times", dur, stderr)
		} else if _, err := fmt.Sscanf(strings.ReplaceAll(stderr[i:], ",", " "), "first sample %s last sample %s", &first, &last); err != nil {
			t.Fatalf("%s: summary %q: %v", dur, stderr, err)
		}
		if want := tr.Start.Add(step).UTC().Format(time.RFC3339); first != want {
			t.Errorf("%s: first sample %s, want the end of the first step (%s + %s) = %s", dur, first, tr.Start.UTC().Format(time.RFC3339), step, want)
		}
		if want := tr.End.UTC().Format(time.RFC3339); last != want {
			t.Errorf("%s: last sample %s, want the end of the last step %s", dur, last, want)
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

// TestSimulateFlagErrors: a flag that cannot work is an error that starts with the flag,
// "--" included, before the trace is replayed (warm-up, lookback, policies, the backend's,
// the resize window's and consolidation's were named bare or by a phrase; a resize
// window's duration or time zone without its schedule was ignored; an --interval longer
// than the trace counted each pod for a whole step of it; an empty --gpu-memory ran
// nothing and printed an empty report, and a size or warm-up given twice ran twice; a
// --plots that is a file, or under one, failed after the first run; an unknown or repeated policy,
// --consolidate without its backend and a bad --consolidation-compute or backend flag
// were refused only once the trace had been read or generated).
func TestSimulateFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "synthetic", "--output-format", "xml"}, "--output-format"},
		{[]string{"--format", "synthetic", "--markdown", "--output-format", "json"}, "--markdown conflicts"},
		{[]string{"--format", "synthetic", "--policies", "bogus"}, `--policies: unknown policy "bogus"`},
		{[]string{"--format", "synthetic", "--policies", "gpufrac,gpufrac"}, `--policies: policy "gpufrac" given twice`},
		{[]string{"--format", "synthetic", "--pods", "3"}, "--pods applies to --format gentd26 only"},
		{[]string{"--format", "gentd26"}, "--input is required"},
		{[]string{"--format", "synthetic", "--gpu-memory", "lots"}, "--gpu-memory"},
		{[]string{"--format", "synthetic", "--gpu-memory", ""}, "--gpu-memory: no size given"},
		{[]string{"--format", "synthetic", "--gpu-memory", "80Gi,48Gi,81920Mi"}, "--gpu-memory 81920Mi: the size of 80Gi, given twice"},
		{[]string{"--format", "synthetic", "--warm-up", "1h,60m"}, "--warm-up 1h0m0s: given twice"},
		{[]string{"--format", "synthetic", "--plot-format", "gif"}, "--plot-format"},
		{[]string{"--format", "synthetic", "--plots", "simulate_test.go"}, "--plots simulate_test.go: a file, not a directory"},
		{[]string{"--format", "synthetic", "--plots", "simulate_test.go/plots"}, "--plots simulate_test.go/plots: simulate_test.go is a file, not a directory"},
		{[]string{"--format", "synthetic", "--resize-window-schedule", "every day"}, `--resize-window-schedule "every day" (--resize-window-duration 4h0m0s, --resize-window-timezone "UTC"): schedule "every day"`},
		{[]string{"--format", "synthetic", "--resize-window-schedule", "0 2 * * *", "--resize-window-timezone", "Mars/Olympus"}, `--resize-window-schedule "0 2 * * *" (--resize-window-duration 4h0m0s, --resize-window-timezone "Mars/Olympus"): time zone`},
		{[]string{"--format", "synthetic", "--resize-window-duration", "2h"}, "--resize-window-duration applies with --resize-window-schedule only"},
		{[]string{"--format", "synthetic", "--resize-window-timezone", "Europe/Paris"}, "--resize-window-timezone applies with --resize-window-schedule only"},
		{[]string{"--format", "synthetic", "--consolidate"}, "--consolidate needs"},
		{[]string{"--format", "synthetic", "--consolidation-compute", "5000"}, "--consolidation-compute 5000"},
		{[]string{"--format", "synthetic", "--nvfractions-request", "bogus"}, `--nvfractions-request "bogus"`},
		{[]string{"--format", "synthetic", "--annotation-memory-request", "bogus"}, `--annotation-memory-request "bogus"`},
		{[]string{"--format", "synthetic", "--lookback", "-1m"}, "--lookback -1m0s"},
		// A unit typo (1ms for 1m) was taken: 10.8 million steps over a 3-hour trace,
		// 8 minutes of CPU for two policies.
		{[]string{"--format", "synthetic", "--synth-workloads", "1", "--synth-duration", "3m", "--policies", "one-per-pod", "--interval", "1ms"}, "--interval 1ms: under 1s"},
		{[]string{"--format", "synthetic", "--synth-workloads", "1", "--synth-duration", "3m", "--policies", "one-per-pod", "--interval", "999ms"}, "--interval 999ms: under 1s"},
		{[]string{"--format", "synthetic", "--warm-up", "-1m"}, "--warm-up -1m0s"},
		{[]string{"--format", "synthetic", "--synth-workloads", "0"}, "--synth-workloads 0: must be positive"},
		{[]string{"--format", "synthetic", "--synth-pods-per-workload", "-2"}, "--synth-pods-per-workload -2: must be positive"},
		{[]string{"--format", "synthetic", "--synth-duration", "-1h"}, "--synth-duration -1h0m0s: must be positive"},
		{[]string{"--format", "synthetic", "--synth-duration", "30s"}, "--synth-duration: synthetic trace: duration 30s is under two steps"},
		{[]string{"--format", "synthetic", "--synth-duration", "3h", "--interval", "5h"}, "--interval 5h0m0s is longer than the trace"},
		{[]string{"--format", "parquet", "--input", "x"}, "--format"},
		{[]string{"--format", "synthetic", "--replacements-per-minute", "0"}, "--replacements-per-minute"},
		{[]string{"--format", "synthetic", "--max-in-flight-per-device", "0"}, "--max-in-flight-per-device 0"},
		{[]string{"--format", "synthetic", "--interval", "0s"}, "--interval"},
		{[]string{"--format", "synthetic", "--warm-up", "100h"}, "--warm-up 100h0m0s covers the whole trace"},
		{[]string{"--format", "synthetic", "--fold", "2/2"}, `--fold "2/2": want K/N`},
		{[]string{"--format", "synthetic", "--synth-workloads", "2", "--fold", "0/3"}, "synthetic: --fold 0/3: the trace has 2 workloads"},
	} {
		_, stderr, err := run(t, append([]string{"simulate"}, c.args...)...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
		// Only an error about the trace itself may come after it is read (its summary on
		// stderr); the others come first (a bad --policies, --consolidate or backend
		// flag was refused only after the whole trace was read or generated).
		onTrace := strings.Contains(c.want, "the trace") || strings.Contains(c.want, "the whole trace") || strings.HasPrefix(c.want, "synthetic: --fold")
		if !onTrace && stderr != "" {
			t.Errorf("%v: the trace was read before the error: %q", c.args, stderr)
		}
	}
}

// TestSimulateChecksEveryRunFirst: with several --warm-up values or sizes, a run the
// trace cannot make (a warm-up covering it) is refused before any run; before, the
// runs before it were replayed, their plots written, and then the error dropped them
// all (the report is written at the end).
func TestSimulateChecksEveryRunFirst(t *testing.T) {
	plots := t.TempDir()
	_, _, err := run(t, "simulate", "--format", "synthetic", "--synth-workloads", "2", "--synth-duration", "3h",
		"--policies", "gpufrac", "--gpu-memory", "80Gi,141Gi", "--warm-up", "1h,5h", "--plots", plots)
	if err == nil || !strings.HasPrefix(err.Error(), "--warm-up 5h0m0s covers the whole trace") {
		t.Errorf("error %v, want the 5h warm-up refused", err)
	}
	if files, _ := os.ReadDir(plots); len(files) > 0 {
		t.Errorf("%d plot files written before the error: a run went before the check", len(files))
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

// TestSkippedValuesAreReported: values the reader skips as out of range (compute written
// as percent in a ratio column, a memory sentinel, a duty cycle above 100 %) are not
// dropped silently: stderr and the report itself (text and JSON) say where the first was,
// why, and how many went; trace import says it too. Memory in KiB, MiB or GiB instead of
// bytes (every pod's peak under 100 MiB; KiB was not warned of under the former 1 MiB) is
// warned of the same way. A clean trace and a pod that
// never used the GPU (0 bytes) have no warning.
func TestSkippedValuesAreReported(t *testing.T) {
	dir := t.TempDir()
	long := func(name string, rows ...string) string {
		p := filepath.Join(dir, name)
		body := "timestamp,namespace,pod,container,workload,memory_bytes,compute_ratio\n"
		for i := range 30 {
			r := fmt.Sprintf("%d,ns,a-1,main,a,%d,0.2\n", 1767225600+60*i, 10<<30)
			if i < len(rows) && rows[i] != "" {
				r = fmt.Sprintf("%d,ns,a-1,main,a,%s\n", 1767225600+60*i, rows[i])
			}
			body += r
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gentd := filepath.Join(dir, "gentd")
	var mem, duty strings.Builder
	mem.WriteString("timestamp_anon,value,container_ip\n")
	duty.WriteString("value,timestamp_anon,container_ip\n")
	for i := range 30 {
		ts := 1662858720 + 60*i
		fmt.Fprintf(&mem, "%d.0,%d.0,aa\n", ts, 10<<30)
		v := 20.0
		if i == 4 || i == 9 {
			v = 150
		}
		fmt.Fprintf(&duty, "%g,%d.0,aa\n", v, ts)
	}
	if err := os.CopyFS(gentd, fstest.MapFS{
		"pod_gpu_memory_used_bytes_anon.csv": {Data: []byte(mem.String())},
		"pod_gpu_duty_cycle_anon.csv":        {Data: []byte(duty.String())},
	}); err != nil {
		t.Fatal(err)
	}
	percent := make([]string, 30)
	kib, mib, gib, idle := make([]string, 30), make([]string, 30), make([]string, 30), make([]string, 30)
	for i := range percent {
		percent[i] = fmt.Sprintf("%d,%d", 10<<30, 20+i) // every compute value in percent
		kib[i] = fmt.Sprintf("%d,0.2", 10<<20+i)        // memory in KiB
		mib[i] = fmt.Sprintf("%d,0.2", 10240+i)         // memory in MiB
		gib[i] = "10,0.2"                               // memory in GiB
		idle[i] = "0,0"                                 // a pod that never used the GPU
	}
	for _, c := range []struct {
		name string
		args []string
		want string // "": no warning
	}{
		{"clean", []string{"--format", "long", "--input", long("clean.csv")}, ""},
		{"compute in percent", []string{"--format", "long", "--input", long("percent.csv", percent...)},
			filepath.Join(dir, "percent.csv") + ":2: compute_ratio 20 is above 1: compute_ratio is a ratio 0–1, not percent; skipped, 30 of the 30 compute values"},
		{"one compute above 1", []string{"--format", "long", "--input", long("one.csv", "", "", fmt.Sprintf("%d,1.5", 10<<30))},
			filepath.Join(dir, "one.csv") + ":4: compute_ratio 1.5 is above 1"},
		{"memory sentinel", []string{"--format", "long", "--input", long("sentinel.csv", "", "9.2e18,0.2")},
			filepath.Join(dir, "sentinel.csv") + ":3: memory_bytes 9.2e+18 is above 2^47 bytes (128 TiB): a DCGM blank sentinel or corrupt; skipped, 1 of the 30 memory values"},
		{"memory in MiB", []string{"--format", "long", "--input", long("mib.csv", mib...)},
			filepath.Join(dir, "mib.csv") + ": 1 of 1 pods use less than 100 MiB of GPU memory at their peak (ns/a-1 container main peaks at 10269 bytes): memory is in bytes"},
		{"memory in KiB", []string{"--format", "long", "--input", long("kib.csv", kib...)},
			filepath.Join(dir, "kib.csv") + ": 1 of 1 pods use less than 100 MiB of GPU memory at their peak (ns/a-1 container main peaks at 1.0485789e+07 bytes)"},
		{"memory in GiB", []string{"--format", "long", "--input", long("gib.csv", gib...)},
			filepath.Join(dir, "gib.csv") + ": 1 of 1 pods use less than 100 MiB of GPU memory at their peak (ns/a-1 container main peaks at 10 bytes)"},
		{"idle pod", []string{"--format", "long", "--input", long("idle.csv", idle...)}, ""},
		{"duty cycle above 100", []string{"--format", "gentd26", "--input", gentd},
			filepath.Join(gentd, "pod_gpu_duty_cycle_anon.csv") + ":6: value 150 is above 100: the duty cycle is a percent 0–100; skipped, 2 of the 30 compute values"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"simulate", "--policies", "one-per-pod"}, c.args...)
			stdout, stderr, err := run(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(stdout, "warning: "+c.want); c.want != "" && !got || c.want == "" && strings.Contains(stdout+stderr, "warning") {
				t.Errorf("text report, want warning %q:\n%s\nstderr:\n%s", c.want, stdout, stderr)
			}
			stdout, stderr, err = run(t, append(args, "--output-format", "json")...)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct{ Warnings []string }
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if c.want == "" && (len(rep.Warnings) != 0 || strings.Contains(stderr, "warning")) ||
				c.want != "" && (len(rep.Warnings) != 1 || !strings.HasPrefix(rep.Warnings[0], c.want) || !strings.Contains(stderr, "warning: "+c.want)) {
				t.Errorf("JSON warnings %q, stderr %q; want %q", rep.Warnings, stderr, c.want)
			}
			imp := append([]string{"trace", "import", "--long-csv", filepath.Join(dir, "out.csv")}, c.args...)
			if _, stderr, err = run(t, imp...); err != nil {
				t.Fatal(err)
			}
			if c.want != "" && !strings.Contains(stderr, "warning: "+c.want) {
				t.Errorf("trace import stderr %q, want %q", stderr, c.want)
			}
		})
	}
}

// TestSimulateErrorsNameTheirSource: an error of the trace names the input file, one of a
// flag does not (it is not the file's fault), before any simulation runs.
func TestSimulateErrorsNameTheirSource(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "t.csv")
	body := "timestamp,namespace,pod,container,workload,memory_bytes,compute_ratio\n"
	for i := range 10 {
		body += fmt.Sprintf("%d,ns,a-1,main,a,%d,0.2\n%d,ns,b-1,main,b,,0.2\n", 1767225600+60*i, 10<<30, 1767225600+60*i)
	}
	if err := os.WriteFile(long, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.csv")
	if err := os.WriteFile(good, []byte(strings.ReplaceAll(body, ",,0.2", ",1000000000,0.2")), 0o644); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, "stray.csv") // a row stamped 0 among 2026's
	if err := os.WriteFile(stray, []byte(strings.ReplaceAll(body, ",,0.2", ",1000000000,0.2")+"0,ns,a-1,main,a,1000000000,0.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args          []string
		want, wantNot string
	}{
		{[]string{"--input", long}, long + ": 1 of 2 trace pods have no GPU memory sample (ns/b-1 container main)", ""},
		{[]string{"--input", stray}, stray + ": no sample for ", ""},
		{[]string{"--input", good, "--policies", "gpufrac,gpufrac"}, `--policies: policy "gpufrac" given twice`, good},
		{[]string{"--input", good, "--policies", "one-per-pod,magic"}, `--policies: unknown policy "magic"`, good},
		{[]string{"--input", good, "--warm-up", "1h"}, "--warm-up 1h0m0s covers the whole trace", good},
	} {
		_, _, err := run(t, append([]string{"simulate", "--format", "long"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || c.wantNot != "" && strings.Contains(err.Error(), c.wantNot) {
			t.Errorf("%v: error %v, want %q without %q", c.args, err, c.want, c.wantNot)
		}
	}
}

// TestFloatFlagsRefuseNaN: every comparison with NaN is false, so a range check lets
// "NaN" through and it silently changes the figures (a never-reached near limit, a
// never-met change threshold); every float flag of every command refuses it, naming
// the flag.
func TestFloatFlagsRefuseNaN(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s.csv")
	for _, args := range [][]string{
		{"simulate", "--format", "synthetic", "--near-limit", "NaN"},
		{"simulate", "--format", "synthetic", "--change-threshold", "NaN"},
		{"simulate", "--format", "synthetic", "--replacements-per-minute", "NaN"},
		{"simulate", "--format", "synthetic", "--compute-margin", "NaN"},
		{"simulate", "--format", "synthetic", "--synth-arriving", "NaN"},
		{"trace", "synth", "--long-csv", out, "--arriving", "NaN"},
	} {
		flag := args[len(args)-2]
		_, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), flag+" "+args[len(args)-1]) {
			t.Errorf("%v: error %v, want one naming %s", args, err, flag)
		}
	}
}

// TestSimulateNearLimitAboveOne: the updater refuses --near-limit above 1 (a peak
// never reaches it: growth is never protective), so simulate does not report figures
// for it.
func TestSimulateNearLimitAboveOne(t *testing.T) {
	_, _, err := run(t, "simulate", "--format", "synthetic", "--near-limit", "5")
	if err == nil || !strings.Contains(err.Error(), "--near-limit 5") {
		t.Errorf("error %v, want one naming --near-limit 5", err)
	}
}

// TestSimulateUpdaterFlagsNeverFallBackToTheDefault: the updater refuses a --threshold
// or --near-limit of 0 or below and a --compute-request-growth of 0, and the simulator's
// Options read those values as unset and put the defaults in their place, so simulate
// refuses them too, naming the flag, rather than report figures for the defaults; the
// values it accepts are the ones the run uses (its JSON settings).
func TestSimulateUpdaterFlagsNeverFallBackToTheDefault(t *testing.T) {
	for _, args := range [][]string{
		{"--change-threshold", "0"}, {"--change-threshold", "-0.1"},
		{"--near-limit", "0"}, {"--near-limit", "-0.5"},
		{"--compute-request-growth", "0"},
	} {
		_, _, err := run(t, append([]string{"simulate", "--format", "synthetic"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[0]+" "+args[1]) {
			t.Errorf("%v: error %v, want one naming %s %s", args, err, args[0], args[1])
		}
	}
	out, _, err := run(t, "simulate", "--format", "synthetic", "--synth-workloads", "1", "--synth-duration", "3h",
		"--policies", "gpufrac", "--output-format", "json", "--change-threshold", "0.01", "--near-limit", "0.05",
		"--compute-request-growth", "-1")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Runs []struct {
			Settings struct{ ChangeThreshold, NearLimit float64 }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Runs) != 1 {
		t.Fatalf("json: %v (%d runs)", err, len(rep.Runs))
	}
	if s := rep.Runs[0].Settings; s.ChangeThreshold != 0.01 || s.NearLimit != 0.05 {
		t.Errorf("settings %+v, want the change threshold 0.01 and near limit 0.05 given", s)
	}
}

// TestSimulateGenTD26PodWithoutMemoryNamesContainerIP: the pod and Deployment names of a
// GenTD26 trace are made up by the reader, so the error about a pod with duty-cycle but
// no memory samples names its container_ip, which is what the files hold.
func TestSimulateGenTD26PodWithoutMemoryNamesContainerIP(t *testing.T) {
	dir := t.TempDir()
	mem, duty := "timestamp_anon,value,container_ip\n", "value,timestamp_anon,container_ip\n"
	for i := range 10 {
		ts := 1662858720 + 60*i
		mem += fmt.Sprintf("%d,%d,ip-with-memory\n", ts, 10<<30)
		duty += fmt.Sprintf("20,%d,ip-with-memory\n20,%d,ip-without-memory\n", ts, ts)
	}
	for name, body := range map[string]string{"pod_gpu_memory_used_bytes_anon.csv": mem, "pod_gpu_duty_cycle_anon.csv": duty} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := run(t, "simulate", "--input", dir)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 trace pods have no GPU memory sample") || !strings.Contains(err.Error(), "ip-without-memory") {
		t.Errorf("error %v, want one naming container_ip ip-without-memory", err)
	}
}

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// run executes the gpufrac command line in-process and returns stdout, stderr.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestTraceSynthAndImportLong(t *testing.T) {
	dir := t.TempDir()
	om, csv, yml := filepath.Join(dir, "s.om"), filepath.Join(dir, "s.csv"), filepath.Join(dir, "s.yaml")
	_, stderr, err := run(t, "trace", "synth", "--workloads", "2", "--pods-per-workload", "2", "--duration", "1h",
		"--seed", "3", "--end", "2026-03-01T00:00:00Z", "--output", om, "--long-csv", csv, "--manifests", yml)
	if err != nil {
		t.Fatal(err)
	}
	want := "synthesized 4 pods, 2 workloads, samples memory=240 compute=240 latency="
	if !strings.HasPrefix(stderr, want) || !strings.HasSuffix(stderr, "first sample 2026-02-28T23:01:00Z, last sample 2026-03-01T00:00:00Z (59m0s)\n") {
		t.Errorf("summary %q", stderr)
	}
	// The long CSV imports back to the same OpenMetrics text.
	om2 := filepath.Join(dir, "s2.om")
	if _, stderr, err = run(t, "trace", "import", "--format", "long", "--input", csv, "--output", om2); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "skipped memory=0 compute=0 latency=0") {
		t.Errorf("summary %q", stderr)
	}
	a, _ := os.ReadFile(om)
	b, _ := os.ReadFile(om2)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("OpenMetrics of the synthetic trace and of its long CSV differ")
	}
	y, _ := os.ReadFile(yml)
	if !bytes.Contains(y, []byte("kind: GPUFractionAutoscaler")) || !bytes.Contains(y, []byte("replicas: 2")) {
		t.Errorf("manifests:\n%s", y)
	}
}

func TestTraceImportGenTD26(t *testing.T) {
	data := filepath.Join("..", "..", "..", "shared", "data", "gentd26")
	if _, err := os.Stat(data); err != nil {
		t.Skip("shared data absent")
	}
	stdout, stderr, err := run(t, "trace", "import", "--input", data, "--pods", "4", "--pods-per-deployment", "2",
		"--duration", "1h", "--end", "2026-03-01T00:00:00Z", "--manifests", "-")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stderr, "imported 4 pods, 2 workloads,") || !strings.Contains(stderr, ", last sample 2026-03-01T00:00:00Z") {
		t.Errorf("summary %q", stderr)
	}
	if strings.Count(stdout, "\nkind: Deployment\n") != 2 || strings.Count(stdout, "replicas: 2") != 2 {
		t.Errorf("manifests:\n%s", stdout)
	}
}

// TestTraceErrors: bad input names its file and line, a bad flag its flag (--pods,
// --pods-per-deployment and --duration were named together, and trace synth's --workloads,
// --pods-per-workload, --duration and --step; --pods-per-deployment 0 was read as 1).
func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("timestamp,namespace,pod,container,memory_bytes,compute_ratio\n60,ns,x-bcdfg-hjklm,c,1,0\n120,ns,x-bcdfg-hjklm,c,abc,0\n"), 0o644)
	out := filepath.Join(dir, "out.om")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "import", "--format", "long", "--input", bad, "-o", out}, bad + `:3: memory_bytes "abc" is not a number`},
		{[]string{"trace", "import", "--format", "long", "--input", bad, "--pods", "2", "-o", out}, "--pods applies to --format gentd26 only"},
		{[]string{"trace", "import", "--format", "csv", "--input", bad, "-o", out}, `--format "csv": want gentd26 or long`},
		{[]string{"trace", "import", "--input", bad}, "nothing to write: give --output, --manifests or --long-csv"},
		{[]string{"trace", "synth", "-o", out, "--gpu-memory", "lots"}, `--gpu-memory "lots": want the memory of one GPU as a quantity such as 80Gi`},
		{[]string{"trace", "synth", "-o", out, "--end", "yesterday"}, `--end "yesterday": want RFC 3339`},
		{[]string{"trace", "synth", "-o", out, "--gpu-memory", "8Gi"}, "more than the GPU capacity 8192 MiB"},
		{[]string{"trace", "import", "--input", dir, "-o", out, "--pods-per-deployment", "0"}, "--pods-per-deployment 0: want at least 1"},
		{[]string{"trace", "synth", "-o", out, "--workloads", "0"}, "--workloads 0: must be positive"},
		{[]string{"trace", "synth", "-o", out, "--pods-per-workload", "-1"}, "--pods-per-workload -1: must be positive"},
		{[]string{"trace", "synth", "-o", out, "--duration", "0s"}, "--duration 0s: must be positive"},
		{[]string{"trace", "synth", "-o", out, "--step", "-1m"}, "--step -1m0s: must be positive"},
		{[]string{"trace", "import", "--input", dir, "-o", out, "--pods", "-1"}, "--pods -1: must not be negative"},
		{[]string{"trace", "import", "--input", dir, "-o", out, "--duration", "-1h"}, "--duration -1h0m0s: must not be negative"},
		{[]string{"simulate", "--input", dir, "--pods-per-deployment", "0"}, "--pods-per-deployment 0: want at least 1"},
	} {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a failed run left an output file")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".out.om*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

func TestParseGPUMemory(t *testing.T) {
	for in, want := range map[string]float64{"80Gi": 80 << 30, "80GiB": 80 << 30, "141000000000": 141e9, "1024Mi": 1 << 30} {
		if got, err := parseGPUMemory(in); err != nil || got != want {
			t.Errorf("parseGPUMemory(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	// A unit left off (80 bytes), a size under 1Gi, zero, a negative or malformed value,
	// or a decimal suffix (141G is 131.3 GiB) is an error naming the flag and the value,
	// never a GPU of that many bytes.
	for _, in := range []string{"80", "512Mi", "0", "-80Gi", "eighty", "141G", "80G"} {
		if got, err := parseGPUMemory(in); err == nil || !strings.Contains(err.Error(), "--gpu-memory") || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseGPUMemory(%q) = %v, %v; want an error naming --gpu-memory and the value", in, got, err)
		}
	}
}

// TestOutputToMissingDirectory: an output whose directory does not exist fails before any
// work (no trace read, synthesized or simulated) with the flag and the path, and a write
// that fails names the output, not the hidden temporary file it writes through.
func TestOutputToMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "out")
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	underFile := filepath.Join(file, "out")
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"trace", "synth", "--output", missing}, "--output"},
		{[]string{"trace", "synth", "--manifests", missing}, "--manifests"},
		{[]string{"trace", "synth", "--long-csv", missing}, "--long-csv"},
		{[]string{"trace", "synth", "--long-csv", underFile}, "--long-csv"},
		{[]string{"trace", "import", "--format", "long", "--input", file, "--long-csv", missing}, "--long-csv"},
		{[]string{"simulate", "--format", "synthetic", "--output", missing}, "--output"},
		{[]string{"simulate", "--format", "synthetic", "--output", underFile}, "--output"},
	} {
		_, stderr, err := run(t, c.args...)
		path := c.args[len(c.args)-1]
		if err == nil || !strings.Contains(err.Error(), c.flag+" "+path+": directory") {
			t.Errorf("%v: error %v, want %s %s and its directory", c.args, err, c.flag, path)
		}
		if stderr != "" {
			t.Errorf("%v: work done before the error: %q", c.args, stderr)
		}
	}
	// An output that is a directory fails before any work too; before, the whole run
	// went and then 'rename /tmp/.out.123 DIR: file exists'.
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"trace", "synth", "--output", dir}, "--output"},
		{[]string{"trace", "synth", "--manifests", dir}, "--manifests"},
		{[]string{"trace", "import", "--format", "long", "--input", file, "--long-csv", dir}, "--long-csv"},
		{[]string{"simulate", "--format", "synthetic", "--output", dir}, "--output"},
	} {
		_, stderr, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.flag+" "+dir+": a directory") {
			t.Errorf("%v: error %v, want %s %s: a directory", c.args, err, c.flag, dir)
		}
		if stderr != "" {
			t.Errorf("%v: work done before the error: %q", c.args, stderr)
		}
	}
	// A directory that cannot be written in (no permission; as root, /proc) fails before
	// any work too, and leaves nothing there; before, 'writing F: permission denied' came
	// after the whole run.
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		locked = "/proc"
	}
	if fi, err := os.Stat(locked); err == nil && fi.IsDir() {
		out := filepath.Join(locked, "report.md")
		_, stderr, err := run(t, "simulate", "--format", "synthetic", "--output", out)
		if err == nil || !strings.HasPrefix(err.Error(), "--output "+out+": cannot write in "+locked+": ") || stderr != "" {
			t.Errorf("--output in %s: error %v, stderr %q; want it refused before any work", locked, err, stderr)
		}
		plots := filepath.Join(locked, "plots")
		if _, stderr, err := run(t, "simulate", "--format", "synthetic", "--plots", plots); err == nil || !strings.HasPrefix(err.Error(), "--plots "+plots+": cannot write in "+locked+": ") || stderr != "" {
			t.Errorf("--plots in %s: error %v, stderr %q; want it refused before any run", locked, err, stderr)
		}
		if entries, _ := os.ReadDir(filepath.Join(dir, "locked")); len(entries) > 0 {
			t.Errorf("files left in the locked directory: %v", entries)
		}
	}
	// A directory that is a file is said to be one, not to be missing.
	if _, _, err := run(t, "trace", "synth", "--output", underFile); err == nil || !strings.Contains(err.Error(), "is a file, not a directory") {
		t.Errorf("output under a file: %v, want its directory said to be a file", err)
	}
	err := writeFile(underFile, nil, func(io.Writer) error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), "writing "+underFile+": ") || strings.Contains(err.Error(), ".out.") {
		t.Errorf("writeFile under a file: %v, want the output named, not the temporary file", err)
	}
}

// TestZeroDefaultsAreExplained: help hides a default of 0, so a numeric or duration flag
// defaulting to 0 must say what 0 means ("0: all", "0: off"), in every command.
func TestZeroDefaultsAreExplained(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			switch f.Value.Type() {
			case "int", "int32", "int64", "uint64", "float64", "duration":
				if (f.DefValue == "0" || f.DefValue == "0s") && !strings.Contains(f.Usage, "0:") {
					t.Errorf("%s --%s defaults to %s without saying what that means: %q", c.CommandPath(), f.Name, f.DefValue, f.Usage)
				}
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}

// TestOutputIsNotAnInput: an output that names the input trace (by the same path, a
// relative one or a link), or another output's file, fails before any work and the
// input is left as it was; before, simulate -o TRACE.csv replaced the trace with its
// report, trace import --long-csv TRACE.csv rewrote it, and -o F --long-csv F kept only
// the last written.
func TestOutputIsNotAnInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	body := "timestamp,namespace,pod,container,workload,memory_bytes,compute_ratio\n"
	for i := range 5 {
		body += "1767225" + strconv.Itoa(600+60*i) + ",ns,a-1,main,a,10737418240,0.2\n"
	}
	if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.csv")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	gentd := filepath.Join(dir, "gentd")
	if err := os.Mkdir(gentd, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "out")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--format", "long", "--input", in, "--output", in}, "--output " + in + ": the input trace"},
		{[]string{"simulate", "--format", "long", "--input", in, "--output", rel}, "--output " + rel + ": the input trace"},
		{[]string{"simulate", "--format", "long", "--input", in, "--output", link}, "--output " + link + ": the input trace"},
		{[]string{"simulate", "--format", "gentd26", "--input", gentd, "--output", filepath.Join(gentd, "pod_gpu_duty_cycle_anon.csv")}, "--output " + filepath.Join(gentd, "pod_gpu_duty_cycle_anon.csv") + ": the input trace"},
		{[]string{"trace", "import", "--format", "long", "--input", in, "--long-csv", in}, "--long-csv " + in + ": the input trace"},
		{[]string{"trace", "import", "--format", "long", "--input", in, "--manifests", link}, "--manifests " + link + ": the input trace"},
		{[]string{"trace", "import", "--format", "long", "--input", in, "--output", other, "--long-csv", other}, "--long-csv " + other + ": the file of --output too"},
		{[]string{"trace", "synth", "--output", other, "--manifests", other}, "--manifests " + other + ": the file of --output too"},
	} {
		_, stderr, err := run(t, c.args...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
		if stderr != "" {
			t.Errorf("%v: work done before the error: %q", c.args, stderr)
		}
		if got, _ := os.ReadFile(in); string(got) != body {
			t.Fatalf("%v: the input trace was changed", c.args)
		}
	}
}

// TestTraceInputErrors: an --input a new user gets wrong names the flag and says what the
// format wants, before anything is read: a long CSV given without --format long (gentd26
// is the default), a GenTD26 directory given with --format long, stdin for gentd26, a
// path that does not exist. Before, they read "reading GenTD26 trace in F: open
// F/pod_gpu_memory_used_bytes_anon.csv: not a directory" and "read DIR: is a directory".
func TestTraceInputErrors(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(csv, []byte("timestamp,namespace,pod,container,memory_bytes,compute_ratio\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope.csv")
	out := filepath.Join(dir, "out.om")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--input", csv}, "--input " + csv + ": a file; --format gentd26 (the default) reads a GenTD26 directory"},
		{[]string{"simulate", "--format", "long", "--input", dir}, "--input " + dir + ": a directory; --format long reads a long CSV file"},
		{[]string{"simulate", "--input", "-"}, "--input -: stdin is read with --format long only"},
		{[]string{"simulate", "--format", "long", "--input", missing}, "--input " + missing + ": no such file or directory"},
		{[]string{"simulate", "--input", missing}, "--input " + missing + ": no such file or directory"},
		{[]string{"trace", "import", "--input", csv, "--output", out}, "--input " + csv + ": a file; --format gentd26"},
		{[]string{"trace", "import", "--format", "long", "--input", dir, "--output", out}, "--input " + dir + ": a directory"},
		{[]string{"trace", "import", "--format", "long", "--input", missing, "--output", out}, "--input " + missing + ": no such file or directory"},
	} {
		_, stderr, err := run(t, c.args...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to start %q", c.args, err, c.want)
		}
		if stderr != "" {
			t.Errorf("%v: work done before the error: %q", c.args, stderr)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written", out)
	}
}

// An --end that moves the trace outside 1970 to the year 5138 (Unix seconds 0 to 1e11)
// is an error naming --end and the ends that fit, before any output is written. Before,
// trace import --end 1970-01-01T00:30:00Z wrote a long CSV stamped -8940 that its own
// reader refuses ('out of range'), and --end 9999-01-01T00:00:00Z moved the trace to
// 2319 (a time.Duration saturates at 292 years) without a word.
func TestEndOutsideReadableTimes(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "s.csv")
	if _, _, err := run(t, "trace", "synth", "--workloads", "1", "--duration", "3h", "--end", "2026-03-01T00:00:00Z", "--long-csv", csv); err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"1970-01-01T00:30:00Z", "1900-01-01T00:00:00Z", "9999-01-01T00:00:00Z"} {
		out := filepath.Join(dir, "out.csv")
		for _, args := range [][]string{
			{"trace", "import", "--format", "long", "--input", csv, "--end", end, "--long-csv", out},
			{"trace", "synth", "--workloads", "1", "--duration", "3h", "--end", end, "--long-csv", out},
			{"simulate", "--format", "long", "--input", csv, "--end", end, "--policies", "one-per-pod", "--output", out},
			{"simulate", "--format", "synthetic", "--synth-workloads", "1", "--synth-duration", "3h", "--end", end, "--policies", "one-per-pod", "--output", out},
		} {
			_, _, err := run(t, args...)
			if err == nil || !strings.HasPrefix(err.Error(), "--end "+end+":") || !strings.Contains(err.Error(), "want an --end from 1970-01-01T02:59:00Z to") {
				t.Errorf("%s: err %v, want one naming --end and the ends that fit", strings.Join(args[:2], " "), err)
			}
			if _, serr := os.Stat(out); serr == nil {
				t.Errorf("%s --end %s: %s written", strings.Join(args[:2], " "), end, out)
				os.Remove(out)
			}
		}
	}
	// The latest end that fits is taken.
	if _, _, err := run(t, "trace", "import", "--format", "long", "--input", csv, "--end", "1970-01-01T02:59:00Z", "--long-csv", filepath.Join(dir, "early.csv")); err != nil {
		t.Errorf("earliest end that fits: %v", err)
	}
}

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/trace"
)

func init() { registerCommand(newTraceCmd) }

// traceCommands holds the constructors of `gpufrac trace` subcommands, filled by
// init functions of the files that define them.
var traceCommands []func() *cobra.Command

// registerTraceCommand adds a `gpufrac trace` subcommand constructor; call it from init.
func registerTraceCommand(f func() *cobra.Command) { traceCommands = append(traceCommands, f) }

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Args:  cobra.NoArgs, // an unknown subcommand is an error, not help with exit 0
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		Short: "Import, synthesize and convert GPU usage traces",
		Long: `Import or synthesize GPU usage traces of inference pods and write them as
OpenMetrics text (dcgm-exporter and kube-state-metrics series, for
"promtool tsdb create-blocks-from openmetrics"), Kubernetes manifests of the
workloads with a GPUFractionAutoscaler each, or a long CSV.

Units: GPU memory in bytes (MiB in the DCGM series), GPU compute as a ratio 0-1
(percent in DCGM_FI_DEV_GPU_UTIL), latency in seconds.`,
	}
	for _, f := range traceCommands {
		cmd.AddCommand(f())
	}
	return cmd
}

// traceOutputs are the output flags shared by trace subcommands.
type traceOutputs struct {
	output, manifests, longCSV string
	gpuMemory, modelName       string
	image                      string
	objective                  time.Duration
}

func (o *traceOutputs) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.output, "output", "o", "", "OpenMetrics file to write (\"-\": stdout): DCGM_FI_DEV_FB_USED/FB_FREE (MiB), DCGM_FI_DEV_GPU_UTIL (percent), inference_latency_p95_seconds, kube_pod_owner, kube_replicaset_owner")
	fs.StringVar(&o.manifests, "manifests", "", "YAML file to write (\"-\": stdout): a Namespace, and per workload a Deployment requesting nvidia.com/gpu: 1 and a GPUFractionAutoscaler (updateMode Off)")
	fs.StringVar(&o.longCSV, "long-csv", "", "long CSV file to write (\"-\": stdout): timestamp (Unix s), namespace, pod, container, workload, memory_bytes, compute_ratio (0-1), latency_p95_seconds")
	fs.StringVar(&o.gpuMemory, "gpu-memory", "80Gi", "GPU memory capacity per GPU, a Kubernetes quantity in bytes (80Gi = 80 GiB); DCGM_FI_DEV_FB_FREE = capacity - used")
	fs.StringVar(&o.modelName, "model-name", trace.DefaultGPUModelName, "modelName label of the DCGM series")
	fs.StringVar(&o.image, "image", trace.DefaultImage, "container image of the Deployments in --manifests")
	fs.DurationVar(&o.objective, "latency-objective", trace.DefaultLatencyObjective, "latency guardrail objective of the GPUFractionAutoscalers in --manifests (duration, e.g. 30s)")
}

// check refuses no output, two outputs on stdout or in one file, an output that is one
// of inputs (files read; it would be replaced, and the input lost), a missing output
// directory and a bad --gpu-memory, before any work.
func (o *traceOutputs) check(inputs ...string) error {
	if o.output == "" && o.manifests == "" && o.longCSV == "" {
		return fmt.Errorf("nothing to write: give --output, --manifests or --long-csv")
	}
	n := 0
	for _, p := range []string{o.output, o.manifests, o.longCSV} {
		if p == "-" {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("only one output can be stdout (\"-\")")
	}
	outs := []struct{ flag, path string }{{"--output", o.output}, {"--manifests", o.manifests}, {"--long-csv", o.longCSV}}
	for i, c := range outs {
		if err := checkOutputPath(c.flag, c.path, inputs...); err != nil {
			return err
		}
		for _, d := range outs[:i] {
			if sameFile(c.path, d.path) {
				return fmt.Errorf("%s %s: the file of %s too; one would replace the other", c.flag, c.path, d.flag)
			}
		}
	}
	_, err := parseGPUMemory(o.gpuMemory)
	return err
}

// checkOutputPath returns an error naming flag and path when path ("" or "-": none)
// cannot be written because its directory does not exist, is not a directory or cannot
// be written in (a temporary file is created there and removed), it is itself a directory (the write would fail only at its end, after all the work), or is
// one of inputs (a file read: writing it would lose it), before any work is done.
func checkOutputPath(flag, path string, inputs ...string) error {
	if path == "" || path == "-" {
		return nil
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%s %s: directory %s does not exist", flag, path, dir)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s %s: directory %s is a file, not a directory", flag, path, dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s %s: a directory; want the name of a file to write", flag, path)
	}
	// writeFile's own first step, tried now: a directory without write permission or on
	// a read-only file system failed only once the work was done.
	probe, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the probe's name means nothing to the user
		}
		return fmt.Errorf("%s %s: cannot write in %s: %w", flag, path, dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	for _, in := range inputs {
		if sameFile(path, in) {
			return fmt.Errorf("%s %s: the input trace; writing it would replace the trace", flag, path)
		}
	}
	return nil
}

// checkDirCreatable returns an error naming flag when dir ("": none) is a file or lies
// under one, so that it cannot be created (os.MkdirAll: "not a directory"), or when its
// nearest existing directory cannot be written in, before any work is done; a
// directory that exists or can be created, and written in, is no error.
func checkDirCreatable(flag, dir string) error {
	if dir == "" {
		return nil
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			probe, err := os.CreateTemp(p, ".gpufrac-probe.*")
			if err != nil {
				var pe *os.PathError
				if errors.As(err, &pe) {
					err = pe.Err
				}
				return fmt.Errorf("%s %s: cannot write in %s: %w", flag, dir, p, err)
			}
			probe.Close()
			os.Remove(probe.Name())
			return nil
		case err == nil && p == filepath.Clean(dir):
			return fmt.Errorf("%s %s: a file, not a directory", flag, dir)
		case err == nil:
			return fmt.Errorf("%s %s: %s is a file, not a directory", flag, dir, p)
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("%s %s: %w", flag, dir, err)
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// sameFile reports whether paths a and b ("" or "-": none) name one file: the same
// cleaned absolute path, or, where both exist, the same file by another name (a link,
// a relative path).
func sameFile(a, b string) bool {
	if a == "" || a == "-" || b == "" || b == "-" {
		return false
	}
	if aa, err := filepath.Abs(a); err == nil {
		if bb, err := filepath.Abs(b); err == nil && aa == bb {
			return true
		}
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// checkTraceInput returns an error naming --input when input ("": the caller's) cannot
// be a trace of format, before anything is read: it does not exist, a GenTD26
// directory that is a file (a long CSV given without --format long; gentd26 is the
// default), stdin for gentd26, or a long CSV that is a directory (a GenTD26 directory
// given with --format long). Before, these read as "open FILE/pod_gpu_….csv: not a
// directory" and "read DIR: is a directory".
func checkTraceInput(format, input string) error {
	if input == "" || input == "-" && format == "long" {
		return nil
	}
	if input == "-" {
		return fmt.Errorf("--input -: stdin is read with --format long only; --format %s reads a directory", format)
	}
	fi, err := os.Stat(input)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--input %s: no such file or directory", input)
	} else if err != nil {
		return fmt.Errorf("--input %s: %w", input, err)
	}
	switch {
	case format == "gentd26" && !fi.IsDir():
		return fmt.Errorf("--input %s: a file; --format gentd26 (the default) reads a GenTD26 directory, the one holding %s; give --format long for a long CSV file", input, trace.GenTD26MemoryFile)
	case format == "long" && fi.IsDir():
		return fmt.Errorf("--input %s: a directory; --format long reads a long CSV file; give --format gentd26 for a GenTD26 directory", input)
	}
	return nil
}

// traceInputs returns the files a trace reader of format reads from input: the long CSV
// itself, or the GenTD26 files in its directory.
func traceInputs(format, input string) []string {
	if format != "gentd26" {
		return []string{input}
	}
	return []string{filepath.Join(input, trace.GenTD26MemoryFile), filepath.Join(input, trace.GenTD26DutyCycleFile), filepath.Join(input, trace.GenTD26LatencyFile)}
}

// write writes the trace to every requested output.
func (o *traceOutputs) write(tr trace.Trace, stdout io.Writer) error {
	capBytes, err := parseGPUMemory(o.gpuMemory)
	if err != nil {
		return err
	}
	if o.output != "" {
		if err := writeFile(o.output, stdout, func(w io.Writer) error {
			return trace.WriteOpenMetrics(w, tr, trace.OpenMetricsOptions{GPUMemoryBytes: capBytes, ModelName: o.modelName})
		}); err != nil {
			return err
		}
	}
	if o.manifests != "" {
		if err := writeFile(o.manifests, stdout, func(w io.Writer) error {
			return trace.WriteManifests(w, tr, trace.ManifestOptions{Image: o.image, LatencyObjective: o.objective})
		}); err != nil {
			return err
		}
	}
	if o.longCSV != "" {
		if err := writeFile(o.longCSV, stdout, func(w io.Writer) error { return trace.WriteLongCSV(w, tr) }); err != nil {
			return err
		}
	}
	return nil
}

// parseGPUMemory parses a --gpu-memory value (backend.ParseGPUMemory: a quantity of at
// least 1Gi; "GiB" is read as "Gi") as bytes, its error naming the flag.
func parseGPUMemory(s string) (float64, error) {
	v, err := backend.ParseGPUMemory(s)
	if err != nil {
		return 0, fmt.Errorf("--gpu-memory %w", err)
	}
	return float64(v), nil
}

// parseEnd parses --end: "now" or RFC 3339.
func parseEnd(s string) (time.Time, error) {
	if s == "" || s == "now" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--end %q: want RFC 3339 (2026-01-02T15:04:05Z) or now", s)
	}
	return t, nil
}

// checkEnd reports a trace that --end (value end) moved outside trace.MinTime to
// trace.MaxTime: its outputs could not be read back (the long CSV reader refuses the
// times, Prometheus holds none before 1970), naming the flag and the --end values that
// fit the trace's length.
func checkEnd(end string, tr *trace.Trace) error {
	s := tr.Summarize()
	if s.Start.IsZero() || (!s.Start.Before(trace.MinTime) && !s.End.After(trace.MaxTime)) {
		return nil
	}
	return fmt.Errorf("--end %s: the trace's samples would run from %s to %s, outside %s to %s (Unix seconds 0 to 1e11, what the long CSV reader and Prometheus hold); want an --end from %s to %s",
		end, s.Start.Format(time.RFC3339), s.End.Format(time.RFC3339), trace.MinTime.Format(time.RFC3339), trace.MaxTime.Format(time.RFC3339),
		trace.MinTime.Add(s.End.Sub(s.Start)).Format(time.RFC3339), trace.MaxTime.Format(time.RFC3339))
}

// writeFile writes through fn to path ("-": stdout) via a temporary file in the
// same directory, so a failed write leaves no partial file.
func writeFile(path string, stdout io.Writer, fn func(io.Writer) error) error {
	if path == "-" {
		return fn(stdout)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary file's name means nothing to the user
		}
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := fn(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// readLongCSV reads the long CSV at path ("-": the command's stdin); errors name the
// file and line.
func readLongCSV(cmd *cobra.Command, path string) (trace.Trace, trace.Stats, error) {
	if path == "-" {
		return trace.ReadLongCSV(cmd.InOrStdin(), "stdin")
	}
	f, err := os.Open(path)
	if err != nil {
		return trace.Trace{}, trace.Stats{}, err
	}
	defer f.Close()
	return trace.ReadLongCSV(f, path)
}

// inputWarnings says, per signal whose reader skipped values as out of range, where the
// first was, why, and how many of the signal's values went with it: a report computed
// from what is left must say so. dir is the GenTD26 directory its file names are in
// ("" for a long CSV, named as given). Empty when nothing was skipped that way.
func inputWarnings(st *trace.Stats, dir string) []string {
	if st == nil {
		return nil
	}
	var out []string
	for _, s := range []struct {
		name string
		st   trace.SignalStats
	}{{"memory", st.Memory}, {"compute", st.Compute}, {"latency", st.Latency}} {
		if f := s.st.FirstOutOfRange; f != nil {
			if dir != "" {
				f = &trace.InputError{File: filepath.Join(dir, f.File), Line: f.Line, Msg: f.Msg}
			}
			out = append(out, fmt.Sprintf("%s; skipped, %d of the %d %s values in all (the report is computed without them)",
				f.Error(), s.st.OutOfRange, s.st.Values, s.name))
		}
	}
	return out
}

// minGPUPodMemoryBytes is the least GPU memory a pod that uses the GPU at all holds:
// 100 MiB, well below a CUDA context (about 300 MiB; GenTD26's smallest positive peak is
// 965 MiB). A positive peak under it is a memory column in KiB, MiB or GiB, not bytes
// (a pod of up to 100 GiB written in KiB reads as at most 100 MiB).
const minGPUPodMemoryBytes = 100 << 20

// memoryUnitWarning says how many pods of tr peak above 0 but below
// minGPUPodMemoryBytes (the first named): the report would pack them as next to
// nothing. Empty when none does.
func memoryUnitWarning(tr trace.Trace, input string) string {
	n, first := 0, ""
	for i := range tr.Pods {
		p := &tr.Pods[i]
		peak := 0.0
		for _, pt := range p.Memory {
			peak = max(peak, pt.V)
		}
		if peak > 0 && peak < minGPUPodMemoryBytes {
			if n == 0 {
				first = fmt.Sprintf("%s/%s container %s peaks at %g bytes", p.Namespace, p.Pod, p.Container, peak)
			}
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %d of %d pods use less than 100 MiB of GPU memory at their peak (%s): memory is in bytes and a GPU pod holds at least its CUDA context (about 300 MiB); is the memory column in KiB, MiB or GiB?",
		input, n, len(tr.Pods), first)
}

// summaryLine renders a trace summary and reader stats on one line.
func summaryLine(verb string, tr trace.Trace, st *trace.Stats) string {
	s := verb + " " + tr.Summarize().String()
	if st != nil {
		s += fmt.Sprintf("; skipped memory=%d compute=%d latency=%d (duplicates=%d out-of-range=%d trimmed=%d orphans=%d), unsorted=%d",
			st.Memory.Skipped(), st.Compute.Skipped(), st.Latency.Skipped(),
			st.Memory.Duplicates+st.Compute.Duplicates+st.Latency.Duplicates,
			st.Memory.OutOfRange+st.Compute.OutOfRange+st.Latency.OutOfRange,
			st.Memory.Trimmed+st.Compute.Trimmed+st.Latency.Trimmed,
			st.Latency.Orphans+st.Memory.Orphans+st.Compute.Orphans,
			st.Memory.Unsorted+st.Compute.Unsorted+st.Latency.Unsorted)
		if st.Latency.Missing && st.Latency.File != "" {
			s += ", no latency input"
		}
	}
	return s
}

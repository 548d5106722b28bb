package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/trace"
)

func init() { registerTraceCommand(newTraceImportCmd) }

// traceImportLong is the help of gpufrac trace import.
const traceImportLong = `Import a GPU usage trace.

--format gentd26 reads the Alibaba GenTD26 trace directory (cluster-trace-v2026-GenAI):
pod_gpu_memory_used_bytes_anon.csv (bytes), pod_gpu_duty_cycle_anon.csv (percent,
stored as ratio 0-1) and, if present, model_predict_data_anon.csv (per-request ms,
aggregated to a per-minute p95 in seconds). Each container_ip is one pod of a
Deployment named <prefix>-NNN; the trace is shifted so it ends at --end.

--format long reads a CSV (FILE or "-" for stdin) with header
timestamp,namespace,pod,container,memory_bytes,compute_ratio and optional workload
and latency_p95_seconds columns; timestamp is Unix seconds or RFC 3339, memory in
bytes, compute as a ratio 0-1, latency in seconds. The Deployment comes from the
pod name (<deployment>-<hash>-<suffix>) or the workload column. Times are kept
unless --end is given.

A one-line summary (pods, workloads, samples per signal, skipped values, time
range) goes to stderr, and a warning per signal with values skipped as out of range
(compute_ratio above 1, duty cycle above 100, memory above 2^47 bytes): the first one's
file and line, why, and how many (docs/cli.md).`

// traceImportFlags are the flags of gpufrac trace import.
type traceImportFlags struct {
	format, input, end string
	g                  trace.GenTD26Options
	out                traceOutputs
}

func newTraceImportCmd() *cobra.Command {
	var fl traceImportFlags
	cmd := &cobra.Command{
		Use:   "import --format gentd26|long --input DIR|FILE --output FILE.om",
		Short: "Import a GPU usage trace and write OpenMetrics, manifests or long CSV",
		Long:  traceImportLong,
		Example: `  gpufrac trace import --format gentd26 --input ../shared/data/gentd26 --output /tmp/gentd26.om --manifests /tmp/gentd26.yaml --duration 6h --pods 20
  promtool tsdb create-blocks-from openmetrics /tmp/gentd26.om /var/lib/prometheus/data`,
		Args: noArgs("the trace is given with --input"),
		RunE: func(cmd *cobra.Command, _ []string) error { return fl.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.format, "format", "gentd26", "input format: gentd26 (a GenTD26 directory) or long (a long CSV file)")
	f.StringVarP(&fl.input, "input", "i", "", "input directory (gentd26) or file (long; \"-\": stdin)")
	f.IntVar(&fl.g.MaxPods, "pods", 0, "gentd26: import at most this many pods, in container_ip order (0: all)")
	f.DurationVar(&fl.g.Duration, "duration", 0, "gentd26: keep only the last part of the trace of this length, e.g. 6h (0: all of it)")
	f.IntVar(&fl.g.PodsPerDeployment, "pods-per-deployment", 1, "gentd26: trace pods per Deployment (replicas)")
	f.StringVar(&fl.g.Namespace, "namespace", "gentd26", "gentd26: namespace of the pods")
	f.StringVar(&fl.g.Container, "container", "inference", "gentd26: container name of the pods")
	f.StringVar(&fl.g.DeploymentPrefix, "deployment-prefix", "sd", "gentd26: Deployments are named <prefix>-000, <prefix>-001, ...")
	f.StringVar(&fl.end, "end", "", "shift the trace so its last sample is at this time: RFC 3339 or now (default: now for gentd26; a long CSV keeps its times)")
	fl.out.addFlags(f)
	return cmd
}

// run reads the trace of --format and writes the outputs, then the summary line.
func (fl *traceImportFlags) run(cmd *cobra.Command) error {
	if err := fl.out.check(traceInputs(fl.format, fl.input)...); err != nil {
		return err
	}
	if fl.input == "" {
		return fmt.Errorf("--input is required")
	}
	if err := checkTraceInput(fl.format, fl.input); err != nil {
		return err
	}
	var (
		tr  trace.Trace
		st  trace.Stats
		err error
	)
	switch fl.format {
	case "gentd26":
		tr, st, err = fl.readGenTD26()
	case "long":
		tr, st, err = fl.readLong(cmd)
	default:
		return fmt.Errorf("--format %q: want gentd26 or long", fl.format)
	}
	if err != nil {
		return err
	}
	if len(tr.Pods) == 0 {
		return fmt.Errorf("%s: no pods with samples", fl.input)
	}
	if cmd.Flags().Changed("end") {
		if err := checkEnd(fl.end, &tr); err != nil {
			return err
		}
	}
	if err := fl.out.write(tr, cmd.OutOrStdout()); err != nil {
		return err
	}
	fmt.Fprintln(cmd.ErrOrStderr(), summaryLine("imported", tr, &st))
	dir := ""
	if fl.format == "gentd26" {
		dir = fl.input
	}
	for _, w := range inputWarnings(&st, dir) {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", strings.Replace(w, "the report is computed", "written", 1))
	}
	if w := memoryUnitWarning(tr, fl.input); w != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
	return nil
}

// readGenTD26 reads the GenTD26 directory --input, ending at --end.
func (fl *traceImportFlags) readGenTD26() (trace.Trace, trace.Stats, error) {
	var err error
	if fl.g.End, err = parseEnd(fl.end); err != nil {
		return trace.Trace{}, trace.Stats{}, err
	}
	if err := checkGenTD26(fl.g); err != nil {
		return trace.Trace{}, trace.Stats{}, err
	}
	tr, st, err := trace.ReadGenTD26(fl.input, fl.g)
	if err != nil {
		return tr, st, fmt.Errorf("reading GenTD26 trace in %s: %w", fl.input, err)
	}
	return tr, st, nil
}

// checkGenTD26 refuses a negative --pods or --duration and a --pods-per-deployment under
// 1 (the reader would take 1), naming the flag (gpufrac trace import and gpufrac
// simulate).
func checkGenTD26(o trace.GenTD26Options) error {
	switch {
	case o.MaxPods < 0:
		return fmt.Errorf("--pods %d: must not be negative (0: all)", o.MaxPods)
	case o.PodsPerDeployment < 1:
		return fmt.Errorf("--pods-per-deployment %d: want at least 1 trace pod per Deployment", o.PodsPerDeployment)
	case o.Duration < 0:
		return fmt.Errorf("--duration %s: must not be negative (0: all of it)", o.Duration)
	}
	return nil
}

// readLong reads the long CSV --input ("-": stdin), shifted to --end only when given;
// the flags of --format gentd26 are refused.
func (fl *traceImportFlags) readLong(cmd *cobra.Command) (trace.Trace, trace.Stats, error) {
	if err := onlyFor(cmd, "gentd26", "pods", "duration", "pods-per-deployment", "namespace", "container", "deployment-prefix"); err != nil {
		return trace.Trace{}, trace.Stats{}, err
	}
	tr, st, err := readLongCSV(cmd, fl.input)
	if err != nil || !cmd.Flags().Changed("end") {
		return tr, st, err
	}
	at, err := parseEnd(fl.end)
	if err != nil {
		return trace.Trace{}, trace.Stats{}, err
	}
	tr.ShiftToEnd(at)
	return tr, st, nil
}

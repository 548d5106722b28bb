package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/trace"
)

func init() { registerTraceCommand(newTraceImportCmd) }

func newTraceImportCmd() *cobra.Command {
	var (
		format, input, end string
		g                  trace.GenTD26Options
		out                traceOutputs
	)
	cmd := &cobra.Command{
		Use:   "import --format gentd26|long --input DIR|FILE --output FILE.om",
		Short: "Import a GPU usage trace and write OpenMetrics, manifests or long CSV",
		Long: `Import a GPU usage trace.

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
range) goes to stderr.`,
		Example: `  gpufrac trace import --format gentd26 --input ../shared/data/gentd26 --output /tmp/gentd26.om --manifests /tmp/gentd26.yaml --duration 6h --pods 20
  promtool tsdb create-blocks-from openmetrics /tmp/gentd26.om /var/lib/prometheus/data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if input == "" {
				return fmt.Errorf("--input is required")
			}
			var (
				tr  trace.Trace
				st  trace.Stats
				err error
			)
			switch format {
			case "gentd26":
				if g.End, err = parseEnd(end); err != nil {
					return err
				}
				if g.MaxPods < 0 || g.PodsPerDeployment < 0 || g.Duration < 0 {
					return fmt.Errorf("--pods, --pods-per-deployment and --duration must not be negative")
				}
				tr, st, err = trace.ReadGenTD26(input, g)
			case "long":
				for _, f := range []string{"pods", "duration", "pods-per-deployment", "namespace", "container", "deployment-prefix"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s applies to --format gentd26 only", f)
					}
				}
				in, name := os.Stdin, "stdin"
				if input != "-" {
					if in, err = os.Open(input); err != nil {
						return err
					}
					defer in.Close()
					name = input
				}
				if tr, st, err = trace.ReadLongCSV(in, name); err != nil {
					return err
				}
				if cmd.Flags().Changed("end") {
					var at time.Time
					if at, err = parseEnd(end); err != nil {
						return err
					}
					tr.ShiftToEnd(at)
				}
			default:
				return fmt.Errorf("--format %q: want gentd26 or long", format)
			}
			if err != nil {
				return err
			}
			if len(tr.Pods) == 0 {
				return fmt.Errorf("%s: no pods with samples", input)
			}
			if err := out.write(tr, cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), summaryLine("imported", tr, &st))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "gentd26", "input format: gentd26 (a GenTD26 directory) or long (a long CSV file)")
	f.StringVarP(&input, "input", "i", "", "input directory (gentd26) or file (long; \"-\": stdin)")
	f.IntVar(&g.MaxPods, "pods", 0, "gentd26: import at most this many pods, in container_ip order (0: all)")
	f.DurationVar(&g.Duration, "duration", 0, "gentd26: keep only the last part of the trace of this length, e.g. 6h (0: all of it)")
	f.IntVar(&g.PodsPerDeployment, "pods-per-deployment", 1, "gentd26: trace pods per Deployment (replicas)")
	f.StringVar(&g.Namespace, "namespace", "gentd26", "gentd26: namespace of the pods")
	f.StringVar(&g.Container, "container", "inference", "gentd26: container name of the pods")
	f.StringVar(&g.DeploymentPrefix, "deployment-prefix", "sd", "gentd26: Deployments are named <prefix>-000, <prefix>-001, ...")
	f.StringVar(&end, "end", "now", "shift the trace so its last sample is at this time: RFC 3339 or now (gentd26: default now; long: times kept unless given)")
	out.addFlags(f)
	return cmd
}

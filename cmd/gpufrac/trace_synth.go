package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/trace"
)

func init() { registerTraceCommand(newTraceSynthCmd) }

func newTraceSynthCmd() *cobra.Command {
	var (
		o   trace.SynthOptions
		end string
		out traceOutputs
	)
	cmd := &cobra.Command{
		Use:   "synth --workloads N --duration 24h --seed 1 --output FILE.om",
		Short: "Generate a seeded synthetic inference trace",
		Long: `Generate a synthetic GPU usage trace of inference workloads, the same for the
same flags. Per workload, parameters are drawn from distributions whose defaults
follow the published GenTD26 statistics (per-pod peak GPU memory median 37.1 GiB,
max 47.3 GiB; peak/mean memory 1.6-2.0; mean duty cycle 7%; 67% of duty-cycle
samples exactly 0); per pod, memory (bytes) has a loaded-model plateau, adapter
level changes, slow cache growth, spikes and restarts; compute (ratio 0-1) is
exactly 0 when idle and follows a diurnal curve with bursts; latency p95 (seconds)
is sampled when busy. See trace.SynthModel for every default and its source.`,
		Example: `  gpufrac trace synth --workloads 20 --pods-per-workload 2 --duration 24h --seed 1 --output /tmp/synth.om --manifests /tmp/synth.yaml`,
		Args:    noArgs("the outputs are given with --output, --manifests or --long-csv"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if err := checkSynthSizes(o, "--", true); err != nil {
				return err
			}
			if a := o.Model.ArrivingWorkloads; a < 0 || a > 1 {
				return fmt.Errorf("--arriving %v: want 0-1", a)
			}
			if o.Step%time.Second != 0 {
				return fmt.Errorf("--step %s: want whole seconds, e.g. 1m or 30s", o.Step)
			}
			if err := o.Validate(); err != nil { // names the API server would refuse, too
				return err
			}
			var err error
			if o.End, err = parseEnd(end); err != nil {
				return err
			}
			tr := trace.Synthesize(o)
			if err := checkEnd(end, &tr); err != nil {
				return err
			}
			if err := out.write(tr, cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), summaryLine("synthesized", tr, nil))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Workloads, "workloads", 4, "number of workloads (Deployments)")
	f.IntVar(&o.PodsPerWorkload, "pods-per-workload", 1, "replicas per workload")
	f.DurationVar(&o.Duration, "duration", trace.DefaultSynthDuration, "length of the trace, e.g. 24h")
	f.DurationVar(&o.Step, "step", trace.DefaultSynthStep, "time between samples, whole seconds, e.g. 1m")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed")
	f.Float64Var(&o.Model.ArrivingWorkloads, "arriving", 0, "share of workloads (ratio 0-1) deployed while the trace runs, between 10 % and 75 % of it (trace.SynthModel.ArrivingWorkloads; 0: every workload runs from the start)")
	f.StringVar(&end, "end", "now", "time of the last sample: RFC 3339 or now (truncated to --step)")
	f.StringVar(&o.Namespace, "namespace", "synth", "namespace of the pods")
	f.StringVar(&o.Container, "container", "inference", "container name of the pods")
	f.StringVar(&o.WorkloadPrefix, "workload-prefix", "wl", "workloads are named <prefix>-000, <prefix>-001, ...")
	out.addFlags(f)
	return cmd
}

// checkSynthSizes refuses a workload count, pods per workload or duration of o (and its
// step, with step) of 0 or below, naming the flag: prefix and the option's name ("--"
// for trace synth, "--synth-" for simulate --format synthetic). SynthOptions would take
// its defaults for them without a word.
func checkSynthSizes(o trace.SynthOptions, prefix string, step bool) error {
	type check struct {
		name     string
		value    any
		positive bool
	}
	checks := []check{{"workloads", o.Workloads, o.Workloads >= 1}, {"pods-per-workload", o.PodsPerWorkload, o.PodsPerWorkload >= 1},
		{"duration", o.Duration, o.Duration > 0}}
	if step {
		checks = append(checks, check{"step", o.Step, o.Step > 0})
	}
	for _, c := range checks {
		if !c.positive {
			return fmt.Errorf("%s%s %v: must be positive", prefix, c.name, c.value)
		}
	}
	return nil
}

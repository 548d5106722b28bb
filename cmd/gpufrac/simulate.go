package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/policy"
	"github.com/gpufrac/gpufrac/simulate"
	"github.com/gpufrac/gpufrac/trace"
)

func init() { registerCommand(newSimulateCmd) }

// genTD26End is the end of the published GenTD26 trace (its last timestamp_anon,
// 1662940800): simulate keeps the published times by default, so a run does not depend
// on the day it runs (resize windows and hourly aggregation intervals see the same times).
var genTD26End = time.Unix(1662940800, 0).UTC()

// synthEnd is where simulate's synthetic trace ends by default, fixed for the same reason.
var synthEnd = time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)

// simulateFlags holds the simulate command's flag values.
type simulateFlags struct {
	format, input, end          string
	gpuMemory, policies         []string
	gentd                       trace.GenTD26Options
	synth                       trace.SynthOptions
	opts                        simulate.Options
	headroom                    int32
	fitHeadroom                 string
	windowSchedule, windowZone  string
	windowDuration              time.Duration
	urgentGrowth                bool
	youngEvidence               bool
	outputFormat, output, plots string
	markdown                    bool
	plotFormats                 []string
	warmUps                     []time.Duration
}

func newSimulateCmd() *cobra.Command {
	var f simulateFlags
	cmd := &cobra.Command{
		Use:   "simulate --input DIR|FILE --format gentd26|long [--gpu-memory 80Gi,...]",
		Short: "Replay a GPU usage trace through gpufrac and other sharing policies and compare them",
		Long: `Replay a GPU usage trace minute by minute (one recommender cycle per step) through
sharing policies side by side, and evaluate each against the usage the trace shows.

Policies: one-per-pod (a whole GPU each), time-slicing-N (1/N of memory and compute
each), vpa-memory (VPA's memory rule: p90 of daily peaks x 1.15), gpufrac (the
recommender's own estimator and policy code, the updater's own decision code and
what the admission webhook writes), clairvoyant-peak (each pod's true peak memory
and compute reserved at start) and clairvoyant-memory (true peak memory only, the
bound). Pods are packed best-fit by memory onto GPUs of --gpu-memory, with the sum
of compute allocations at most 1 GPU, and never migrate.

Per policy the report gives GPU-minutes held and their ratio to one GPU per pod and
to the clairvoyant-memory bound, pod-minutes over the pod's memory allocation (an OOM
under an enforcing backend), GPU-minutes over the GPU's memory (an OOM without
enforcement), pod-minutes in compute contention (co-tenants above 100 %), mean
memory and compute utilisation of the GPUs held, replacements and cold-start
pod-minutes.

--backend kai-nvfractions replays the request/limit contract of KAI's NvFractions as
the webhook writes it (--nvfractions-request, --nvfractions-limit): pods are packed by
their memory request and over allocation only above their limit; co-tenants above the
GPU's memory are GPU overruns, each tenant at risk (JSON gpuOverrunPodMinutes).

Input: --format gentd26 reads an Alibaba GenTD26 directory (times kept as
published unless --end is given); --format long reads a long CSV (see "gpufrac trace
import"); --format synthetic generates a seeded trace in-process. Bad input fails
with the file and line.

Several --gpu-memory sizes run one simulation each. --plots DIR writes, per size, GPUs
held over time, allocated vs used memory of three pods, and the distribution of
memory headroom (SVG and/or PNG).`,
		Example: `  gpufrac simulate --input ../shared/data/gentd26 --format gentd26 --gpu-memory 80Gi
  gpufrac simulate --input ../shared/data/gentd26 --format gentd26 --gpu-memory 48Gi,80Gi,141Gi \
      --markdown --plots docs/benchmarks/simulation --output docs/benchmarks/simulation.md
  gpufrac simulate --format synthetic --synth-workloads 20 --output-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimulate(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.format, "format", "gentd26", "input format: gentd26 (a GenTD26 directory), long (a long CSV file) or synthetic (generated in-process)")
	fl.StringVarP(&f.input, "input", "i", "", "input directory (gentd26) or file (long; \"-\": stdin); not used with synthetic")
	fl.StringVar(&f.end, "end", "", "shift the trace so its last sample is at this time, RFC 3339 (default: gentd26 keeps the published times, ending 2022-09-12T00:00:00Z; long keeps its times; synthetic ends 2026-01-02T00:00:00Z)")
	fl.IntVar(&f.gentd.MaxPods, "pods", 0, "gentd26: at most this many pods, in container_ip order (0: all)")
	fl.DurationVar(&f.gentd.Duration, "duration", 0, "gentd26: only the last part of the trace of this length (0: all of it)")
	fl.IntVar(&f.gentd.PodsPerDeployment, "pods-per-deployment", 1, "gentd26: trace pods per Deployment; pods of one Deployment share one recommendation")
	fl.IntVar(&f.synth.Workloads, "synth-workloads", 20, "synthetic: number of Deployments")
	fl.IntVar(&f.synth.PodsPerWorkload, "synth-pods-per-workload", 2, "synthetic: replicas per Deployment")
	fl.DurationVar(&f.synth.Duration, "synth-duration", 48*time.Hour, "synthetic: trace length")
	fl.Uint64Var(&f.synth.Seed, "seed", 1, "synthetic: random seed")
	fl.Float64Var(&f.synth.Model.ArrivingWorkloads, "synth-arriving", 0, "synthetic: share of workloads (0-1) deployed while the trace runs, between 10 % and 75 % of it")

	fl.StringSliceVar(&f.gpuMemory, "gpu-memory", []string{"80Gi"}, "memory of one GPU, a quantity in bytes (48Gi, 80Gi, 141Gi); several sizes run one simulation each")
	fl.StringSliceVar(&f.policies, "policies", simulate.DefaultPolicies, "policies to compare, in report order: one-per-pod, time-slicing-N, vpa-memory, gpufrac, clairvoyant-peak, clairvoyant-memory")
	fl.DurationVar(&f.opts.Interval, "interval", time.Minute, "recommender cycle and simulation step")
	fl.DurationSliceVar(&f.warmUps, "warm-up", []time.Duration{0}, "history the recommenders read before placing and counting start (as if gpufrac were installed this long after the trace starts); several values run one simulation each")
	fl.DurationVar(&f.opts.Lookback, "lookback", simulate.DefaultLookback, "a pod without samples for longer has ended (Prometheus' lookback delta)")
	fl.Float64Var(&f.opts.Recommender.LowConfidence, "low-confidence", 0.5, "confidence (0-1) below which pods get a whole GPU (recommender --low-confidence)")
	fl.DurationVar(&f.opts.Recommender.Estimator.FullConfidenceHistory, "full-confidence-history", 24*time.Hour, "history length at which confidence reaches 1")
	fl.Float64Var(&f.opts.Recommender.Estimator.ContentionBudget, "contention-budget", estimate.DefaultContentionBudget, "probability (0-1) that time-sliced co-tenants whose compute requests sum to at most one GPU ask for more than 1 + --contention-slowdown GPUs, as the recommender's --contention-budget (negative: time-sliced pods reserve no compute)")
	fl.Float64Var(&f.opts.Recommender.Estimator.ContentionSlowdown, "contention-slowdown", estimate.DefaultContentionSlowdown, "overload (ratio of one GPU) that --contention-budget bounds, as the recommender's --contention-slowdown")
	fl.DurationVar(&f.opts.Recommender.History.MemoryAggregationInterval, "memory-aggregation-interval", time.Hour, "interval of one gpufrac memory peak")
	fl.DurationVar(&f.opts.Recommender.History.PeakWindow, "memory-peak-window", 0, "window of the recent memory peak the target never goes below, as the recommender's --memory-peak-window (default: the recommender's)")
	fl.Int32Var(&f.headroom, "memory-headroom-percent", 15, "gpufrac memory headroom on top of the estimate and the recent peak, percent (the autoscaler's memoryHeadroomPercent)")
	fl.StringVar(&f.fitHeadroom, "fit-memory-headroom", resource.NewQuantity(policy.DefaultFitMemoryHeadroomBytes, resource.BinarySI).String(), "least room above the recent memory peak for rounding a memory target down to a whole share of one GPU, as the recommender's --fit-memory-headroom (0: off)")
	fl.Float64Var(&f.opts.Recommender.Policy.FitNearLimit, "fit-near-limit", 0, "ratio 0-1 of the recent memory peak to a whole share of one GPU from which a target is not rounded down to that share, as the recommender's --fit-near-limit (0: off)")
	fl.DurationVar(&f.opts.Updater.MinLifetime, "min-lifetime", simulate.DefaultMinLifetime, "age a pod inside its bounds must reach before it is replaced for being off target, as the updater's --min-pod-age (bounds and protective growth excepted; 0: none)")
	fl.Float64Var(&f.opts.Updater.NearLimit, "near-limit", simulate.DefaultNearLimit, "observed memory peak ÷ allocated memory (ratio) from which growth is protective, as the updater's --near-limit")
	fl.Float64Var(&f.opts.Updater.ReplacementsPerMinute, "replacements-per-minute", simulate.DefaultReplacementsPerMinute, "cluster-wide replacement rate limit (negative: unlimited)")
	fl.Float64Var(&f.opts.Updater.ChangeThreshold, "change-threshold", simulate.DefaultChangeThreshold, "replace a pod inside its bounds when its allocation differs from the target by this ratio")
	fl.StringVar(&f.windowSchedule, "resize-window-schedule", "", "cron schedule of a resize window (e.g. \"0 2 * * *\"): shrinking replacements only inside it (default: any time)")
	fl.DurationVar(&f.windowDuration, "resize-window-duration", 4*time.Hour, "length of the resize window")
	fl.StringVar(&f.windowZone, "resize-window-timezone", "UTC", "IANA time zone of the resize window schedule")
	fl.BoolVar(&f.urgentGrowth, "urgent-growth", true, "memory growth skips the minimum lifetime and resize windows")
	fl.BoolVar(&f.youngEvidence, "young-evidence", true, "young workloads (confidence under --low-confidence) earn confidence from hours at their memory level and get a target with a 1/n margin, as the recommender's --young-evidence (false: a whole GPU until the clock's confidence)")
	fl.IntVar(&f.opts.Updater.MinReplicas, "min-replicas", 1, "fewest running pods a workload needs for one to be replaced")
	fl.StringVar((*string)(&f.opts.Backend), "backend", "", "backend that writes gpufrac's and vpa-memory's fractions: \"\" (one memory value, a hard limit packed as it is, as the default annotations backend) or kai-nvfractions (pods packed by a memory request and killed above a memory limit; co-tenants above the GPU's memory are a GPU overrun)")
	fl.StringVar(&f.opts.NVFractions.Request, "nvfractions-request", backend.NVFractionsRequestTarget, "kai-nvfractions request, as the webhook's --nvfractions-request: target or observed-peak")
	fl.StringVar(&f.opts.NVFractions.Limit, "nvfractions-limit", backend.NVFractionsLimitUpperBound, "kai-nvfractions limit, as the webhook's --nvfractions-limit: upper-bound or target")

	fl.StringVar(&f.outputFormat, "output-format", "text", "report format: text, markdown or json")
	fl.BoolVar(&f.markdown, "markdown", false, "shorthand for --output-format markdown")
	fl.StringVarP(&f.output, "output", "o", "-", "report file (\"-\": stdout)")
	fl.StringVar(&f.plots, "plots", "", "directory for plots (created if missing); files are named by GPU size")
	fl.StringSliceVar(&f.plotFormats, "plot-format", []string{"svg"}, "plot file formats: svg, png")
	return cmd
}

func runSimulate(cmd *cobra.Command, f *simulateFlags) error {
	if f.markdown {
		if cmd.Flags().Changed("output-format") && f.outputFormat != "markdown" {
			return fmt.Errorf("--markdown conflicts with --output-format %s", f.outputFormat)
		}
		f.outputFormat = "markdown"
	}
	switch f.outputFormat {
	case "text", "markdown", "json":
	default:
		return fmt.Errorf("--output-format %q: want text, markdown or json", f.outputFormat)
	}
	for _, pf := range f.plotFormats {
		if pf != "svg" && pf != "png" {
			return fmt.Errorf("--plot-format %q: want svg or png", pf)
		}
	}
	var sizes []int64
	for _, s := range f.gpuMemory {
		v, err := parseBytes(s)
		if err != nil {
			return err
		}
		sizes = append(sizes, int64(v))
	}
	if cmd.Flags().Changed("memory-headroom-percent") {
		if f.headroom < 0 || f.headroom > 200 {
			return fmt.Errorf("--memory-headroom-percent %d: want 0-200", f.headroom)
		}
		f.opts.MemoryHeadroomPercent = &f.headroom
	}
	fitQ, err := resource.ParseQuantity(f.fitHeadroom)
	if err != nil || fitQ.Sign() < 0 {
		return fmt.Errorf("--fit-memory-headroom %q: want a quantity such as 2Gi, or 0", f.fitHeadroom)
	}
	f.opts.Recommender.Policy.FitMemoryHeadroomBytes = fitQ.AsApproximateFloat64()
	if fitQ.IsZero() {
		f.opts.Recommender.Policy.FitMemoryHeadroomBytes = -1 // off
	}
	if r := f.opts.Recommender.Policy.FitNearLimit; r < 0 || r > 1 {
		return fmt.Errorf("--fit-near-limit %v: want a ratio 0-1", r)
	}
	if a := f.synth.Model.ArrivingWorkloads; a < 0 || a > 1 {
		return fmt.Errorf("--synth-arriving %v: want 0-1", a)
	}
	if !f.youngEvidence {
		f.opts.Recommender.Estimator.YoungConfidence = -1 // off
	}
	if f.opts.Recommender.LowConfidence < 0 || f.opts.Recommender.LowConfidence > 1 {
		return fmt.Errorf("--low-confidence %v: want 0-1", f.opts.Recommender.LowConfidence)
	}
	if f.opts.Interval <= 0 {
		return fmt.Errorf("--interval %s: must be positive", f.opts.Interval)
	}
	if f.opts.Updater.ReplacementsPerMinute == 0 {
		return fmt.Errorf("--replacements-per-minute 0 would never replace a pod; give a positive rate, or a negative one for no limit")
	}
	if f.opts.Updater.MinLifetime < 0 {
		return fmt.Errorf("--min-lifetime %s: must not be negative", f.opts.Updater.MinLifetime)
	}
	if f.opts.Updater.MinLifetime == 0 {
		f.opts.Updater.MinLifetime = -1 // none
	}
	f.opts.Updater.UrgentGrowth = &f.urgentGrowth
	if f.windowSchedule != "" {
		f.opts.Updater.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: f.windowSchedule,
			Duration: metav1.Duration{Duration: f.windowDuration}, TimeZone: f.windowZone}}
	}
	if f.opts.Backend != "" && f.opts.Backend != gpufracv1.BackendKAINVFractions {
		return fmt.Errorf("--backend %q: want \"\" or %s", f.opts.Backend, gpufracv1.BackendKAINVFractions)
	}
	f.opts.Policies = f.policies

	tr, input, err := readSimulateInput(cmd, f)
	if err != nil {
		return err
	}
	rep := &simulate.Report{Input: input, Format: f.format}
	if f.outputFormat == "markdown" {
		rep.Command = commandLine()
	}
	for _, warm := range f.warmUps {
		for _, size := range sizes {
			o := f.opts
			o.GPUMemoryBytes = size
			o.WarmUp = warm
			res, err := simulate.Run(&tr, o)
			if err != nil {
				return err
			}
			rep.Runs = append(rep.Runs, res)
			if f.plots == "" {
				continue
			}
			if err := os.MkdirAll(f.plots, 0o755); err != nil {
				return err
			}
			prefix := "sim-" + strings.ToLower(simulate.GiB(size))
			if warm > 0 {
				prefix += "-warm" + simulate.ShortDuration(warm.String())
			}
			files, err := res.WritePlots(f.plots, prefix, f.plotFormats)
			if err != nil {
				return err
			}
			rep.Plots = append(rep.Plots, files)
		}
	}
	dir := "."
	if f.output != "-" {
		dir = filepath.Dir(f.output)
	}
	return writeFile(f.output, cmd.OutOrStdout(), func(w io.Writer) error {
		switch f.outputFormat {
		case "json":
			return rep.WriteJSON(w)
		case "markdown":
			return rep.WriteMarkdown(w, dir)
		}
		return rep.WriteText(w)
	})
}

// readSimulateInput reads or generates the trace; errors name the file and line.
func readSimulateInput(cmd *cobra.Command, f *simulateFlags) (trace.Trace, string, error) {
	var end time.Time
	if f.end != "" {
		var err error
		if end, err = time.Parse(time.RFC3339, f.end); err != nil {
			return trace.Trace{}, "", fmt.Errorf("--end %q: want RFC 3339 (2026-01-02T15:04:05Z)", f.end)
		}
	}
	only := func(prefix string, names ...string) error {
		for _, n := range names {
			if cmd.Flags().Changed(n) {
				return fmt.Errorf("--%s applies to --format %s only", n, prefix)
			}
		}
		return nil
	}
	gentdFlags := []string{"pods", "duration", "pods-per-deployment"}
	synthFlags := []string{"synth-workloads", "synth-pods-per-workload", "synth-duration", "seed"}
	var (
		tr  trace.Trace
		st  trace.Stats
		err error
	)
	input := f.input
	switch f.format {
	case "gentd26":
		if err := only("synthetic", synthFlags...); err != nil {
			return tr, "", err
		}
		if input == "" {
			return tr, "", fmt.Errorf("--input is required: the GenTD26 directory")
		}
		if f.gentd.MaxPods < 0 || f.gentd.PodsPerDeployment < 0 || f.gentd.Duration < 0 {
			return tr, "", fmt.Errorf("--pods, --pods-per-deployment and --duration must not be negative")
		}
		f.gentd.End = genTD26End
		if !end.IsZero() {
			f.gentd.End = end
		}
		if tr, st, err = trace.ReadGenTD26(input, f.gentd); err != nil {
			return tr, "", fmt.Errorf("reading GenTD26 trace in %s: %w", input, err)
		}
	case "long":
		if err := only("gentd26", gentdFlags...); err != nil {
			return tr, "", err
		}
		if err := only("synthetic", synthFlags...); err != nil {
			return tr, "", err
		}
		if input == "" {
			return tr, "", fmt.Errorf("--input is required: the long CSV file or \"-\"")
		}
		in, name := io.Reader(cmd.InOrStdin()), "stdin"
		if input != "-" {
			file, err := os.Open(input)
			if err != nil {
				return tr, "", err
			}
			defer file.Close()
			in, name = file, input
		}
		if tr, st, err = trace.ReadLongCSV(in, name); err != nil {
			return tr, "", fmt.Errorf("reading long CSV trace: %w", err)
		}
		if !end.IsZero() {
			tr.ShiftToEnd(end)
		}
	case "synthetic":
		if err := only("gentd26", gentdFlags...); err != nil {
			return tr, "", err
		}
		if cmd.Flags().Changed("input") {
			return tr, "", fmt.Errorf("--input does not apply to --format synthetic")
		}
		if f.synth.Workloads < 1 || f.synth.PodsPerWorkload < 1 || f.synth.Duration < 0 {
			return tr, "", fmt.Errorf("--synth-workloads and --synth-pods-per-workload must be positive, --synth-duration not negative")
		}
		f.synth.End = synthEnd
		if !end.IsZero() {
			f.synth.End = end
		}
		tr, input = trace.Synthesize(f.synth), "synthetic"
	default:
		return tr, "", fmt.Errorf("--format %q: want gentd26, long or synthetic", f.format)
	}
	if len(tr.Pods) == 0 {
		return tr, "", fmt.Errorf("%s: no pods with samples", input)
	}
	if err := tr.Validate(); err != nil {
		return tr, "", fmt.Errorf("%s: %w", input, err)
	}
	var stp *trace.Stats
	if f.format != "synthetic" {
		stp = &st
	}
	fmt.Fprintln(cmd.ErrOrStderr(), summaryLine("simulating", tr, stp))
	return tr, input, nil
}

// commandLine renders the command line for the Markdown report, with arguments that
// need it quoted.
func commandLine() string {
	var b bytes.Buffer
	b.WriteString("gpufrac")
	for _, a := range os.Args[1:] {
		b.WriteByte(' ')
		if strings.ContainsAny(a, " *\"'$") {
			fmt.Fprintf(&b, "%q", a)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/recommender/recommend"
	"github.com/gpufrac/gpufrac/simulate"
	"github.com/gpufrac/gpufrac/trace"
	"github.com/gpufrac/gpufrac/updater"
)

func init() { registerCommand(newSimulateCmd) }

// simulateFlags holds the simulate command's flag values.
type simulateFlags struct {
	format, input, end          string
	fold                        string
	foldSeed                    uint64
	gpuMemory, policies         []string
	gentd                       trace.GenTD26Options
	synth                       trace.SynthOptions
	opts                        simulate.Options
	recommend                   recommend.Flags
	headroom                    int32
	windowSchedule, windowZone  string
	windowDuration              time.Duration
	urgentGrowth                bool
	outputFormat, output, plots string
	markdown                    bool
	plotFormats                 []string
	warmUps                     []time.Duration
}

func newSimulateCmd() *cobra.Command {
	var f simulateFlags
	cmd := &cobra.Command{
		Use:   "simulate [--input DIR|FILE] [--format gentd26|long|synthetic] [--gpu-memory 80Gi,...]",
		Short: "Replay a GPU usage trace through gpufrac and other sharing policies and compare them",
		Long:  simulateLong,
		Example: `  gpufrac simulate --input ../shared/data/gentd26 --format gentd26 --gpu-memory 80Gi
  gpufrac simulate --input ../shared/data/gentd26 --format gentd26 --gpu-memory 48Gi,80Gi,141Gi \
      --markdown --plots docs/benchmarks/simulation --output docs/benchmarks/simulation.md
  gpufrac simulate --format synthetic --synth-workloads 20 --output-format json`,
		Args: noArgs("the trace is given with --input"),
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimulate(cmd, &f) },
	}
	f.addInputFlags(cmd.Flags())
	f.addPolicyFlags(cmd.Flags())
	f.addOutputFlags(cmd.Flags())
	return cmd
}

// simulateLong is the simulate command's help.
const simulateLong = `Replay a GPU usage trace minute by minute (one recommender cycle per step) through
sharing policies side by side, and evaluate each against the usage the trace shows.

Policies: one-per-pod (a whole GPU each), time-slicing-N (1/N of memory and compute
each), vpa-memory (VPA's memory rule: p90 of daily peaks x 1.15), gpufrac (the
recommender's own estimator and policy code, the updater's own decision code and
what the admission webhook writes), clairvoyant-peak (each pod's true peak memory
and compute reserved at start), clairvoyant-memory (true peak memory only, the
bound) and clairvoyant-seen-peak (as clairvoyant-memory, never below the memory the
workload had shown before: the bound of sizing once while keeping every seen peak).
Pods are packed best-fit by memory onto GPUs of --gpu-memory, with the sum
of compute allocations at most 1 GPU, and never migrate.

Per policy the report gives GPU-minutes held and their ratio to one GPU per pod and
to the clairvoyant-memory bound, pod-minutes over the pod's memory allocation (an OOM
under an enforcing backend), GPU-minutes over the GPU's memory (an OOM without
enforcement), pod-minutes in compute contention (co-tenants above 100 %), mean
memory and compute utilisation of the GPUs held, replacements, reversals (a
replacement moving a pod's memory opposite to its previous one within 24 h:
flapping) and cold-start pod-minutes.

Pods are packed by the memory request the backend writes and over allocation only
above their limit; co-tenants above the GPU's memory are GPU overruns, each tenant at
risk (the GPU OOM column's pod-minutes). By default (the annotations backend with
--annotation-memory-request observed-peak, as the webhook's default) the request is
the observed memory peak when below the target and the limit is the target; with
--annotation-memory-request none request and limit are the target. --backend kai-nvfractions replays KAI's
NvFractions request/limit contract as the webhook writes it (--nvfractions-request,
--nvfractions-limit).

Input: --format gentd26 reads an Alibaba GenTD26 directory (times kept as
published unless --end is given); --format long reads a long CSV (see "gpufrac trace
import"); --format synthetic generates a seeded trace in-process. Bad input fails
with the file and line.

Several --gpu-memory sizes run one simulation each. --plots DIR writes, per size, GPUs
held over time, allocated vs used memory of three pods, and the distribution of
memory headroom (SVG and/or PNG).`

// addInputFlags registers the flags that choose and read the trace.
func (f *simulateFlags) addInputFlags(fl *pflag.FlagSet) {
	fl.StringVar(&f.format, "format", "gentd26", "input format: gentd26 (a GenTD26 directory), long (a long CSV file) or synthetic (generated in-process)")
	fl.StringVarP(&f.input, "input", "i", "", "input directory (gentd26) or file (long; \"-\": stdin); not used with synthetic")
	fl.StringVar(&f.end, "end", "", "shift the trace so its last sample is at this time, RFC 3339 (default: gentd26 keeps the published times, ending 2022-09-12T00:00:00Z; long keeps its times; synthetic ends 2026-01-02T00:00:00Z)")
	fl.IntVar(&f.gentd.MaxPods, "pods", 0, "gentd26: at most this many pods, in container_ip order (0: all)")
	fl.DurationVar(&f.gentd.Duration, "duration", 0, "gentd26: only the last part of the trace of this length (0: all of it)")
	fl.IntVar(&f.gentd.PodsPerDeployment, "pods-per-deployment", 1, "gentd26: trace pods per Deployment; pods of one Deployment share one recommendation")
	synth := trace.SynthReplayOptions()
	fl.IntVar(&f.synth.Workloads, "synth-workloads", synth.Workloads, "synthetic: number of Deployments")
	fl.IntVar(&f.synth.PodsPerWorkload, "synth-pods-per-workload", synth.PodsPerWorkload, "synthetic: replicas per Deployment")
	fl.DurationVar(&f.synth.Duration, "synth-duration", synth.Duration, "synthetic: trace length")
	fl.Uint64Var(&f.synth.Seed, "seed", synth.Seed, "synthetic: random seed")
	fl.StringVar(&f.fold, "fold", "", "replay one part of a k-fold split of the trace's workloads, K/N (0/3: the first of three parts), shuffled with --fold-seed: a smaller cluster of the same kind of pods, to check that figures hold on subsets and not only on the whole trace (docs/benchmarks/holdout.md); empty: every workload")
	fl.Uint64Var(&f.foldSeed, "fold-seed", 1, "seed of the --fold shuffle")
	fl.Float64Var(&f.synth.Model.ArrivingWorkloads, "synth-arriving", 0, "synthetic: share of workloads (ratio 0-1) deployed while the trace runs, between 10 % and 75 % of it (0: every workload runs from the start)")
}

// addPolicyFlags registers the flags of the simulated cluster and of gpufrac's recommender,
// updater and backend.
func (f *simulateFlags) addPolicyFlags(fl *pflag.FlagSet) {
	fl.StringSliceVar(&f.gpuMemory, "gpu-memory", []string{"80Gi"}, "memory of one GPU, a quantity in bytes (48Gi, 80Gi, 141Gi); several sizes run one simulation each")
	fl.StringSliceVar(&f.policies, "policies", simulate.DefaultPolicies, "policies to compare, in report order: one-per-pod, time-slicing-N, vpa-memory, gpufrac, clairvoyant-peak, clairvoyant-memory, clairvoyant-seen-peak")
	fl.DurationVar(&f.opts.Interval, "interval", time.Minute, "recommender cycle and simulation step, at least 1s")
	fl.DurationSliceVar(&f.warmUps, "warm-up", []time.Duration{0}, "history the recommenders read before placing and counting start (as if gpufrac were installed this long after the trace starts); several values run one simulation each")
	fl.DurationVar(&f.opts.Lookback, "lookback", 0, "a pod without samples for longer has ended, and its next sample starts a new pod (for traces that reuse pod names; at least the trace's sample spacing); 0: a pod runs from its first sample to its last, and a gap is an exporter gap")
	f.recommend.AddFlags(fl, &f.opts.Recommender) // the recommender's estimator and policy flags
	fl.Int32Var(&f.headroom, "memory-headroom-percent", 15, "gpufrac memory headroom on top of the estimate and the recent peak, percent (the autoscaler's memoryHeadroomPercent)")
	fl.DurationVar(&f.opts.Updater.MinLifetime, "min-lifetime", simulate.DefaultMinLifetime, "age a pod inside its bounds must reach before it is replaced for being off target, as the updater's --min-pod-age (bounds and protective growth excepted; 0: none)")
	fl.Float64Var(&f.opts.Updater.ComputeRequestGrowth, "compute-request-growth", simulate.DefaultComputeRequestGrowth, "rise of a time-sliced pod's computeRequest over the one it was placed with (ratio) from which it is replaced, as the updater's --compute-request-growth (negative: off)")
	fl.Float64Var(&f.opts.Updater.NearLimit, "near-limit", simulate.DefaultNearLimit, "observed memory peak ÷ allocated memory (ratio) from which growth is protective, as the updater's --near-limit")
	fl.Float64Var(&f.opts.Updater.ReplacementsPerMinute, "replacements-per-minute", simulate.DefaultReplacementsPerMinute, "cluster-wide replacement rate limit (negative: unlimited)")
	fl.Float64Var(&f.opts.Updater.ChangeThreshold, "change-threshold", simulate.DefaultChangeThreshold, "replace a pod inside its bounds when its allocation differs from the target by this ratio")
	fl.StringVar(&f.windowSchedule, "resize-window-schedule", "", "cron schedule of a resize window (e.g. \"0 2 * * *\"): shrinking replacements only inside it (default: any time)")
	fl.DurationVar(&f.windowDuration, "resize-window-duration", 4*time.Hour, "length of the resize window")
	fl.StringVar(&f.windowZone, "resize-window-timezone", "UTC", "IANA time zone of the resize window schedule")
	fl.BoolVar(&f.urgentGrowth, "urgent-growth", true, "memory growth skips the minimum lifetime and resize windows")
	fl.IntVar(&f.opts.Updater.MinReplicas, "min-replicas", 1, "fewest running pods a workload needs for one to be replaced")
	fl.Float64Var(&f.opts.Updater.MaxInFlight, "max-in-flight", updater.DefaultMaxInFlight, "share of a workload's pods (ratio 0-1, at least one pod) replaced in one cycle, as the updater's --max-in-flight")
	fl.IntVar(&f.opts.Updater.MaxInFlightPerDevice, "max-in-flight-per-device", updater.DefaultMaxInFlightPerDevice, "with --backend kai-nvfractions (KAI's GPU group says which GPU a pod is on): most pods of one GPU replaced in one cycle, consolidation included, as the updater's --max-in-flight-per-device (negative: no limit)")
	fl.Int64Var(&f.opts.Updater.ConsolidationComputeMilli, "consolidation-compute", packing.DefaultConsolidationComputeMilli, "with --consolidate: most compute, milli-GPU, a GPU may hold after pods moved onto it, as the updater's --consolidation-compute")
	fl.BoolVar(&f.opts.Updater.Consolidate, "consolidate", false, "replace gpufrac's pods to empty GPUs whose tenants fit on the other GPUs in use, as the updater's --consolidate (needs --backend kai-nvfractions: the updater knows each pod's GPU from HAMi's and KAI's placement only)")
	fl.StringVar((*string)(&f.opts.Backend), "backend", "", "backend that writes gpufrac's and vpa-memory's fractions: \"\" (the default annotations backend: the memory target as a limit, packed as it is or by the memory request of --annotation-memory-request) or kai-nvfractions (packed by the memory request and killed above the memory limit of --nvfractions-*); co-tenants above the GPU's memory are a GPU overrun")
	fl.StringVar(&f.opts.Annotations.MemoryRequest, "annotation-memory-request", backend.AnnotationsMemoryRequestObservedPeak, "annotations backend's memory request, as the webhook's --annotation-memory-request: none (packed by the target, a hard limit) or observed-peak (packed by the observed memory peak when below the target, out of memory above the target)")
	fl.StringVar(&f.opts.NVFractions.Request, "nvfractions-request", backend.NVFractionsRequestTarget, "kai-nvfractions request, as the webhook's --nvfractions-request: target or observed-peak")
	fl.StringVar(&f.opts.NVFractions.Limit, "nvfractions-limit", backend.NVFractionsLimitUpperBound, "kai-nvfractions limit, as the webhook's --nvfractions-limit: upper-bound or target")
}

// addOutputFlags registers the report and plot flags.
func (f *simulateFlags) addOutputFlags(fl *pflag.FlagSet) {
	fl.StringVar(&f.outputFormat, "output-format", "text", "report format: text, markdown or json")
	fl.BoolVar(&f.markdown, "markdown", false, "shorthand for --output-format markdown")
	fl.StringVarP(&f.output, "output", "o", "-", "report file (\"-\": stdout)")
	fl.StringVar(&f.plots, "plots", "", "directory for plots (created if missing); files are named by GPU size (empty: no plots)")
	fl.StringSliceVar(&f.plotFormats, "plot-format", []string{"svg"}, "plot file formats: svg, png")
}

func runSimulate(cmd *cobra.Command, f *simulateFlags) error {
	if err := f.completeOutput(cmd); err != nil {
		return err
	}
	sizes, err := f.completeOptions(cmd)
	if err != nil {
		return err
	}
	tr, input, warnings, err := readSimulateInput(cmd, f)
	if err != nil {
		return err
	}
	rep := &simulate.Report{Input: input, Format: f.format, Warnings: warnings}
	if f.output != "-" || f.outputFormat == "json" {
		// The text and Markdown reports carry them; a file or JSON is not read on a terminal.
		for _, w := range warnings {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
		}
	}
	if f.outputFormat == "markdown" {
		rep.Command = commandLine()
	}
	for _, warm := range f.warmUps { // every run's trace checks before the first run
		for _, size := range sizes {
			o := f.opts
			o.GPUMemoryBytes, o.WarmUp = size, warm
			if err := simulate.Check(&tr, o); err != nil {
				return err
			}
		}
	}
	for _, warm := range f.warmUps {
		for _, size := range sizes {
			if err := f.runOne(rep, &tr, size, warm); err != nil {
				return err
			}
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

// completeOutput checks the report and plot flags (--markdown is --output-format
// markdown).
func (f *simulateFlags) completeOutput(cmd *cobra.Command) error {
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
	if err := checkDirCreatable("--plots", f.plots); err != nil { // before any run, not after the first
		return err
	}
	var inputs []string
	if f.format != "synthetic" {
		inputs = traceInputs(f.format, f.input)
	}
	return checkOutputPath("--output", f.output, inputs...)
}

// completeOptions checks the simulation flags and writes them into f.opts, with each
// run's options as simulate.Run checks them (so a bad --policies or --consolidate fails
// before the trace is read); it returns the GPU sizes to simulate, bytes. Its errors
// name the flag.
func (f *simulateFlags) completeOptions(cmd *cobra.Command) ([]int64, error) {
	var sizes []int64
	given := map[int64]string{}
	for _, s := range f.gpuMemory {
		v, err := parseGPUMemory(s)
		if err != nil {
			return nil, err
		}
		if prev, dup := given[int64(v)]; dup { // one run twice, and its plots written over
			return nil, fmt.Errorf("--gpu-memory %s: the size of %s, given twice", s, prev)
		}
		given[int64(v)] = s
		sizes = append(sizes, int64(v))
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("--gpu-memory: no size given; want the memory of one GPU such as 80Gi")
	}
	for i, w := range f.warmUps {
		if slices.Contains(f.warmUps[:i], w) {
			return nil, fmt.Errorf("--warm-up %s: given twice", w)
		}
	}
	if cmd.Flags().Changed("memory-headroom-percent") {
		if f.headroom < 0 || f.headroom > 200 {
			return nil, fmt.Errorf("--memory-headroom-percent %d: want 0-200", f.headroom)
		}
		f.opts.MemoryHeadroomPercent = &f.headroom
	}
	if err := f.recommend.Complete(); err != nil {
		return nil, err
	}
	if a := f.synth.Model.ArrivingWorkloads; a < 0 || a > 1 {
		return nil, fmt.Errorf("--synth-arriving %v: want 0-1", a)
	}
	if f.opts.Interval <= 0 {
		return nil, fmt.Errorf("--interval %s: must be positive", f.opts.Interval)
	}
	if f.opts.Interval < minSimulateInterval {
		return nil, fmt.Errorf("--interval %s: under %s, which no recommender cycle is (a unit typo for 1m?): every step replays each policy, and a 3-hour trace at 1ms is 10.8 million steps", f.opts.Interval, minSimulateInterval)
	}
	if f.opts.Backend != "" && f.opts.Backend != gpufracv1.BackendKAINVFractions {
		return nil, fmt.Errorf("--backend %q: want \"\" or %s", f.opts.Backend, gpufracv1.BackendKAINVFractions)
	}
	f.opts.Policies = f.policies
	if err := f.completeUpdater(cmd); err != nil {
		return nil, err
	}
	for _, warm := range f.warmUps { // the runs' own checks, before the trace is read
		for _, size := range sizes {
			o := f.opts
			o.GPUMemoryBytes, o.WarmUp = size, warm
			if err := o.Validate(); err != nil {
				return nil, err
			}
		}
	}
	return sizes, nil
}

// completeUpdater checks the updater's flags and writes them into f.opts.Updater. Its
// errors name the flag.
func (f *simulateFlags) completeUpdater(cmd *cobra.Command) error {
	u := &f.opts.Updater
	if u.ReplacementsPerMinute == 0 {
		return fmt.Errorf("--replacements-per-minute 0 would never replace a pod; give a positive rate, or a negative one for no limit")
	}
	if u.MinLifetime < 0 {
		return fmt.Errorf("--min-lifetime %s: must not be negative", u.MinLifetime)
	}
	if u.MaxInFlight <= 0 || u.MaxInFlight > 1 { // as the updater's
		return fmt.Errorf("--max-in-flight %v: want a share of the workload's pods, 0-1, as the updater's", u.MaxInFlight)
	}
	if u.MaxInFlightPerDevice == 0 { // as the updater's
		return fmt.Errorf("--max-in-flight-per-device 0: want 1 or more, or a negative value for no limit, as the updater's")
	}
	if u.NearLimit > 1 { // as the updater's Config.Validate: a peak never reaches it
		return fmt.Errorf("--near-limit %v: want a ratio ≤ 1, as the updater's", u.NearLimit)
	}
	// The updater refuses these (bootstrap.Positive); simulate.Options would read them as
	// unset and run the defaults instead.
	if u.NearLimit <= 0 {
		return fmt.Errorf("--near-limit %v: want a ratio above 0, as the updater's", u.NearLimit)
	}
	if u.ChangeThreshold <= 0 {
		return fmt.Errorf("--change-threshold %v: want a ratio above 0, as the updater's --threshold", u.ChangeThreshold)
	}
	if u.ComputeRequestGrowth == 0 {
		return fmt.Errorf("--compute-request-growth 0: want a ratio above 0, or a negative value for off, as the updater's")
	}
	if u.MinLifetime == 0 {
		u.MinLifetime = -1 // none
	}
	u.UrgentGrowth = &f.urgentGrowth
	if f.windowSchedule == "" {
		return onlyWith(cmd, "--resize-window-schedule", "resize-window-duration", "resize-window-timezone")
	}
	w := gpufracv1.ResizeWindow{Schedule: f.windowSchedule, Duration: metav1.Duration{Duration: f.windowDuration}, TimeZone: f.windowZone}
	if _, err := updater.ParseWindow(w); err != nil { // the updater's own rules
		return fmt.Errorf("--resize-window-schedule %q (--resize-window-duration %s, --resize-window-timezone %q): %w", w.Schedule, w.Duration.Duration, w.TimeZone, err)
	}
	u.ResizeWindows = []gpufracv1.ResizeWindow{w}
	return nil
}

// runOne simulates tr on GPUs of size bytes after warm of history, adding the result
// and its plots (with --plots) to rep.
func (f *simulateFlags) runOne(rep *simulate.Report, tr *trace.Trace, size int64, warm time.Duration) error {
	o := f.opts
	o.GPUMemoryBytes = size
	o.WarmUp = warm
	res, err := simulate.Run(tr, o)
	if err != nil {
		return err
	}
	rep.Runs = append(rep.Runs, res)
	if f.plots == "" {
		return nil
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
	return nil
}

// minSimulateInterval is the shortest --interval: one second, the finest resolution at
// which Prometheus is scraped and the recommender reads it. Steps are counted over the
// trace, so an --interval of milliseconds makes millions of them and runs for hours.
const minSimulateInterval = time.Second

// readSimulateInput reads or generates the trace; errors name the file and line. It
// returns the input's name and the reader's warnings (inputWarnings).
func readSimulateInput(cmd *cobra.Command, f *simulateFlags) (trace.Trace, string, []string, error) {
	var end time.Time
	if f.end != "" {
		var err error
		if end, err = time.Parse(time.RFC3339, f.end); err != nil {
			return trace.Trace{}, "", nil, fmt.Errorf("--end %q: want RFC 3339 (2026-01-02T15:04:05Z)", f.end)
		}
	}
	var (
		tr  trace.Trace
		st  *trace.Stats
		err error
	)
	input := f.input
	switch f.format {
	case "gentd26":
		tr, st, err = f.readGenTD26(cmd, end)
	case "long":
		tr, st, err = f.readLong(cmd, end)
	case "synthetic":
		tr, err = f.synthesize(cmd, end)
		input = "synthetic"
	default:
		err = fmt.Errorf("--format %q: want gentd26, long or synthetic", f.format)
	}
	if err != nil {
		return tr, "", nil, err
	}
	if f.end != "" {
		if err := checkEnd(f.end, &tr); err != nil {
			return tr, "", nil, err
		}
	}
	fold, err := trace.ParseFold(f.fold, f.foldSeed)
	if err != nil {
		return tr, "", nil, fmt.Errorf("--%w", err)
	}
	if tr, err = fold.Apply(tr); err != nil {
		return tr, "", nil, fmt.Errorf("%s: --%w", input, err)
	}
	if fold.Of > 0 {
		input += " (fold " + fold.String() + ")"
	}
	if len(tr.Pods) == 0 {
		return tr, "", nil, fmt.Errorf("%s: no pods with samples", input)
	}
	if err := tr.Validate(); err != nil {
		return tr, "", nil, fmt.Errorf("%s: %w", input, err)
	}
	if err := simulate.CheckMemorySamples(&tr); err != nil {
		return tr, "", nil, fmt.Errorf("%s: %w", input, err)
	}
	if err := simulate.CheckHole(&tr); err != nil {
		return tr, "", nil, fmt.Errorf("%s: %w", input, err)
	}
	fmt.Fprintln(cmd.ErrOrStderr(), summaryLine("simulating", tr, st))
	dir := ""
	if f.format == "gentd26" {
		dir = f.input
	}
	warnings := inputWarnings(st, dir)
	if w := memoryUnitWarning(tr, input); w != "" {
		warnings = append(warnings, w)
	}
	return tr, input, warnings, nil
}

// Flags that apply to one --format only.
var (
	gentdFlags = []string{"pods", "duration", "pods-per-deployment"}
	synthFlags = []string{"synth-workloads", "synth-pods-per-workload", "synth-duration", "seed"}
)

// onlyFor returns an error naming the first of names that was set: those flags apply to
// --format format only.
func onlyFor(cmd *cobra.Command, format string, names ...string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return fmt.Errorf("--%s applies to --format %s only", n, format)
		}
	}
	return nil
}

// onlyWith returns an error naming the first of names that was set: those flags apply
// with the flag other only, which was not given.
func onlyWith(cmd *cobra.Command, other string, names ...string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return fmt.Errorf("--%s applies with %s only", n, other)
		}
	}
	return nil
}

// readGenTD26 reads --input as a GenTD26 directory, ending at end (zero: as published).
func (f *simulateFlags) readGenTD26(cmd *cobra.Command, end time.Time) (trace.Trace, *trace.Stats, error) {
	if err := onlyFor(cmd, "synthetic", synthFlags...); err != nil {
		return trace.Trace{}, nil, err
	}
	if f.input == "" {
		return trace.Trace{}, nil, fmt.Errorf("--input is required: the GenTD26 directory")
	}
	if err := checkTraceInput(f.format, f.input); err != nil {
		return trace.Trace{}, nil, err
	}
	if err := checkGenTD26(f.gentd); err != nil {
		return trace.Trace{}, nil, err
	}
	f.gentd.End = trace.GenTD26PublishedEnd // simulate keeps the published times by default
	if !end.IsZero() {
		f.gentd.End = end
	}
	tr, st, err := trace.ReadGenTD26(f.input, f.gentd)
	if err != nil {
		return tr, nil, fmt.Errorf("reading GenTD26 trace in %s: %w", f.input, err)
	}
	return tr, &st, nil
}

// readLong reads --input (a file, or "-": stdin) as a long CSV, shifted to end (zero:
// its own times).
func (f *simulateFlags) readLong(cmd *cobra.Command, end time.Time) (trace.Trace, *trace.Stats, error) {
	if err := onlyFor(cmd, "gentd26", gentdFlags...); err != nil {
		return trace.Trace{}, nil, err
	}
	if err := onlyFor(cmd, "synthetic", synthFlags...); err != nil {
		return trace.Trace{}, nil, err
	}
	if f.input == "" {
		return trace.Trace{}, nil, fmt.Errorf("--input is required: the long CSV file or \"-\"")
	}
	if err := checkTraceInput(f.format, f.input); err != nil {
		return trace.Trace{}, nil, err
	}
	tr, st, err := readLongCSV(cmd, f.input)
	if err != nil {
		return tr, nil, fmt.Errorf("reading long CSV trace: %w", err)
	}
	if !end.IsZero() {
		tr.ShiftToEnd(end)
	}
	return tr, &st, nil
}

// synthesize generates the synthetic trace, ending at end (zero: trace.SynthReplayEnd).
func (f *simulateFlags) synthesize(cmd *cobra.Command, end time.Time) (trace.Trace, error) {
	if err := onlyFor(cmd, "gentd26", gentdFlags...); err != nil {
		return trace.Trace{}, err
	}
	if cmd.Flags().Changed("input") {
		return trace.Trace{}, fmt.Errorf("--input does not apply to --format synthetic")
	}
	if err := checkSynthSizes(f.synth, "--synth-", false); err != nil {
		return trace.Trace{}, err
	}
	if err := f.synth.Validate(); err != nil { // what is left: a duration under two steps
		return trace.Trace{}, fmt.Errorf("--synth-duration: %w", err)
	}
	f.synth.End = trace.SynthReplayEnd
	if !end.IsZero() {
		f.synth.End = end
	}
	return trace.Synthesize(f.synth), nil
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

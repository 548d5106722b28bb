// Command recommender runs gpufrac's recommender: it reads GPU metrics from Prometheus
// and writes one GPUFractionRecommendation per GPUFractionAutoscaler.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap"
	"github.com/gpufrac/gpufrac/cmd/internal/manager"
	"github.com/gpufrac/gpufrac/prom"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/recommend"
	sharingctl "github.com/gpufrac/gpufrac/sharingplan/controller"
	"github.com/gpufrac/gpufrac/statuslease"
	"github.com/gpufrac/gpufrac/workload"
)

func main() { bootstrap.Main("recommender", run) }

// leaderElectID names the leader-election Lease of the default shard; another shard's
// adds "-<name>".
const leaderElectID = "gpufrac-recommender.autoscaling.gpufrac.io"

// options are the recommender's flags, parsed by parseFlags.
type options struct {
	cfg     recommender.Config
	promCfg prom.Config
	mgr     manager.Flags
	// recommend holds the estimator and policy flags gpufrac simulate shares.
	recommend recommend.Flags
	labels    metrics.Labels
	// src is --metric-source; nil (auto): every source present, chosen per pod.
	src          metrics.Source
	maxSamples   int
	planner      bool
	planInterval time.Duration
	electionID   string

	source, gpuMemory, shardNS string
	// statusLeaseNS is --status-lease-namespace; "" turns the status Lease off.
	statusLeaseNS string
}

// parseFlags registers the recommender's flags on fs, parses args and checks them. Its
// errors name the flag.
func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{labels: metrics.DefaultLabels}
	o.addFlags(fs)
	klog.InitFlags(fs)
	if err := bootstrap.Parse(fs, args); err != nil { // a bad flag: its error and a --help hint, not every flag
		return nil, err
	}
	// Periods of 0 or below would be replaced by their defaults without a word.
	if err := errors.Join(
		bootstrap.Positive(fs, "interval", "history-length", "checkpoint-interval", "prometheus-timeout", "sharing-plan-interval", "history-slice-samples"),
		bootstrap.NonNegative(fs, "max-backoff", "max-samples-per-query", "guardrail-compute-step"),
	); err != nil {
		return nil, err
	}
	if err := o.complete(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *options) addFlags(fs *flag.FlagSet) {
	cfg, labels := &o.cfg, &o.labels
	o.recommend.AddFlags(fs, &cfg.Config)
	fs.StringVar(&o.source, "metric-source", "auto", "Metric source: auto (read every source Prometheus holds over the history window, each pod from the most precise one that reports it: agent, hami, kai, dcgm), agent, hami, kai or dcgm.")
	fs.StringVar(&o.gpuMemory, "gpu-memory", "80Gi", "Memory of one GPU (quantity, bytes): no recommendation exceeds it, and sharing modes are chosen against it.")
	fs.DurationVar(&cfg.Interval, "interval", recommender.Config{}.WithDefaults().Interval, "Cycle period, and the step of compute samples.")
	fs.DurationVar(&cfg.HistoryLength, "history-length", recommender.Config{}.WithDefaults().HistoryLength, "History loaded from Prometheus at start and for each new autoscaler.")
	fs.IntVar(&cfg.HistorySliceSamples, "history-slice-samples", recommender.DefaultHistorySliceSamples, "About the most compute samples (series × points) one slice of a history load holds (about 32 bytes each as decoded; two slices are held at once), for slices of at least one --history-slice-alignment step: a smaller value holds less while the history is read, a larger one makes fewer, larger reads.")
	fs.DurationVar(&cfg.HistorySliceAlignment, "history-slice-alignment", recommender.DefaultHistorySliceAlignment, "Slices of a history load end on multiples of this span as well as of --memory-aggregation-interval: Prometheus' TSDB block range (--storage.tsdb.min-block-duration), so that no stored chunk is cut and re-encoded by the remote read. 0 or negative: on the aggregation interval alone (shorter slices at many series: less memory, more Prometheus CPU).")
	fs.BoolVar(&cfg.HistoryComputeFromRecordings, "history-compute-from-recordings", false, "With --history-from-recordings, also read each whole hour's compute from its 21 recorded quantiles instead of the raw minute means: never lower than the recorded minute means, a little higher than the raw read (docs/benchmarks.md, 'Results, 2026-12-02: recorded compute, finer quantiles'). Default: compute read raw.")
	fs.BoolVar(&cfg.HistoryFromRecordings, "history-from-recordings", false, "Read history loads' hourly memory peaks and flatness from the gpufrac-history recording rules (rules/README.md; chart: monitoring.prometheusRule.historyRecordings) instead of the exporters' raw series, where the recordings hold the hour whole; other hours, compute and copies are read raw (docs/recommender.md).")
	fs.BoolVar(&cfg.Checkpoints, "checkpoints", true, "Save each workload's model to a GPUFractionCheckpoint (owned by its autoscaler) and, at start or on becoming leader, restore it and read from Prometheus only the history after it (VPA's checkpoints; docs/recommender.md). False: every start bootstraps the whole --history-length from Prometheus.")
	fs.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", recommender.DefaultCheckpointInterval, "Least time between two checkpoints of one workload; a workload whose model did not change is not written again.")
	fs.IntVar(&cfg.CheckpointWritesPerCycle, "checkpoint-writes-per-cycle", 0, "Most checkpoint writes per cycle, oldest first; 0: twice the tracked workloads' share per cycle of --checkpoint-interval, at least 10.")
	fs.IntVar(&cfg.StatusWriteConcurrency, "status-write-concurrency", recommender.DefaultStatusWriteConcurrency, "Most autoscalers whose recommendation and status, or checkpoints, one cycle writes at once (each autoscaler's writes in order). 1: one at a time.")
	fs.DurationVar(&cfg.MaxBackoff, "max-backoff", 0, "Longest wait between cycles while Prometheus fails (default 5m).")
	fs.Float64Var(&cfg.Policy.GuardrailComputeStep, "guardrail-compute-step", 0, "Compute added per cycle while the latency guardrail is breached, share of one GPU (default 0.1).")
	fs.StringVar(&cfg.Shard.Name, "recommender-name", gpufracv1.DefaultRecommenderName, "This instance's name (shard): it owns the autoscalers whose spec.recommenders names it; \"default\" also owns those naming none. Each name elects its own leader.")
	fs.IntVar(&o.maxSamples, "max-samples-per-query", 0, "Most samples (series × points) one range query asks for; set it under the backend's limit (Prometheus --query.max-samples, Mimir -querier.max-fetched-samples-per-query). 0: only Prometheus' 11,000 points per series; a chunk refused as too large is halved either way.")
	fs.BoolVar(&o.planner, "sharing-planner", true, "Run the GPUSharingPolicy controller (NVIDIA device-plugin time-slicing/MPS planner, docs/sharing-planner.md) on the leader.")
	fs.DurationVar(&o.planInterval, "sharing-plan-interval", time.Minute, "How often each GPUSharingPolicy is planned again from the current recommendations.")
	fs.StringVar(&o.statusLeaseNS, "status-lease-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of this instance's status Lease (gpufrac-recommender-status-<--recommender-name>), renewed after every cycle that ran all its steps, so the updater changes pods only while their recommendations are kept current (docs/recommender.md; default $POD_NAMESPACE). Empty: no status Lease (the updater then holds this instance's autoscalers unless its --recommender-lease-max-age is 0).")
	fs.StringVar(&o.shardNS, "shard-namespace-selector", "", "Label selector on namespaces (team=a,tier!=batch): this instance owns only autoscalers in matching namespaces (default: every namespace).")
	fs.StringVar(&cfg.LabelMode, "label-mode", "auto", "How workload labels are read: auto (the --*-label labels, and for series scraped without honor_labels their exported_* copies) or direct (the --*-label labels only).")
	fs.StringVar(&labels.Namespace, "namespace-label", labels.Namespace, "Label naming a sample's pod namespace.")
	fs.StringVar(&labels.Pod, "pod-label", labels.Pod, "Label naming a sample's pod.")
	fs.StringVar(&labels.Container, "container-label", labels.Container, "Label naming a sample's container.")
	o.promCfg.AddFlags(fs)
	o.mgr.AddFlags(fs, "runs cycles")
}

// complete checks the flags and parses the quantity, selector and source flags into the
// configuration.
func (o *options) complete() error {
	cfg := &o.cfg
	if err := o.recommend.Complete(); err != nil {
		return err
	}
	gpu, err := backend.ParseGPUMemory(o.gpuMemory)
	if err != nil {
		return fmt.Errorf("--gpu-memory %w", err)
	}
	cfg.Policy.GPUMemoryBytes = float64(gpu)
	if cfg.HistorySliceAlignment <= 0 {
		cfg.HistorySliceAlignment = -1 // the aggregation interval alone, not the default
	}
	if cfg.StatusWriteConcurrency < 1 {
		return fmt.Errorf("--status-write-concurrency %d: want 1 or more", cfg.StatusWriteConcurrency)
	}
	if cfg.CheckpointWritesPerCycle < 0 {
		return fmt.Errorf("--checkpoint-writes-per-cycle %d: want 0 (automatic) or more", cfg.CheckpointWritesPerCycle)
	}
	if errs := validation.IsDNS1123Label(cfg.Shard.Name); len(errs) > 0 {
		return fmt.Errorf("--recommender-name %q: %s", cfg.Shard.Name, strings.Join(errs, "; "))
	}
	if o.shardNS != "" {
		if cfg.Shard.Namespaces, err = k8slabels.Parse(o.shardNS); err != nil {
			return fmt.Errorf("--shard-namespace-selector %q: %w", o.shardNS, err)
		}
	}
	// Leading its name's Lease, the instance is the only one of its name that recommends.
	cfg.Shard.Exclusive = o.mgr.LeaderElect
	o.electionID = leaderElectID
	if cfg.Shard.Name != gpufracv1.DefaultRecommenderName {
		o.electionID = leaderElectID + "-" + cfg.Shard.Name // one leader per shard
	}
	if cfg.LabelMode != "auto" && cfg.LabelMode != "direct" {
		return fmt.Errorf("--label-mode %q: want auto or direct", cfg.LabelMode)
	}
	for _, l := range []struct{ flag, name string }{{"--namespace-label", o.labels.Namespace}, {"--pod-label", o.labels.Pod}, {"--container-label", o.labels.Container}} {
		if !model.LegacyValidation.IsValidLabelName(l.name) {
			return fmt.Errorf("%s %q: want a Prometheus label name (letters, digits and _, not starting with a digit)", l.flag, l.name)
		}
	}
	if o.source != "auto" {
		if o.src, err = metrics.NewSource(o.source); err != nil {
			return fmt.Errorf("--metric-source: %w", err)
		}
	}
	return nil
}

func run() error {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	cfg, promCfg := o.cfg, o.promCfg
	api, err := promCfg.API()
	if err != nil {
		return err
	}
	// The per-autoscaler metrics are built once per cycle and served beside the
	// registry's, not gathered through it at every scrape (recommender.Autoscalers).
	ctrlmetrics.Registry = recommender.WithAutoscalers(ctrlmetrics.Registry)
	// Pods are cached with only the fields the recommender reads (workload.SlimPod).
	mgr, err := manager.New(manager.Options{Flags: o.mgr, LeaderElectionID: o.electionID, PodTransform: workload.SlimPod})
	if err != nil {
		return err
	}
	if err := recommender.Register(ctrlmetrics.Registry); err != nil {
		return err
	}
	rec := recommender.New(mgr.GetClient(), &metrics.Reader{API: api, Labels: o.labels, Timeout: promCfg.Timeout, MaxSamplesPerQuery: o.maxSamples}, o.src, cfg)
	if rec.Scale, err = manager.ScaleChecker(mgr); err != nil {
		return err
	}
	rec.Events = mgr.GetEventRecorder("gpufrac-recommender")
	rec.CheckpointReader = mgr.GetAPIReader() // listed once at start: not cached
	if o.statusLeaseNS != "" {
		direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return err
		}
		rec.StatusLease = &statuslease.Renewer{Client: direct, Namespace: o.statusLeaseNS,
			Name: statuslease.RecommenderLeaseName(cfg.Shard.Name), Component: "recommender",
			Duration: 3 * cfg.WithDefaults().Interval}
	} else {
		klog.Background().Info("No status Lease (--status-lease-namespace is empty): an updater with --recommender-lease-max-age holds this instance's autoscalers")
	}
	if err := mgr.Add(rec); err != nil {
		return err
	}
	if o.planner {
		if _, err := manager.AddOptional(mgr, mgr.GetRESTMapper(), manager.Optional{
			Name: "sharing planner",
			Kind: gpufracv1.GroupVersion.WithKind("GPUSharingPolicy"),
			Setup: func(mgr ctrl.Manager) error {
				if err := sharingctl.Register(ctrlmetrics.Registry); err != nil {
					return err
				}
				pc := &sharingctl.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Events: mgr.GetEventRecorder("gpufrac-sharing-planner"), Interval: o.planInterval}
				return pc.SetupWithManager(mgr)
			},
		}); err != nil {
			return err
		}
	}
	ctx := ctrl.SetupSignalHandler()
	if err := rec.WatchAutoscalers(ctx, mgr.GetCache()); err != nil {
		return err
	}
	if err := rec.WatchPods(ctx, mgr.GetCache()); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// Command recommender runs gpufrac's recommender: it reads GPU metrics from Prometheus
// and writes one GPUFractionRecommendation per GPUFractionAutoscaler.
package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap"
	"github.com/gpufrac/gpufrac/cmd/internal/manager"
	"github.com/gpufrac/gpufrac/prom"
	"github.com/gpufrac/gpufrac/recommender"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/policy"
	sharingctl "github.com/gpufrac/gpufrac/sharingplan/controller"
)

func main() { bootstrap.Main("recommender", run) }

func run() error {
	var (
		cfg           recommender.Config
		promCfg       prom.Config
		mgrFlags      manager.Flags
		source        = flag.String("metric-source", "auto", "Metric source: auto (read every source Prometheus holds over the history window, each pod from the most precise one that reports it: agent, hami, kai, dcgm), agent, hami, kai or dcgm.")
		labels        = metrics.DefaultLabels
		gpuMemory     = flag.String("gpu-memory", "80Gi", "Memory of one GPU (quantity, bytes): no recommendation exceeds it, and sharing modes are chosen against it.")
		minMemory     = flag.String("min-memory", "", "Smallest memory recommended (quantity, bytes; default 512Mi: a CUDA context and allocator pools).")
		leaderElectID = "gpufrac-recommender.autoscaling.gpufrac.io"
	)
	flag.DurationVar(&cfg.Interval, "interval", recommender.Config{}.WithDefaults().Interval, "Cycle period, and the step of compute samples.")
	flag.DurationVar(&cfg.HistoryLength, "history-length", recommender.Config{}.WithDefaults().HistoryLength, "History loaded from Prometheus at start and for each new autoscaler.")
	flag.DurationVar(&cfg.History.MemoryAggregationInterval, "memory-aggregation-interval", 0, "Interval whose per-pod peak is one memory sample (default 1h).")
	flag.DurationVar(&cfg.History.HalfLife, "half-life", 0, "Decay half-life of the histograms (default 24h, VPA's).")
	flag.DurationVar(&cfg.History.PeakWindow, "memory-peak-window", 0, "Window of the recent memory peak the target never goes below (default 168h: rare spikes stay in the target for a week).")
	flag.DurationVar(&cfg.Estimator.FullConfidenceHistory, "full-confidence-history", 0, "History length at which confidence reaches 100% (default 24h).")
	flag.DurationVar(&cfg.MaxBackoff, "max-backoff", 0, "Longest wait between cycles while Prometheus fails (default 5m).")
	flag.Float64Var(&cfg.LowConfidence, "low-confidence", 0, "Confidence ratio 0–1 under which LowConfidence is set (default 0.5).")
	flag.Float64Var(&cfg.Estimator.ComputeMargin, "compute-margin", 0, "Safety margin on compute, ratio (default 0.15, VPA's).")
	flag.Float64Var(&cfg.Policy.GuardrailComputeStep, "guardrail-compute-step", 0, "Compute added per cycle while the latency guardrail is breached, share of one GPU (default 0.1).")
	fitHeadroom := flag.String("fit-memory-headroom", resource.NewQuantity(policy.DefaultFitMemoryHeadroomBytes, resource.BinarySI).String(), "Least room above the recent memory peak for rounding a memory target down to a whole share of one GPU (½, ⅓, …), a quantity; 0 turns packing-aware sizing off.")
	flag.StringVar(&cfg.Shard.Name, "recommender-name", gpufracv1.DefaultRecommenderName, "This instance's name (shard): it owns the autoscalers whose spec.recommenders names it; \"default\" also owns those naming none. Each name elects its own leader.")
	maxSamples := flag.Int("max-samples-per-query", 0, "Most samples (series × points) one range query asks for; set it under the backend's limit (Prometheus --query.max-samples, Mimir -querier.max-fetched-samples-per-query). 0: only Prometheus' 11,000 points per series; a chunk refused as too large is halved either way.")
	planner := flag.Bool("sharing-planner", true, "Run the GPUSharingPolicy controller (NVIDIA device-plugin time-slicing/MPS planner, docs/sharing-planner.md) on the leader.")
	planInterval := flag.Duration("sharing-plan-interval", time.Minute, "How often each GPUSharingPolicy is planned again from the current recommendations.")
	shardNS := flag.String("shard-namespace-selector", "", "Label selector on namespaces (team=a,tier!=batch): this instance owns only autoscalers in matching namespaces (default: every namespace).")
	flag.StringVar(&cfg.LabelMode, "label-mode", "auto", "How workload labels are read: auto (the --*-label labels, and for series scraped without honor_labels their exported_* copies) or direct (the --*-label labels only).")
	flag.StringVar(&labels.Namespace, "namespace-label", labels.Namespace, "Label naming a sample's pod namespace.")
	flag.StringVar(&labels.Pod, "pod-label", labels.Pod, "Label naming a sample's pod.")
	flag.StringVar(&labels.Container, "container-label", labels.Container, "Label naming a sample's container.")
	promCfg.AddFlags(flag.CommandLine)
	mgrFlags.AddFlags(flag.CommandLine, "runs cycles")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()

	if *minMemory != "" {
		m, err := resource.ParseQuantity(*minMemory)
		if err != nil || m.Sign() < 0 {
			return fmt.Errorf("--min-memory %q: want a quantity such as 512Mi", *minMemory)
		}
		cfg.Policy.MinMemoryBytes = m.AsApproximateFloat64()
	}
	fit, err := resource.ParseQuantity(*fitHeadroom)
	if err != nil || fit.Sign() < 0 {
		return fmt.Errorf("--fit-memory-headroom %q: want a quantity such as 2Gi, or 0", *fitHeadroom)
	}
	cfg.Policy.FitMemoryHeadroomBytes = fit.AsApproximateFloat64()
	if fit.IsZero() {
		cfg.Policy.FitMemoryHeadroomBytes = -1 // off
	}
	q, err := resource.ParseQuantity(*gpuMemory)
	if err != nil || q.Sign() <= 0 {
		return fmt.Errorf("--gpu-memory %q: want a positive quantity such as 80Gi", *gpuMemory)
	}
	if errs := validation.IsDNS1123Label(cfg.Shard.Name); len(errs) > 0 {
		return fmt.Errorf("--recommender-name %q: %s", cfg.Shard.Name, strings.Join(errs, "; "))
	}
	if *shardNS != "" {
		if cfg.Shard.Namespaces, err = k8slabels.Parse(*shardNS); err != nil {
			return fmt.Errorf("--shard-namespace-selector %q: %w", *shardNS, err)
		}
	}
	electionID := leaderElectID
	if cfg.Shard.Name != gpufracv1.DefaultRecommenderName {
		electionID = leaderElectID + "-" + cfg.Shard.Name // one leader per shard
	}
	cfg.Policy.GPUMemoryBytes = q.AsApproximateFloat64()
	var src metrics.Source // nil (auto): every source present, chosen per pod
	if *source != "auto" {
		if src, err = metrics.NewSource(*source); err != nil {
			return err
		}
	}
	api, err := promCfg.API()
	if err != nil {
		return err
	}
	mgr, err := manager.New(manager.Options{Flags: mgrFlags, LeaderElectionID: electionID})
	if err != nil {
		return err
	}
	if err := recommender.Register(ctrlmetrics.Registry); err != nil {
		return err
	}
	rec := recommender.New(mgr.GetClient(), &metrics.Reader{API: api, Labels: labels, Timeout: promCfg.Timeout, MaxSamplesPerQuery: *maxSamples}, src, cfg)
	if rec.Scale, err = manager.ScaleChecker(mgr); err != nil {
		return err
	}
	rec.Events = mgr.GetEventRecorder("gpufrac-recommender")
	if err := mgr.Add(rec); err != nil {
		return err
	}
	if *planner {
		if _, err := manager.AddOptional(mgr, mgr.GetRESTMapper(), manager.Optional{
			Name: "sharing planner",
			Kind: gpufracv1.GroupVersion.WithKind("GPUSharingPolicy"),
			Setup: func(mgr ctrl.Manager) error {
				if err := sharingctl.Register(ctrlmetrics.Registry); err != nil {
					return err
				}
				pc := &sharingctl.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Events: mgr.GetEventRecorder("gpufrac-sharing-planner"), Interval: *planInterval}
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
	return mgr.Start(ctx)
}

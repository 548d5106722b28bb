// Package recommender is gpufrac's recommender loop: every cycle it lists the
// GPUFractionAutoscalers and their pods from informer caches, reads a fixed set of
// Prometheus queries (recommender/metrics), attributes samples to workloads
// (workload), keeps decaying histograms (recommender/history), estimates
// (recommender/estimate), applies policies and guardrails (recommender/policy) and writes
// one GPUFractionRecommendation per autoscaler (status.go).
//
// History is bootstrapped from Prometheus range queries when an autoscaler appears, so a
// recommendation exists after the first cycle. With checkpoints (Config.Checkpoints,
// checkpoint.go) the model of each workload is also saved periodically to a
// GPUFractionCheckpoint, as VPA's recommender does, and a restarted recommender (or a new
// leader) restores it and reads from Prometheus only what came after it; without one, a
// restart bootstraps from Prometheus too.
package recommender

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/promreg"
	"github.com/gpufrac/gpufrac/internal/statuswrite"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/recommend"
	"github.com/gpufrac/gpufrac/statuslease"
	"github.com/gpufrac/gpufrac/workload"
)

// Config holds the recommender's settings; cmd/recommender maps flags onto it. The
// embedded recommend.Config is the pure part (estimator, policy, noise), shared with
// the simulator.
type Config struct {
	// Interval is the cycle period and the compute sample step. Default 1m.
	Interval time.Duration
	// HistoryLength is how much history is loaded at bootstrap. Default 8 days (VPA's
	// Prometheus history provider default).
	HistoryLength time.Duration
	// MaxBackoff bounds the wait between cycles while Prometheus fails. Default 5m.
	MaxBackoff time.Duration
	// LabelMode is how workload labels are read: "auto" (Reader.Labels, and for series
	// scraped without honor_labels their exported_* copies) or "direct" (Reader.Labels
	// only). Default auto.
	LabelMode string
	// HistorySliceSamples is about the most compute samples (series × points) one slice
	// of a load holds before it is fed to the model; 0 means DefaultHistorySliceSamples.
	HistorySliceSamples int
	// HistorySliceAlignment is a span whose multiples (as time.Truncate counts them: for
	// a span that divides a day, Unix time's) the slices of a history load end on, as
	// well as the memory aggregation interval's (sliceEnd); 0 means
	// DefaultHistorySliceAlignment; a negative value, the aggregation interval alone
	// (--history-slice-alignment 0 sets -1).
	HistorySliceAlignment time.Duration
	// HistoryFromRecordings makes history loads read each whole hour's memory peak and
	// flatness from the gpufrac-history recording rules (rules/README.md) instead of the
	// exporters' raw series, where the recordings hold the hour whole; other hours, and
	// compute, copies and diagnostics, are read from the raw series (recorded.go).
	// Default false.
	HistoryFromRecordings bool
	// HistoryComputeFromRecordings, with HistoryFromRecordings, also reads each whole
	// hour's compute from its recorded quantiles (21 and a count per container and hour,
	// metrics.HistoryComputeQuantiles; recorded.go, readCompute) instead of the raw
	// minute means: on the safe side of the recorded minute means (never lower), a little
	// higher than the raw read (docs/benchmarks.md,
	// "Results, 2026-12-02: recorded compute, finer quantiles"). Default false: compute
	// is read raw.
	HistoryComputeFromRecordings bool
	// Checkpoints saves each workload's model to a GPUFractionCheckpoint and restores it
	// at start (checkpoint.go). Default false here; cmd/recommender's --checkpoints sets it.
	Checkpoints bool
	// CheckpointInterval is the least time between two checkpoints of one workload.
	// Default DefaultCheckpointInterval (30m).
	CheckpointInterval time.Duration
	// CheckpointWritesPerCycle bounds the checkpoint writes of one cycle; 0: twice the
	// tracked workloads' share per cycle of CheckpointInterval, at least 10
	// (checkpointWrites).
	CheckpointWritesPerCycle int
	// StatusWriteConcurrency is the most status writes of one cycle in flight at once
	// (updateRecommendations): each autoscaler's recommendation and status are written
	// in order, different autoscalers' at once; then the most checkpoint writes
	// (maintainCheckpoints). Default DefaultStatusWriteConcurrency.
	StatusWriteConcurrency int
	// Shard limits this instance to the autoscalers it owns (spec.recommenders and a
	// namespace selector). The zero value owns every autoscaler that names no
	// recommender or names "default".
	Shard Shard

	recommend.Config
}

// DefaultStatusWriteConcurrency is the default Config.StatusWriteConcurrency: 8 writes
// in flight. One at a time, each write waits for the API server's round trip (about
// 10 ms with etcd on the same 2-core machine), and a first cycle over 2,000
// autoscalers writes 6,000 objects (each recommendation created, its status and the
// autoscaler's): about 60 s of a 190 s bootstrap in make bench-scale
// (docs/benchmarks.md). 8 is far under the API server's default
// --max-requests-inflight (400).
const DefaultStatusWriteConcurrency = 8

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.HistoryLength <= 0 {
		c.HistoryLength = recommend.DefaultHistoryLength
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.StatusWriteConcurrency <= 0 {
		c.StatusWriteConcurrency = DefaultStatusWriteConcurrency
	}
	if c.HistorySliceSamples <= 0 {
		c.HistorySliceSamples = DefaultHistorySliceSamples
	}
	if c.HistorySliceAlignment == 0 {
		c.HistorySliceAlignment = DefaultHistorySliceAlignment
	}
	if c.LabelMode == "" {
		c.LabelMode = "auto"
	}
	c.History.SampleInterval = c.Interval
	c.Config = c.Config.WithDefaults()
	return c
}

// Recommender metrics (registered by Register).
var (
	cycleDuration     = promreg.Histogram("gpufrac_recommender_cycle_duration_seconds", "Duration of one recommender cycle, seconds.", prometheus.ExponentialBuckets(0.01, 2, 14))
	cycleStepDuration = promreg.HistogramVec("gpufrac_recommender_cycle_step_duration_seconds",
		"Duration of each step of a recommender cycle, seconds, by step (load_autoscalers, load_pods, load_metrics, garbage_collect, update_recommendations, maintain_checkpoints, export_metrics).",
		prometheus.ExponentialBuckets(0.001, 2, 18), "step")
	cycleErrors            = promreg.CounterVec("gpufrac_recommender_cycle_errors_total", "Recommender cycles that failed, by stage (list, prometheus, write).", "stage")
	workloadsTracked       = promreg.Gauge("gpufrac_recommender_workloads_tracked", "Workloads with an autoscaler whose history the recommender keeps.")
	statusWriteFailures    = promreg.CounterVec("gpufrac_recommender_status_write_failures_total", "Failed writes of an autoscaler's GPUFractionRecommendation (create, spec, status) or its status summary, from the third failure in a row of the same autoscaler on (one per autoscaler per cycle), by reason: the API status reason (Conflict, Invalid, Forbidden, ...; Other, Unknown).", "reason")
	autoscalersNotSelected = promreg.Gauge("gpufrac_recommender_autoscalers_not_selected", "Autoscalers that name this instance (spec.recommenders) in a namespace its --shard-namespace-selector leaves out, at the last cycle: nobody recommends for them (ConfigUnsupported NamespaceNotSelected).")
	recommendationsWritten = promreg.Counter("gpufrac_recommender_recommendations_written_total", "GPUFractionRecommendation status writes (only when content changed beyond noise).")
)

// Register adds the recommender's metrics to a registry (controller-runtime's
// metrics.Registry in cmd/recommender); the per-autoscaler metrics are not registered
// but gathered beside it (WithAutoscalers). It returns the first registration error.
func Register(reg prometheus.Registerer) error {
	return promreg.Register(reg, cycleDuration, cycleStepDuration, cycleErrors, workloadsTracked, autoscalersNotSelected, recommendationsWritten, statusWriteFailures, checkpointsWritten, checkpointsRestored, checkpointsIgnored, metrics.Queries, metrics.SamplesDropped, metrics.SamplesClamped, metrics.Incomplete)
}

// Recommender runs the cycle. Create it with New.
type Recommender struct {
	Client client.Client
	Reader *metrics.Reader
	// Source is the metric source (--metric-source); nil (auto) reads every source
	// Prometheus holds over the history window and chooses one per pod and signal
	// (sources.go).
	Source metrics.Source
	// Scale checks targets of non-native kinds; nil rejects them as unsupported.
	Scale  workload.ScaleChecker
	Config Config
	// CheckpointReader lists the GPUFractionCheckpoints at start (an uncached reader:
	// mgr.GetAPIReader(), so that the checkpoints are not kept in an informer's cache);
	// nil lists them through Client.
	CheckpointReader client.Reader
	// Events records events on autoscalers; nil records none.
	Events events.EventRecorder
	// StatusLease, when set, is renewed after every cycle that ran all its steps (it
	// listed its objects and wrote their statuses; a failed Prometheus read, which the
	// statuses then say, or a failed write of some objects does not stop it) and released
	// when Start stops, so the updater can tell this instance is keeping its autoscalers'
	// recommendations current (statuslease.RecommenderLeaseName). Nil: no status Lease.
	StatusLease *statuslease.Renewer
	// Now returns the current time; tests replace it.
	Now func() time.Time

	model     *history.Model
	ownership *workload.Ownership
	owners    workload.Owners
	tracked   map[history.WorkloadKey]*tracking
	methods   map[history.WorkloadKey]workload.Method
	lastLoad  time.Time // end of the last successful live load
	// arrivals: how far apart the ends of successive whole live loads are (dataEnd): how
	// often Prometheus holds new samples (GapCycle.Arrivals).
	arrivals sampleSpacing
	// promHeld says, by time, whether Prometheus holds a memory sample in the window
	// ending then (promHolds), for the times within the history window.
	promHeld map[time.Time]bool
	// missingCounted is the end of the window whose samples without a pod label were
	// last counted (metrics.DropNoLabels).
	missingCounted time.Time
	// labelHints: per namespace, the GPU series the last look found with workload labels
	// the label settings do not read; labelHintsAt: when it looked (labelhint.go).
	labelHints   map[string]metrics.LabelHint
	labelHintsAt time.Time
	// failedReads counts the cycles in a row whose read of Prometheus failed
	// (FailedReadsBeforeUnavailable, and Start's backoff); 0 after one that read it.
	failedReads int
	trigger     chan struct{}
	// cur is the cycle being run (or last run): its per-cycle state (cycle.go).
	cur *cycle
	// podIndex, when set (WatchPods), is the pod informer whose namespace index loadPods
	// reads.
	podIndex podIndex
	// exportConsts keeps each cycle's per-autoscaler metrics as const metrics too
	// (snapshot.consts), for the tests that gather them through a registry.
	exportConsts bool
	// staleMem: the memory value last judged stale per container (load.go dropStale).
	staleMem metrics.StaleMemory
	// detected: with auto, the sources Prometheus holds over the history window, in
	// order of preference (detect).
	detected []metrics.Source
	// pods: per pod, when each source reported each signal (sources.go).
	pods map[[2]string]*podSources
	// sourceCounts: per workload, the pods read from each source (countSources); nil
	// when r.pods or the sources changed since it was counted.
	sourceCounts map[history.WorkloadKey]map[string]int32
	writeFails   statuswrite.Failures // status writes failed in a row, per autoscaler
	dupNoted     map[types.UID]string // the DuplicateTarget event last recorded on each autoscaler in charge

	// checkpoints: per workload, what its last checkpoint holds (checkpoint.go);
	// checkpointsRead: the checkpoints were listed (once per process).
	checkpoints     map[history.WorkloadKey]checkpointMark
	checkpointsRead bool

	// cappedNoted: the containers/resources of the last CappedBelowNeed event per autoscaler.
	cappedNoted map[types.UID]string
}

// tracking is per-workload bookkeeping.
type tracking struct {
	bootstrapped bool
	// fedTo is the end of the last slice of its history load fed to the model while
	// not bootstrapped: a history load that failed part way resumes there (load).
	fedTo time.Time
	gaps  dataGaps // what the loads of this cycle lacked (load.go)
}

// New returns a recommender with an empty model.
func New(c client.Client, reader *metrics.Reader, source metrics.Source, cfg Config) *Recommender {
	cfg = cfg.WithDefaults()
	return &Recommender{
		Client:      c,
		Reader:      reader,
		Source:      source,
		Config:      cfg,
		Now:         time.Now,
		model:       history.NewModel(cfg.History),
		ownership:   workload.NewOwnership(),
		owners:      workload.Owners{Reader: c},
		tracked:     map[history.WorkloadKey]*tracking{},
		checkpoints: map[history.WorkloadKey]checkpointMark{},
		methods:     map[history.WorkloadKey]workload.Method{},
		trigger:     make(chan struct{}, 1),
	}
}

// WatchAutoscalers makes a new GPUFractionAutoscaler start a cycle at once instead of
// waiting for the next tick, through the cache's informer. It returns the informer error.
func (r *Recommender) WatchAutoscalers(ctx context.Context, c ctrlcache.Cache) error {
	inf, err := c.GetInformer(ctx, &gpufracv1.GPUFractionAutoscaler{})
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { r.Trigger() },
		UpdateFunc: func(o, n any) {
			if oa, ok := o.(*gpufracv1.GPUFractionAutoscaler); ok {
				if na, ok := n.(*gpufracv1.GPUFractionAutoscaler); ok && oa.Generation != na.Generation {
					r.Trigger()
				}
			}
		},
	})
	return err
}

// Trigger asks for a cycle now; it never blocks.
func (r *Recommender) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Start runs cycles until ctx ends (manager.Runnable; it needs leader election). A
// failing cycle is retried with exponential backoff up to MaxBackoff.
func (r *Recommender) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("recommender")
	ctx = klog.NewContext(ctx, log)
	log.Info("Starting", "interval", r.Config.Interval, "historyLength", r.Config.HistoryLength)
	for {
		wait := r.Config.Interval
		err := r.RunOnce(ctx)
		if errors.Is(err, ErrMetricsUnavailable) {
			wait = backoff(r.Config.Interval, r.Config.MaxBackoff, r.failedReads)
		}
		if err != nil {
			log.Error(err, "Cycle failed; last recommendations kept", "retryIn", wait)
		}
		r.renewStatusLease(ctx, r.cur != nil && r.cur.ran)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			r.releaseStatusLease()
			log.Info("Stopped")
			return nil
		case <-t.C:
		case <-r.trigger:
			t.Stop()
		}
	}
}

// renewStatusLease renews StatusLease after a cycle, when it ran all its steps (ran:
// cycle.ran). A failed Prometheus read does not stop that (the statuses say
// MetricsUnavailable, and the updater holds shrinks on it), nor a failed write of some
// objects (one object must not hold every autoscaler of the shard); a cycle that could
// not list its objects, or did not end, leaves the Lease to go stale, so the updater
// stops acting on recommendations this instance is not keeping. Renewal errors are
// logged.
func (r *Recommender) renewStatusLease(ctx context.Context, ran bool) {
	if r.StatusLease == nil || ctx.Err() != nil || !ran {
		return
	}
	if err := r.StatusLease.Renew(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Renewing the recommender's status Lease", "lease", r.StatusLease.Namespace+"/"+r.StatusLease.Name)
	}
}

// releaseStatusLease clears StatusLease's renewTime when Start stops (this instance no
// longer leads), so the updater sees at once that nobody keeps the recommendations.
func (r *Recommender) releaseStatusLease() {
	if r.StatusLease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.StatusLease.Release(ctx); err != nil {
		klog.Background().Error(err, "Releasing the recommender's status Lease", "lease", r.StatusLease.Namespace+"/"+r.StatusLease.Name)
	}
}

func backoff(base, max time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// ErrMetricsUnavailable wraps errors of a cycle that could not read Prometheus; the
// loop then backs off exponentially.
var ErrMetricsUnavailable = errors.New("metrics unavailable")

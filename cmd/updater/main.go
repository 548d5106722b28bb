// Command updater runs gpufrac's updater: it replaces (or, for the annotations backend,
// changes in place) running pods whose GPU fraction is out of date with their
// GPUFractionAutoscaler's recommendation, inside resize windows and disruption budgets,
// and rolls back a shrink when a guardrail trips. See docs/updater.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	// Time zones of resize windows must load in minimal images without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/gpufrac/gpufrac/admission"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap"
	"github.com/gpufrac/gpufrac/cmd/internal/manager"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/updater"
)

func main() { bootstrap.Main("updater", run) }

// leaderElectID names the updater's leader-election Lease.
const leaderElectID = "gpufrac-updater.autoscaling.gpufrac.io"

// options are the updater's flags, parsed by parseFlags.
type options struct {
	cfg updater.Config
	// adm is the webhook's configuration, read from the webhook's own flags so backend
	// fields, overheads and the minimum confidence are read exactly as the webhook writes
	// and applies them.
	adm                     admission.Config
	mgr                     manager.Flags
	watchNS                 string
	inPlace, placementCheck bool
}

// parseFlags registers the updater's flags on fs, parses args and checks them. Its
// errors name the flag.
func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	o.addFlags(fs)
	klog.InitFlags(fs)
	if err := bootstrap.Parse(fs, args); err != nil { // a bad flag: its error and a --help hint, not every flag
		return nil, err
	}
	if err := o.checkRanges(fs); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	if err := o.complete(); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	return o, nil
}

// checkRanges refuses the values updater.Config.WithDefaults would otherwise replace
// without a word (a period of 0 or below with its default, a negative age or
// hysteresis with none, a ratio out of range with the default ratio): each error names
// its flag.
func (o *options) checkRanges(fs *flag.FlagSet) error {
	errs := []error{
		bootstrap.Positive(fs, "interval", "retry-backoff", "replacement-timeout", "stuck-backoff",
			"verification-period", "rollback-floor-duration", "max-unready-backoff", "admission-lease-max-age",
			"threshold", "near-limit", "max-in-flight", "persist-cycles"),
		bootstrap.NonNegative(fs, "eviction-burst", "warm-up", "min-pod-age", "persist-for", "min-replacement-interval", "recommender-lease-max-age"),
	}
	c := o.cfg
	if c.MaxInFlight > 1 {
		errs = append(errs, fmt.Errorf("--max-in-flight %v: want a share of the workload's pods, 0-1", c.MaxInFlight))
	}
	if c.EvictionRate == 0 {
		errs = append(errs, errors.New("--eviction-rate 0: want evictions per second above 0, or a negative value for no limit"))
	}
	if c.ComputeRequestGrowth == 0 {
		errs = append(errs, errors.New("--compute-request-growth 0: want a ratio above 0, or a negative value for off"))
	}
	if c.MaxInFlightPerDevice == 0 {
		errs = append(errs, errors.New("--max-in-flight-per-device 0: want 1 or more, or a negative value for no limit"))
	}
	return errors.Join(errs...)
}

func (o *options) addFlags(fs *flag.FlagSet) {
	cfg := &o.cfg
	d := updater.Config{}.WithDefaults()
	fs.StringVar(&o.watchNS, "watch-namespaces", "", "Only these namespaces (comma-separated) are watched; empty watches all.")
	fs.BoolVar(&o.inPlace, "in-place", true, "Change pods of the annotations backend in place under updateMode InPlaceOrRecreate (false recreates them too).")
	fs.DurationVar(&cfg.Interval, "interval", d.Interval, "Cycle period.")
	fs.DurationVar(&cfg.WarmUp, "warm-up", 2*time.Minute, "No evictions for this long after start (after winning leader election), so a restart never causes an eviction storm.")
	fs.DurationVar(&cfg.MinPodAge, "min-pod-age", updater.DefaultMinPodAge, "Age a pod inside its bounds must reach before it is replaced for being --threshold or more from its target (bounds apply at any age).")
	fs.Float64Var(&cfg.Threshold, "threshold", d.Threshold, "Relative difference from the target (ratio) that makes a pod older than --min-pod-age out of date.")
	fs.IntVar(&cfg.PersistCycles, "persist-cycles", d.PersistCycles, "Consecutive cycles a change inside the recommendation's bounds must be seen in before a pod is replaced for it (hysteresis; 1 disables).")
	fs.DurationVar(&cfg.PersistFor, "persist-for", updater.DefaultPersistFor, "How long a change inside the bounds must have persisted before a pod is replaced for it (hysteresis).")
	fs.DurationVar(&cfg.MinReplacementInterval, "min-replacement-interval", updater.DefaultMinReplacementInterval, "Least time between the starts of two rounds of non-urgent replacements of one workload (also one round per resize window opening).")
	fs.Float64Var(&cfg.ComputeRequestGrowth, "compute-request-growth", updater.DefaultComputeRequestGrowth, "Rise of a time-sliced pod's recommended computeRequest over the one it was placed with (ratio; at least 20m) from which the pod is replaced, so the scheduler places it by its current request (not urgent; waits for the hysteresis, not for --min-pod-age). Negative: off.")
	fs.Float64Var(&cfg.NearLimit, "near-limit", d.NearLimit, "Observed memory peak ÷ applied memory (ratio) at which memory growth is urgent (may apply outside resize windows).")
	fs.Float64Var(&cfg.MaxInFlight, "max-in-flight", d.MaxInFlight, "Share of a workload's pods (ratio 0–1, at least one pod) that may be being replaced at once.")
	fs.BoolVar(&cfg.Consolidate, "consolidate", false, "Replace the pods of one shared GPU per cycle (HAMi devices, KAI GPU groups) whose replacements all fit on the other shared GPUs in use, so that a binpack scheduler empties it: inside resize windows, past --min-pod-age, within the disruption budget (docs/updater.md, Consolidation).")
	fs.Int64Var(&cfg.ConsolidationComputeMilli, "consolidation-compute", packing.DefaultConsolidationComputeMilli, "Most compute, milli-GPU, a shared GPU may hold after consolidation moved pods onto it.")
	fs.IntVar(&cfg.MaxInFlightPerDevice, "max-in-flight-per-device", d.MaxInFlightPerDevice, "Most replacements in flight at once of pods from one GPU where the placement is known (HAMi devices, KAI GPU groups); negative: no limit.")
	fs.Float64Var(&cfg.EvictionRate, "eviction-rate", d.EvictionRate, "Cluster-wide eviction rate limit, evictions per second (negative: unlimited).")
	fs.IntVar(&cfg.EvictionBurst, "eviction-burst", 0, "Burst of the eviction rate limit, evictions (0: one cycle's worth, --eviction-rate × --interval rounded up, at least 1).")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", d.RetryBackoff, "Wait before retrying a pod whose eviction was refused (PodDisruptionBudget) or failed.")
	fs.DurationVar(&cfg.ReplacementTimeout, "replacement-timeout", d.ReplacementTimeout, "How long an evicted pod's replacement is awaited (counted in flight).")
	fs.DurationVar(&cfg.StuckBackoff, "stuck-backoff", d.StuckBackoff, "Pause of a workload's evictions after a replacement came back without its fraction (doubled for each further one in a row, at most 24h).")
	fs.DurationVar(&cfg.VerificationPeriod, "verification-period", d.VerificationPeriod, "How long after a shrink the latency guardrail and restarts are watched for a rollback.")
	fs.DurationVar(&cfg.MaxUnreadyBackoff, "max-unready-backoff", d.MaxUnreadyBackoff, "Most time between two replacements of not-Ready pods of one workload (autoscalers annotated gpufrac.io/replace-unready-pods=true); the backoff starts at --retry-backoff and doubles.")
	fs.DurationVar(&cfg.FloorDuration, "rollback-floor-duration", d.FloorDuration, "How long a rollback floor (status.updater.floor) holds.")
	fs.StringVar(&cfg.LeaseNamespace, "admission-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the admission webhook's status Lease (gpufrac's namespace; default $POD_NAMESPACE).")
	fs.StringVar(&cfg.LeaseName, "admission-status-lease-name", d.LeaseName, "Name of the admission webhook's status Lease; no evictions while it is stale.")
	fs.DurationVar(&cfg.LeaseMaxAge, "admission-lease-max-age", d.LeaseMaxAge, "Oldest renewal of the status Lease that counts as fresh (well above the webhook's renew interval).")
	fs.DurationVar(&cfg.RecommenderLeaseMaxAge, "recommender-lease-max-age", updater.DefaultRecommenderLeaseMaxAge, "Oldest renewal of the status Lease of the recommender instance that owns an autoscaler (gpufrac-recommender-status-<name>, renewed after each of its cycles) under which that autoscaler's pods are changed; older or missing: only protective growth (docs/updater.md). The Lease's own leaseDurationSeconds (3 × the recommender's --interval) raises it where longer. Keep it well above the duration of the recommender's first cycle. 0: off.")
	fs.StringVar(&cfg.RecommenderLeaseNamespace, "recommender-namespace", "", "Namespace of the recommenders' status Leases (default: --admission-namespace).")
	fs.BoolVar(&o.placementCheck, "placement-check", true, "Before evicting, check that the replacement can be placed: a node with the GPU resource free (allocatable minus the requests of the pods bound to it) and, for HAMi, a shared GPU with its memory free; otherwise keep the pod (no-capacity). Needs get/list of nodes and pods cluster-wide; without them (or when no node advertises the GPU resource) nothing is held.")
	// The webhook's own flags: pass the same values as to the webhook.
	o.adm.AddFlags(fs)
	o.mgr.AddFlags(fs, "evicts")
}

// complete checks the webhook's and the updater's configurations and fills their
// defaults.
func (o *options) complete() error {
	o.cfg.NoPlacementCheck = !o.placementCheck
	o.adm = o.adm.WithDefaults()
	if err := o.adm.Validate(); err != nil {
		return err
	}
	o.cfg.Backend, o.cfg.MinConfidence = o.adm.Config, o.adm.MinConfidence
	o.cfg = o.cfg.WithDefaults()
	return o.cfg.Validate()
}

func run() error {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	mgr, err := manager.New(manager.Options{
		Flags:            o.mgr,
		LeaderElectionID: leaderElectID,
		// Leader election hands over cleanly on SIGTERM; the new leader's warm-up
		// still holds evictions back.
		LeaderElectionReleaseOnCancel: true,
		Namespaces:                    bootstrap.SplitList(o.watchNS),
	})
	if err != nil {
		return err
	}
	if err := updater.Register(ctrlmetrics.Registry); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	u, err := newUpdater(ctx, mgr, o)
	if err != nil {
		return err
	}
	if err := mgr.Add(u); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// newUpdater returns the updater of o.cfg on mgr's clients, with the in-place path when
// --in-place is set.
func newUpdater(ctx context.Context, mgr ctrl.Manager, o *options) (*updater.Updater, error) {
	cfg := o.cfg
	// The dra backend reads a pod's allocation from its claim template (RBAC: get
	// resourceclaimtemplates); the updater never creates one.
	cfg.Backend.DRA.Templates = backend.ClientClaimTemplates{Reader: mgr.GetAPIReader()}
	// nvidia-timeslicing and nvidia-mps: the updater moves pods onto shared capacity only
	// while the webhook would place them there (RBAC: list gpusharingpolicies).
	cfg.Backend.DevicePlugin.Policies = mgr.GetAPIReader()
	u := updater.New(mgr.GetClient(), mgr.GetAPIReader(), cfg)
	var err error
	if u.Scale, err = manager.ScaleChecker(mgr); err != nil {
		return nil, err
	}
	u.Events = mgr.GetEventRecorder("gpufrac-updater")
	if o.inPlace {
		// The webhook's decision, run on running pods: it reads autoscalers through the
		// same field index as the webhook.
		if err := admission.AddIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
			return nil, err
		}
		u.InPlace = &updater.MutatorInPlacer{Mutator: admission.NewMutator(mgr.GetClient(), mgr.GetScheme(), o.adm), Client: mgr.GetClient(), Annotations: o.adm.Config.Annotations}
	}
	return u, nil
}

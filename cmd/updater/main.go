// Command updater runs gpufrac's updater: it replaces (or, for the annotations backend,
// changes in place) running pods whose GPU fraction is out of date with their
// GPUFractionAutoscaler's recommendation, inside resize windows and disruption budgets,
// and rolls back a shrink when a guardrail trips. See docs/updater.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	// Time zones of resize windows must load in minimal images without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/updater"
	"github.com/gpufrac/gpufrac/workload"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "updater failed")
		os.Exit(1)
	}
}

func run() error {
	var (
		cfg           updater.Config
		metricsAddr   = flag.String("metrics-bind-address", ":8080", "Address of the /metrics endpoint (\"0\" disables it).")
		probeAddr     = flag.String("health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
		leaderElect   = flag.Bool("leader-elect", true, "Elect a leader through a Lease so only one replica evicts.")
		leaderNS      = flag.String("leader-election-namespace", "", "Namespace of the leader-election Lease (default: the pod's namespace).")
		watchNS       = flag.String("watch-namespaces", "", "Only these namespaces (comma-separated) are watched; empty watches all.")
		inPlace       = flag.Bool("in-place", true, "Change pods of the annotations backend in place under updateMode InPlaceOrRecreate (false recreates them too).")
		leaderElectID = "gpufrac-updater.autoscaling.gpufrac.io"
	)
	d := updater.Config{}.WithDefaults()
	flag.DurationVar(&cfg.Interval, "interval", d.Interval, "Cycle period.")
	flag.DurationVar(&cfg.WarmUp, "warm-up", 2*time.Minute, "No evictions for this long after start (after winning leader election), so a restart never causes an eviction storm.")
	flag.DurationVar(&cfg.MinPodAge, "min-pod-age", updater.DefaultMinPodAge, "Age a pod inside its bounds must reach before it is replaced for being --threshold or more from its target (bounds apply at any age).")
	flag.Float64Var(&cfg.Threshold, "threshold", d.Threshold, "Relative difference from the target (ratio) that makes a pod older than --min-pod-age out of date.")
	flag.IntVar(&cfg.PersistCycles, "persist-cycles", d.PersistCycles, "Consecutive cycles a change inside the recommendation's bounds must be seen in before a pod is replaced for it (hysteresis; 1 disables).")
	flag.DurationVar(&cfg.PersistFor, "persist-for", updater.DefaultPersistFor, "How long a change inside the bounds must have persisted before a pod is replaced for it (hysteresis).")
	flag.DurationVar(&cfg.MinReplacementInterval, "min-replacement-interval", updater.DefaultMinReplacementInterval, "Least time between the starts of two rounds of non-urgent replacements of one workload (also one round per resize window opening).")
	flag.Float64Var(&cfg.NearLimit, "near-limit", d.NearLimit, "Observed memory peak ÷ applied memory (ratio) at which memory growth is urgent (may apply outside resize windows).")
	flag.Float64Var(&cfg.MaxInFlight, "max-in-flight", d.MaxInFlight, "Share of a workload's pods (ratio 0–1, at least one pod) that may be being replaced at once.")
	flag.IntVar(&cfg.MaxInFlightPerDevice, "max-in-flight-per-device", d.MaxInFlightPerDevice, "Most replacements in flight at once of pods from one GPU where the placement is known (HAMi devices, KAI GPU groups); negative: no limit.")
	flag.Float64Var(&cfg.EvictionRate, "eviction-rate", d.EvictionRate, "Cluster-wide eviction rate limit, evictions per second (negative: unlimited).")
	flag.IntVar(&cfg.EvictionBurst, "eviction-burst", d.EvictionBurst, "Burst of the eviction rate limit.")
	flag.DurationVar(&cfg.RetryBackoff, "retry-backoff", d.RetryBackoff, "Wait before retrying a pod whose eviction was refused (PodDisruptionBudget) or failed.")
	flag.DurationVar(&cfg.ReplacementTimeout, "replacement-timeout", d.ReplacementTimeout, "How long an evicted pod's replacement is awaited (counted in flight).")
	flag.DurationVar(&cfg.StuckBackoff, "stuck-backoff", d.StuckBackoff, "Pause of a workload's evictions after a replacement came back without its fraction.")
	flag.DurationVar(&cfg.VerificationPeriod, "verification-period", d.VerificationPeriod, "How long after a shrink the latency guardrail and restarts are watched for a rollback.")
	flag.DurationVar(&cfg.MaxUnreadyBackoff, "max-unready-backoff", d.MaxUnreadyBackoff, "Most time between two replacements of not-Ready pods of one workload (autoscalers annotated gpufrac.io/replace-unready-pods=true); the backoff starts at --retry-backoff and doubles.")
	flag.DurationVar(&cfg.FloorDuration, "rollback-floor-duration", d.FloorDuration, "How long a rollback floor (status.updater.floor) holds.")
	flag.StringVar(&cfg.LeaseNamespace, "admission-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the admission webhook's status Lease (gpufrac's namespace; default $POD_NAMESPACE).")
	flag.StringVar(&cfg.LeaseName, "admission-status-lease-name", d.LeaseName, "Name of the admission webhook's status Lease; no evictions while it is stale.")
	flag.DurationVar(&cfg.LeaseMaxAge, "admission-lease-max-age", d.LeaseMaxAge, "Oldest renewal of the status Lease that counts as fresh (well above the webhook's renew interval).")
	placementCheck := flag.Bool("placement-check", true, "Before evicting, check that the replacement can be placed: a node with the GPU resource free (allocatable minus the requests of the pods bound to it) and, for HAMi, a shared GPU with its memory free; otherwise keep the pod (no-capacity). Needs get/list of nodes and pods cluster-wide; without them (or when no node advertises the GPU resource) nothing is held.")
	// The webhook's own flags, so backend fields, overheads and the minimum confidence are
	// read exactly as the webhook writes and applies them. Pass the same values.
	var adm admission.Config
	adm.AddFlags(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	cfg.NoPlacementCheck = !*placementCheck
	adm = adm.WithDefaults()
	if err := adm.Validate(); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	cfg.Backend, cfg.MinConfidence = adm.Config, adm.MinConfidence

	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	ctrl.SetLogger(klog.NewKlogr())

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := gpufracv1.AddToScheme(scheme); err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	opts := manager.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        leaderElectID,
		LeaderElectionNamespace: *leaderNS,
		// Leader election hands over cleanly on SIGTERM; the new leader's warm-up
		// still holds evictions back.
		LeaderElectionReleaseOnCancel: true,
	}
	if ns := splitList(*watchNS); len(ns) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range ns {
			opts.Cache.DefaultNamespaces[n] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(restCfg, opts)
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := updater.Register(ctrlmetrics.Registry); err != nil {
		return err
	}
	scales, err := scaleGetter(restCfg)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	// The dra backend reads a pod's allocation from its claim template (RBAC: get
	// resourceclaimtemplates); the updater never creates one.
	cfg.Backend.DRA.Templates = backend.ClientClaimTemplates{Reader: mgr.GetAPIReader()}
	u := updater.New(mgr.GetClient(), mgr.GetAPIReader(), cfg)
	u.Scale = workload.NewScaleChecker(mgr.GetAPIReader(), mgr.GetRESTMapper(), scales)
	u.Events = mgr.GetEventRecorder("gpufrac-updater")
	if *inPlace {
		// The webhook's decision, run on running pods: it reads autoscalers through the
		// same field index as the webhook.
		if err := admission.AddIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
			return err
		}
		u.InPlace = &updater.MutatorInPlacer{Mutator: admission.NewMutator(mgr.GetClient(), scheme, adm), Client: mgr.GetClient()}
	}
	if err := mgr.Add(u); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// scaleGetter builds a client for scale subresources of any kind.
func scaleGetter(cfg *rest.Config) (scale.ScalesGetter, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return scale.New(dc.RESTClient(), mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(dc)), nil
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

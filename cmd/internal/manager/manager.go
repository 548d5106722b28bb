// Package manager builds the controller-runtime manager of gpufrac's controller
// binaries (cmd/recommender, cmd/updater): their shared flags, the scheme, klog as the
// logger, the metrics and health endpoints, leader election, and optional controllers
// that run only when the API server serves their kind.
package manager

import (
	"errors"
	"flag"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/workload"
)

// Flags are the command-line flags every controller binary shares.
type Flags struct {
	// MetricsAddr is --metrics-bind-address, the address of /metrics; "0" disables it.
	MetricsAddr string
	// ProbeAddr is --health-probe-bind-address, the address of /healthz and /readyz.
	ProbeAddr string
	// LeaderElect is --leader-elect: elect a leader through a Lease.
	LeaderElect bool
	// LeaderElectionNamespace is --leader-election-namespace, the namespace of the
	// Lease; empty is the pod's namespace.
	LeaderElectionNamespace string
	// PprofAddr is --pprof-bind-address, the address of Go's /debug/pprof/ profiles;
	// "0" (the default) disables them.
	PprofAddr string
}

// AddFlags registers the flags on fs with their defaults (":8080", ":8081", true, "", "0").
// leaderRole ends the help of --leader-elect: "so only one replica <leaderRole>".
func (f *Flags) AddFlags(fs *flag.FlagSet, leaderRole string) {
	fs.StringVar(&f.MetricsAddr, "metrics-bind-address", ":8080", "Address of the /metrics endpoint (\"0\" disables it).")
	fs.StringVar(&f.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.BoolVar(&f.LeaderElect, "leader-elect", true, "Elect a leader through a Lease so only one replica "+leaderRole+".")
	fs.StringVar(&f.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the pod's namespace).")
	fs.StringVar(&f.PprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof/ profiles (\"0\" disables them; keep it on loopback: profiles expose memory contents).")
}

// Options configure New.
type Options struct {
	Flags
	// LeaderElectionID names the leader-election Lease.
	LeaderElectionID string
	// LeaderElectionReleaseOnCancel hands the Lease over on shutdown instead of letting
	// it expire.
	LeaderElectionReleaseOnCancel bool
	// Namespaces limits the informer caches to these namespaces; empty caches all.
	Namespaces []string
	// PodTransform, when set, is the pod informer's transform in place of the
	// managedFields strip every other object gets: it must drop managedFields itself
	// (workload.SlimPod does, for the recommender). The updater leaves it nil: it reads
	// and writes whole pods.
	PodTransform toolscache.TransformFunc
}

// New makes klog controller-runtime's logger, loads the kubeconfig (--kubeconfig,
// $KUBECONFIG, in-cluster, ~/.kube/config) and builds the manager with scheme.New, the
// options, a /healthz ping and a /readyz check that the informer caches have synced.
// Errors are the kubeconfig's, the manager's and the checks' registration.
func New(o Options) (ctrl.Manager, error) {
	ctrl.SetLogger(klog.NewKlogr())
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	opts := ctrl.Options{
		Scheme:                        s,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: o.LeaderElectionReleaseOnCancel,
	}
	opts.Cache = cacheOptions(o.Namespaces, o.PodTransform)
	mgr, err := ctrl.NewManager(restCfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// ScaleChecker returns a workload.ScaleChecker over mgr's API reader and RESTMapper and
// a client of the scale subresource of any kind (discovered through mgr's config). Its
// error is the discovery client's.
func ScaleChecker(mgr ctrl.Manager) (workload.ScaleChecker, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	scales := scale.New(dc.RESTClient(), mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(dc))
	return workload.NewScaleChecker(mgr.GetAPIReader(), mgr.GetRESTMapper(), scales), nil
}

// cacheOptions returns the informer cache's options: only the given namespaces when any
// (all otherwise), pods through podTransform when not nil, and every other object stored
// without metadata.managedFields, which no
// gpufrac controller reads (status and pod writes are merge patches and updates that
// leave managedFields to the API server). Measured by make bench-scale: at 10,000 pods
// the cached pods' managedFields were 18 MB of the recommender's 198 MB in-use heap
// (docs/benchmarks.md).
func cacheOptions(namespaces []string, podTransform toolscache.TransformFunc) cache.Options {
	var c cache.Options
	if len(namespaces) > 0 {
		c.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range namespaces {
			c.DefaultNamespaces[n] = cache.Config{}
		}
	}
	c.DefaultTransform = cache.TransformStripManagedFields()
	if podTransform != nil {
		c.ByObject = map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: podTransform}}
	}
	return c
}

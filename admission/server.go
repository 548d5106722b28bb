package admission

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	gpufracscheme "github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/internal/served"
	"github.com/gpufrac/gpufrac/statuslease"
)

// Options configures a whole admission server (NewServer).
type Options struct {
	// Config is the mutating webhook's configuration.
	Config Config
	// Namespace is gpufrac's own namespace: the certificate Secret and the status Lease
	// live there, and its pods are never sent to the webhook. Required.
	Namespace string
	// Identity names this replica in the status Lease. Default: statuslease.Renewer's
	// ($POD_NAME, else the host name).
	Identity string
	// Host is the webhook server's listen host (default all addresses).
	Host string
	// Port is the webhook server's port. Default 9443.
	Port int
	// MetricsAddr is the /metrics address ("0" disables). ProbeAddr serves /healthz and
	// /readyz ("0" disables).
	MetricsAddr, ProbeAddr string
	// PprofAddr serves Go's /debug/pprof/ profiles; "" or "0" (the default) disables
	// them.
	PprofAddr string

	// CertDir, when set, holds externally managed tls.crt and tls.key (for example a
	// cert-manager Secret mounted as a volume), reloaded when they change; the
	// self-managed CA is then off. CAFile, optional with CertDir, is the PEM CA written
	// into the webhook configurations' caBundle (without it the caBundle there is kept,
	// for cert-manager's CA injector).
	CertDir, CAFile string
	// CertSecret is the Secret of the self-managed CA and certificate. Default
	// gpufrac-admission-tls.
	CertSecret string
	// CertDNSNames and CertIPs are extra names of the self-managed serving certificate
	// (the Service's DNS names and the URL's host are always included).
	CertDNSNames []string
	// CertIPs are extra IP addresses of the self-managed serving certificate.
	CertIPs []net.IP
	// CAValidity, CertValidity and CertCheckInterval: see CertManager.
	CAValidity, CertValidity, CertCheckInterval time.Duration

	// Register makes the server create and update its webhook configurations
	// (Registration) with the CA bundle.
	Register bool
	// Registration describes them; Client and Namespace are filled in.
	Registration Registration
	// RegistrationInterval is how often the configurations are re-checked when certs
	// are external. Default 1m (with self-managed certs they are checked with the
	// certificate, every CertCheckInterval).
	RegistrationInterval time.Duration

	// LeaseName is the status Lease's name. Default statuslease.DefaultName.
	LeaseName string
	// LeaseRenewInterval is the status Lease's renewal period. Default 10s.
	LeaseRenewInterval time.Duration
	// DisableLease turns the status Lease off (the updater then never evicts).
	DisableLease bool

	// GracefulShutdownTimeout bounds the shutdown of all runnables. Default 30s.
	GracefulShutdownTimeout time.Duration
	// ShutdownDelay is how long everything keeps running, the webhook server serving,
	// after Start's context ends (SIGTERM) and before the shutdown begins, while the
	// pod's endpoint is removed from the Service. Default 0 (stop at once).
	ShutdownDelay time.Duration
}

// Server is a configured admission server: a controller-runtime manager with the
// webhook server, informer caches, certificates, webhook registration and status Lease.
type Server struct {
	// Manager runs everything; Start starts it.
	Manager manager.Manager
	// Mutator and Validator are the two admission handlers.
	Mutator *Mutator
	// Validator is the GPUFractionAutoscaler handler.
	Validator *Validator
	// Certs is the self-managed certificate manager, nil with external certificates.
	Certs *CertManager
	// Registration is the webhook registration, nil unless Options.Register.
	Registration *Registration
	// Lease is the status Lease, nil when disabled.
	Lease *statuslease.Renewer

	// external serves the certificate of Options.CertDir (reloaded when the files
	// change), nil with the self-managed one; readiness requires it unexpired.
	external *certwatcher.CertWatcher
	// shutdownDelay is Options.ShutdownDelay; after waits for it (time.After when nil).
	shutdownDelay time.Duration
	after         func(time.Duration) <-chan time.Time

	synced  atomic.Bool
	regErr  atomic.Pointer[error]
	serving atomic.Bool            // the webhook server listens: registration may start
	bundle  atomic.Pointer[[]byte] // the CA bundle to register, latest first
	// regMu serialises registrations: registerWhenServing and the certificate check's
	// reconcile may register at the same moment, and two concurrent read-modify-writes
	// of one configuration conflict; the loser's error, recorded for readiness, kept
	// the process unready until the next check (--cert-check-interval, 1m).
	regMu sync.Mutex
}

// NewServer builds the manager and everything the admission server runs, and loads (or
// creates) the self-managed certificate before it returns, so the webhook serves from
// its first request. Errors are configuration, API (certificate Secret) and manager
// errors.
func NewServer(ctx context.Context, restCfg *rest.Config, o Options) (*Server, error) {
	if err := o.complete(); err != nil {
		return nil, err
	}
	if err := Register(ctrlmetrics.Registry); err != nil {
		return nil, err
	}
	scheme, err := gpufracscheme.New()
	if err != nil {
		return nil, err
	}
	direct, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	s := &Server{shutdownDelay: o.ShutdownDelay}
	if o.Register {
		r := o.Registration
		r.Client = direct
		r.Namespace = o.Namespace
		if err := r.Validate(); err != nil {
			return nil, err
		}
		s.Registration = &r
	}
	tlsOpts, err := s.loadCerts(ctx, direct, o)
	if err != nil {
		return nil, err
	}
	mgr, err := newManager(restCfg, scheme, o, tlsOpts)
	if err != nil {
		return nil, err
	}
	s.Manager = mgr
	if err := s.addInformers(ctx); err != nil {
		return nil, err
	}
	if err := s.addWebhooks(ctx, scheme, o.Config); err != nil {
		return nil, err
	}
	started := mgr.GetWebhookServer().StartedChecker()
	if err := s.addRegistration(o, func() error { return started(nil) }); err != nil {
		return nil, err
	}
	ready := func() error { return s.ready(func() error { return started(nil) }) }
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", func(*http.Request) error { return ready() }); err != nil {
		return nil, err
	}
	if !o.DisableLease {
		s.Lease = &statuslease.Renewer{
			Client: direct, Namespace: o.Namespace, Name: o.LeaseName, Identity: o.Identity,
			RenewInterval: o.LeaseRenewInterval, Ready: ready, Observe: observeLease,
		}
		if err := mgr.Add(s.Lease); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// complete validates o and fills in its defaults.
func (o *Options) complete() error {
	o.Config = o.Config.WithDefaults()
	if err := o.Config.Validate(); err != nil {
		return err
	}
	if o.Namespace == "" {
		return errors.New("admission: Options.Namespace is required")
	}
	o.Port = cmp.Or(o.Port, 9443)
	o.CertSecret = cmp.Or(o.CertSecret, "gpufrac-admission-tls")
	return nil
}

// loadCerts returns the webhook server's TLS options. Without o.CertDir it loads (or
// creates) the self-managed certificate first and sets s.Certs; its error is then the
// certificate Secret's.
func (s *Server) loadCerts(ctx context.Context, direct client.Client, o Options) ([]func(*tls.Config), error) {
	var tlsOpts []func(*tls.Config)
	if o.CertDir == "" {
		cm := &CertManager{
			Client: direct, Namespace: o.Namespace, SecretName: o.CertSecret,
			CAValidity: o.CAValidity, CertValidity: o.CertValidity, CheckInterval: o.CertCheckInterval,
		}
		cm.DNSNames, cm.IPAddresses = certNames(o)
		if s.Registration != nil {
			cm.OnBundle = s.reconcile
		}
		if err := cm.Ensure(ctx); err != nil {
			return nil, fmt.Errorf("webhook certificate: %w", err)
		}
		s.Certs = cm
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.GetCertificate = cm.GetCertificate })
	} else {
		// The watcher controller-runtime's webhook server would start for CertDir, made
		// here so readiness can see the certificate served (an expired one: unready).
		cw, err := certwatcher.New(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("webhook certificate in %s: %w", o.CertDir, err)
		}
		s.external = cw
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.GetCertificate = cw.GetCertificate })
	}
	return append(tlsOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }), nil
}

// newManager returns the controller-runtime manager with the webhook server, the
// metrics and probe servers of o.
func newManager(restCfg *rest.Config, scheme *runtime.Scheme, o Options, tlsOpts []func(*tls.Config)) (manager.Manager, error) {
	mgr, err := manager.New(restCfg, manager.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: cmp.Or(o.MetricsAddr, ":8080")},
		HealthProbeBindAddress:  cmp.Or(o.ProbeAddr, ":8081"),
		PprofBindAddress:        o.PprofAddr,
		WebhookServer:           webhook.NewServer(webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir, TLSOpts: tlsOpts}),
		Cache:                   cache.Options{ReaderFailOnMissingInformer: true},
		GracefulShutdownTimeout: ptr.To(orDefaultDuration(o.GracefulShutdownTimeout, 30*time.Second)),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// addInformers creates the informers used on the request path now, so no read ever
// starts one, and a runnable that marks the server synced once they are.
func (s *Server) addInformers(ctx context.Context) error {
	mgr := s.Manager
	if err := AddIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &gpufracv1.GPUFractionRecommendation{}); err != nil {
		return err
	}
	for _, gvk := range intermediateOwners {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return err
		}
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			s.synced.Store(true)
			klog.FromContext(ctx).Info("Informer caches synced")
		}
		<-ctx.Done()
		return nil
	}))
}

// addWebhooks makes the Mutator of cfg and the Validator, and registers both handlers
// on the webhook server.
func (s *Server) addWebhooks(ctx context.Context, scheme *runtime.Scheme, cfg Config) error {
	mgr := s.Manager
	// The dra backend reads templates from the API server (no informer over every
	// template of the cluster) and creates them (RBAC: get, create resourceclaimtemplates).
	cfg.DRA.Templates = backend.ClientClaimTemplates{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}
	// nvidia-timeslicing and nvidia-mps list GPUSharingPolicies: from an informer when
	// the API server serves the kind (RBAC: get, list, watch gpusharingpolicies), else
	// from the API server (a cluster without the CRD still starts; each list fails and
	// device-plugin pods are admitted unchanged, as when no plan applies).
	var err error
	if cfg.DevicePlugin.Policies, err = policyReader(ctx, mgr); err != nil {
		return err
	}
	s.Mutator = NewMutator(mgr.GetCache(), scheme, cfg)
	s.Mutator.Events = mgr.GetEventRecorder("gpufrac-admission")
	s.Mutator.Synced = s.synced.Load
	s.Validator = NewValidator(mgr.GetCache(), mgr.GetRESTMapper(), scheme)
	srv := mgr.GetWebhookServer()
	srv.Register(MutatePodsPath, podWebhook(s.Mutator))
	srv.Register(ValidateAutoscalerPath, instrument(WebhookValidateAutoscaler, &webhook.Admission{Handler: s.Validator}))
	return nil
}

// addRegistration adds the runnables that keep the certificate and the webhook
// configurations current: the certificate manager, or the watcher of the external
// certificate files; with external certificates and o.Register, a loop that registers
// o.CAFile's bundle every o.RegistrationInterval; and with o.Register, the first
// registration once started reports the webhook server listening. Its error is the CA
// file's or the manager's.
func (s *Server) addRegistration(o Options, started func() error) error {
	mgr := s.Manager
	if s.external != nil {
		// Reloads Options.CertDir's files when they change (cert-manager's renewal).
		if err := mgr.Add(s.external); err != nil {
			return err
		}
	}
	if s.Certs != nil {
		if err := mgr.Add(s.Certs); err != nil {
			return err
		}
	} else if s.Registration != nil {
		var bundle []byte
		if o.CAFile != "" {
			var err error
			if bundle, err = os.ReadFile(o.CAFile); err != nil {
				return fmt.Errorf("CA file: %w", err)
			}
		}
		if err := mgr.Add(s.reregister(bundle, orDefaultDuration(o.RegistrationInterval, time.Minute))); err != nil {
			return err
		}
	}
	if s.Registration == nil {
		return nil
	}
	// Register only once this process's webhook server listens: a taken port (or any
	// start failure) must not leave configurations pointing at a dead URL.
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return s.registerWhenServing(ctx, started, 250*time.Millisecond)
	}))
}

// reregister returns a runnable that registers the webhook configurations with bundle
// now and then every period until its context ends, logging each failure.
func (s *Server) reregister(bundle []byte, every time.Duration) manager.RunnableFunc {
	return func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if err := s.reconcile(ctx, bundle); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Registering the webhooks")
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// ready is the server's readiness (the readyz check and the status Lease's): caches
// synced, the serving certificate (self-managed or Options.CertDir's) loaded and not
// expired, the configurations registered (with Options.Register) and the webhook server
// started.
func (s *Server) ready(started func() error) error {
	if !s.synced.Load() {
		return errors.New("informer caches not synced")
	}
	if s.Certs != nil {
		if err := s.Certs.Loaded(); err != nil {
			return err
		}
	}
	if s.external != nil {
		if err := unexpired(s.external.GetCertificate, time.Now()); err != nil {
			return err
		}
	}
	if s.Registration != nil {
		if p := s.regErr.Load(); p == nil || *p != nil {
			return errors.New("webhook configurations not registered yet")
		}
	}
	return started()
}

// policyReader is the reader of GPUSharingPolicies: the manager's cache, with the
// informer created now, when the API server serves the kind (internal/served); else the
// API reader. Errors: discovery's (whether the kind is served is unknown) and the
// informer's.
func policyReader(ctx context.Context, mgr manager.Manager) (client.Reader, error) {
	gvk := gpufracv1.GroupVersion.WithKind("GPUSharingPolicy")
	ok, err := served.Kind(mgr.GetRESTMapper(), gvk)
	if err != nil {
		return nil, err
	}
	if !ok {
		klog.FromContext(ctx).Info("Kind not served (CRD not installed): GPUSharingPolicies are listed from the API server", "kind", gvk.String())
		return mgr.GetAPIReader(), nil
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &gpufracv1.GPUSharingPolicy{}); err != nil {
		return nil, err
	}
	return mgr.GetCache(), nil
}

// podWebhook is the HTTP handler of MutatePodsPath: m's own ServeHTTP (typed decoding,
// reused buffers) on long-lived goroutines (onWorkers), measured by instrument.
func podWebhook(m *Mutator) http.Handler {
	return instrument(WebhookMutatePods, onWorkers(m))
}

// Start runs the server until ctx ends and then for Options.ShutdownDelay, then shuts
// down gracefully: the webhook server finishes in-flight requests and the status Lease
// is released. It returns the manager's error. When the manager fails (for example the
// webhook port is taken), the webhook configurations are removed unless another replica
// is serving (CleanUp).
func (s *Server) Start(ctx context.Context) error {
	mctx, stop := s.delayed(ctx)
	defer stop()
	err := s.Manager.Start(mctx)
	if err != nil && s.Registration != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if deleted, cerr := s.CleanUp(cctx); cerr != nil {
			errorsTotal.WithLabelValues("registration").Inc()
			err = errors.Join(err, fmt.Errorf("removing the webhook configurations: %w", cerr))
		} else if deleted {
			klog.FromContext(ctx).Info("Webhook configurations removed after a failed start", "name", s.Registration.Name)
		}
	}
	return err
}

// delayed returns the manager's context: one that ends shutdownDelay after ctx does (at
// once without a delay), so the webhook server keeps answering the API server while the
// pod's endpoint is removed from the Service, instead of refusing calls that
// failurePolicy Ignore then admits unchanged. The returned function ends it early (the
// manager returned by itself).
func (s *Server) delayed(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.shutdownDelay <= 0 {
		return ctx, func() {}
	}
	after := s.after
	if after == nil {
		after = time.After
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-mctx.Done():
			return
		case <-ctx.Done():
		}
		klog.FromContext(ctx).Info("Shutting down after the shutdown delay; serving until then", "delay", s.shutdownDelay)
		select {
		case <-after(s.shutdownDelay):
		case <-mctx.Done():
		}
		cancel()
	}()
	return mctx, cancel
}

// CleanUp removes the webhook configurations after a failure, so the API server does
// not keep calling a URL nobody serves, unless another replica is serving: its status
// Lease is held by another identity and was renewed within 3 × the renewal period.
// Without a status Lease (DisableLease) it cannot tell, and removes them only when
// this process created them. It reports whether it removed them.
func (s *Server) CleanUp(ctx context.Context) (bool, error) {
	if s.Registration == nil {
		return false, nil
	}
	if s.Lease == nil {
		if !s.Registration.Created() {
			return false, nil
		}
		return true, s.Registration.Delete(ctx)
	}
	if other, err := s.Lease.HeldByOther(ctx); err != nil || other {
		return false, err // another replica serves, or we cannot tell
	}
	return true, s.Registration.Delete(ctx)
}

// registerWhenServing waits until started (the webhook server's StartedChecker, which
// passes only after this process's listener is open) returns nil, polling every
// interval, then registers the configurations with the latest CA bundle. Later bundle
// changes register directly (reconcile).
func (s *Server) registerWhenServing(ctx context.Context, started func() error, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for started() != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	s.serving.Store(true)
	if err := s.register(ctx); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Registering the webhooks; retried with the next check")
	}
	return nil
}

// Synced reports whether the informer caches have synced.
func (s *Server) Synced() bool { return s.synced.Load() }

// reconcile records the CA bundle to register and registers it once the webhook
// server listens (before that it only records it: registerWhenServing registers).
func (s *Server) reconcile(ctx context.Context, bundle []byte) error {
	s.bundle.Store(&bundle)
	if !s.serving.Load() {
		return nil
	}
	return s.register(ctx)
}

// register creates or updates the configurations with the latest recorded bundle.
func (s *Server) register(ctx context.Context) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	var bundle []byte
	if p := s.bundle.Load(); p != nil {
		bundle = *p
	}
	// Another writer of the same configurations (a replica, or a webhook process being
	// replaced) makes the read-modify-write conflict: read again and retry (client-go's
	// DefaultRetry backoff) rather than stay unready until the next certificate check.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return s.Registration.Reconcile(ctx, bundle) })
	if err != nil {
		errorsTotal.WithLabelValues("registration").Inc()
	}
	s.regErr.Store(&err)
	return err
}

// certNames returns the self-managed certificate's names: the Service's DNS names, the
// webhook URL's host, and the extra names.
func certNames(o Options) ([]string, []net.IP) {
	var dns []string
	var ips []net.IP
	add := func(h string) {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else if h != "" {
			dns = append(dns, h)
		}
	}
	if svc := o.Registration.Service; svc != nil {
		add(svc.Name + "." + svc.Namespace + ".svc")
		add(svc.Name + "." + svc.Namespace + ".svc.cluster.local")
	}
	if u, err := url.Parse(o.Registration.URL); err == nil && u.Hostname() != "" {
		add(u.Hostname())
	}
	dns = append(dns, o.CertDNSNames...)
	ips = append(ips, o.CertIPs...)
	if len(dns) == 0 && len(ips) == 0 {
		add("gpufrac-admission." + o.Namespace + ".svc")
	}
	return dns, ips
}

func orDefaultDuration(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

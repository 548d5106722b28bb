// Command admission runs gpufrac's admission webhook: a mutating webhook that writes the
// recommended GPU fraction into new pods through the autoscaler's backend, and a
// validating webhook for GPUFractionAutoscalers. See docs/admission.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	// Time zones of resize windows must load in minimal images without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/gpufrac/gpufrac/admission"
	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap"
	"github.com/gpufrac/gpufrac/statuslease"
)

func main() { bootstrap.Main("admission", run) }

// rawFlags are the flags of cmd/admission that complete parses into admission.Options.
type rawFlags struct {
	certDNS, certIPs, service, excludeNS, validateFail string
	servicePort, timeout                               int
}

// parseFlags registers the webhook's flags on fs, parses args and checks them. Its
// errors name the flag.
func parseFlags(fs *flag.FlagSet, args []string) (*admission.Options, error) {
	var o admission.Options
	f := addFlags(fs, &o)
	klog.InitFlags(fs)
	if err := bootstrap.Parse(fs, args); err != nil { // a bad flag: its error and a --help hint, not every flag
		return nil, err
	}
	if o.Namespace == "" {
		return nil, fmt.Errorf("--namespace (or $POD_NAMESPACE) is required")
	}
	if err := checkRanges(fs, o); err != nil {
		return nil, err
	}
	return f.complete(o)
}

// checkRanges refuses the values the server would otherwise replace with its default
// without a word (a period, lifetime, timeout or port of 0 or below; a negative
// --shutdown-delay), and certificate lifetimes so short that a certificate expires
// between two checks: a certificate is renewed with a third of its lifetime left, so
// that third must be longer than --cert-check-interval. Each error names its flags.
func checkRanges(fs *flag.FlagSet, o admission.Options) error {
	errs := []error{
		bootstrap.Positive(fs, "ca-validity", "cert-validity", "cert-check-interval", "status-lease-renew-interval",
			"graceful-shutdown-timeout", "webhook-port", "service-port"),
		bootstrap.NonNegative(fs, "shutdown-delay"),
	}
	if o.CertCheckInterval > 0 {
		for _, v := range []struct {
			name string
			d    time.Duration
		}{{"ca-validity", o.CAValidity}, {"cert-validity", o.CertValidity}} {
			if v.d > 0 && v.d <= 3*o.CertCheckInterval {
				errs = append(errs, fmt.Errorf("--%s %s: want more than 3 × --cert-check-interval %s (renewed with a third of it left, so a check must fall in that third)", v.name, v.d, o.CertCheckInterval))
			}
		}
	}
	return errors.Join(errs...)
}

// addFlags registers the webhook's flags on fs: those of admission.Options into o, the
// others into the returned rawFlags.
func addFlags(fs *flag.FlagSet, o *admission.Options) *rawFlags {
	f := &rawFlags{}
	fs.StringVar(&f.certDNS, "cert-dns-names", "", "Extra DNS names of the self-managed serving certificate, comma-separated.")
	fs.StringVar(&f.certIPs, "cert-ip-addresses", "", "Extra IP addresses of the self-managed serving certificate, comma-separated.")
	fs.StringVar(&f.service, "service", "", "Register the webhooks through this Service (name in --namespace, or namespace/name); empty uses --webhook-url.")
	fs.IntVar(&f.servicePort, "service-port", 443, "Port of --service.")
	fs.StringVar(&f.excludeNS, "exclude-namespaces", "", "More namespaces whose pods are never sent to the webhook, comma-separated (kube-system and --namespace always are).")
	fs.StringVar(&f.validateFail, "validating-failure-policy", string(admissionregistrationv1.Ignore), "Failure policy of the autoscaler validating webhook: Ignore or Fail (the pod webhook is always Ignore).")
	fs.IntVar(&f.timeout, "webhook-timeout", 2, fmt.Sprintf("Timeout of each webhook, seconds, 1–%d.", admission.MaxTimeoutSeconds))
	o.Config.AddFlags(fs)
	fs.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "gpufrac's namespace: certificate Secret, status Lease; its pods are never mutated (default $POD_NAMESPACE).")
	fs.StringVar(&o.Identity, "identity", os.Getenv("POD_NAME"), "Name of this replica in the status Lease (default $POD_NAME, else the host name).")
	fs.StringVar(&o.Host, "webhook-host", "", "Address the webhook server listens on (default all).")
	fs.IntVar(&o.Port, "webhook-port", 9443, "Port the webhook server listens on.")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address of /metrics (\"0\" disables it).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz (\"0\" disables them).")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof/ profiles (\"0\" disables them; keep it on loopback: profiles expose memory contents).")
	fs.StringVar(&o.CertDir, "cert-dir", "", "Directory with externally managed tls.crt and tls.key (e.g. from cert-manager); empty uses the self-managed CA in --cert-secret.")
	fs.StringVar(&o.CAFile, "ca-file", "", "With --cert-dir: PEM CA written into the webhook configurations' caBundle (empty keeps theirs, e.g. cert-manager's injected one).")
	fs.StringVar(&o.CertSecret, "cert-secret", "gpufrac-admission-tls", "Secret in --namespace holding the self-managed CA and serving certificate.")
	fs.DurationVar(&o.CAValidity, "ca-validity", 10*365*24*time.Hour, "Lifetime of the self-managed CA; renewed with a third of it left.")
	fs.DurationVar(&o.CertValidity, "cert-validity", 365*24*time.Hour, "Lifetime of the self-managed serving certificate; renewed with a third of it left.")
	fs.DurationVar(&o.CertCheckInterval, "cert-check-interval", time.Minute, "Period of certificate (and, with self-managed certs, webhook configuration) checks.")
	fs.BoolVar(&o.Register, "register-webhooks", false, "Create and update the MutatingWebhookConfiguration and ValidatingWebhookConfiguration (with the CA bundle).")
	fs.StringVar(&o.Registration.Name, "webhook-config-name", "gpufrac-admission", "Name of both webhook configurations.")
	fs.StringVar(&o.Registration.URL, "webhook-url", "", "Base URL the API server calls when --service is empty, e.g. https://127.0.0.1:9443.")
	fs.StringVar(&o.Registration.NamespaceLabelSelector, "namespace-label-selector", "", "Only namespaces matching this label selector (e.g. gpufrac.io/enabled=true) are sent to the webhooks; empty means all but the excluded ones.")
	fs.StringVar(&o.Registration.InjectCAFrom, "cert-manager-inject-ca-from", "", "namespace/certificate for cert-manager's CA injector annotation on the webhook configurations.")
	fs.StringVar(&o.LeaseName, "status-lease-name", statuslease.DefaultName, "Name of the status Lease in --namespace that the updater requires fresh before evicting.")
	fs.DurationVar(&o.LeaseRenewInterval, "status-lease-renew-interval", 10*time.Second, "Renewal period of the status Lease.")
	fs.BoolVar(&o.DisableLease, "disable-status-lease", false, "Do not keep the status Lease (the updater then never evicts).")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "How long shutdown waits for in-flight requests and runnables.")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", 0, "How long to keep serving after SIGTERM before shutting down, while the pod's endpoint is removed from the Service (0: stop at once).")
	return f
}

// complete parses f into o's certificate names, Service and registration, and fills
// o's defaults.
func (f *rawFlags) complete(o admission.Options) (*admission.Options, error) {
	o.CertDNSNames = bootstrap.SplitList(f.certDNS)
	for _, s := range bootstrap.SplitList(f.certIPs) {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("--cert-ip-addresses: %q is not an IP address", s)
		}
		o.CertIPs = append(o.CertIPs, ip)
	}
	if f.service != "" {
		ns, name := o.Namespace, f.service
		if a, b, ok := strings.Cut(f.service, "/"); ok {
			ns, name = a, b
		}
		o.Registration.Service = &admission.ServiceReference{Namespace: ns, Name: name, Port: int32(f.servicePort)}
	}
	if f.timeout < 1 || f.timeout > admission.MaxTimeoutSeconds {
		return nil, fmt.Errorf("--webhook-timeout %d: want 1–%d seconds", f.timeout, admission.MaxTimeoutSeconds)
	}
	o.Registration.TimeoutSeconds = int32(f.timeout)
	o.Registration.ValidatingFailurePolicy = admissionregistrationv1.FailurePolicyType(f.validateFail)
	o.Registration.ExcludeNamespaces = bootstrap.SplitList(f.excludeNS)
	o.Config = o.Config.WithDefaults()
	// The waits of one pod request must fit the timeout the API server gives the call.
	if err := o.Config.CheckTimeout(o.Registration.TimeoutSeconds); err != nil {
		return nil, err
	}
	// The match conditions send exactly the pods the handler treats as GPU pods.
	o.Registration.GPUResourcePrefix = o.Config.GPUResourcePrefix
	o.Registration.KAIAnnotations = []string{o.Config.KAI.FractionAnnotation, o.Config.KAI.MemoryAnnotation}

	return &o, nil
}

func run() error {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr())
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	srv, err := admission.NewServer(ctx, restCfg, *o)
	if err != nil {
		return err
	}
	return srv.Start(ctx)
}

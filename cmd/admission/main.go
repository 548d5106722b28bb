// Command admission runs gpufrac's admission webhook: a mutating webhook that writes the
// recommended GPU fraction into new pods through the autoscaler's backend, and a
// validating webhook for GPUFractionAutoscalers. See docs/admission.md.
package main

import (
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

func run() error {
	var (
		o            admission.Options
		certDNS      = flag.String("cert-dns-names", "", "Extra DNS names of the self-managed serving certificate, comma-separated.")
		certIPs      = flag.String("cert-ip-addresses", "", "Extra IP addresses of the self-managed serving certificate, comma-separated.")
		service      = flag.String("service", "", "Register the webhooks through this Service (name in --namespace, or namespace/name); empty uses --webhook-url.")
		servicePort  = flag.Int("service-port", 443, "Port of --service.")
		excludeNS    = flag.String("exclude-namespaces", "", "More namespaces whose pods are never sent to the webhook, comma-separated (kube-system and --namespace always are).")
		validateFail = flag.String("validating-failure-policy", string(admissionregistrationv1.Ignore), "Failure policy of the autoscaler validating webhook: Ignore or Fail (the pod webhook is always Ignore).")
		timeout      = flag.Int("webhook-timeout", 2, fmt.Sprintf("Timeout of each webhook, seconds, 1–%d.", admission.MaxTimeoutSeconds))
	)
	o.Config.AddFlags(flag.CommandLine)
	flag.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "gpufrac's namespace: certificate Secret, status Lease; its pods are never mutated (default $POD_NAMESPACE).")
	flag.StringVar(&o.Identity, "identity", os.Getenv("POD_NAME"), "Name of this replica in the status Lease (default $POD_NAME, else the host name).")
	flag.StringVar(&o.Host, "webhook-host", "", "Address the webhook server listens on (default all).")
	flag.IntVar(&o.Port, "webhook-port", 9443, "Port the webhook server listens on.")
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address of /metrics (\"0\" disables it).")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz (\"0\" disables them).")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof/ profiles (\"0\" disables them; keep it on loopback: profiles expose memory contents).")
	flag.StringVar(&o.CertDir, "cert-dir", "", "Directory with externally managed tls.crt and tls.key (e.g. from cert-manager); empty uses the self-managed CA in --cert-secret.")
	flag.StringVar(&o.CAFile, "ca-file", "", "With --cert-dir: PEM CA written into the webhook configurations' caBundle (empty keeps theirs, e.g. cert-manager's injected one).")
	flag.StringVar(&o.CertSecret, "cert-secret", "gpufrac-admission-tls", "Secret in --namespace holding the self-managed CA and serving certificate.")
	flag.DurationVar(&o.CAValidity, "ca-validity", 10*365*24*time.Hour, "Lifetime of the self-managed CA; renewed with a third of it left.")
	flag.DurationVar(&o.CertValidity, "cert-validity", 365*24*time.Hour, "Lifetime of the self-managed serving certificate; renewed with a third of it left.")
	flag.DurationVar(&o.CertCheckInterval, "cert-check-interval", time.Minute, "Period of certificate (and, with self-managed certs, webhook configuration) checks.")
	flag.BoolVar(&o.Register, "register-webhooks", false, "Create and update the MutatingWebhookConfiguration and ValidatingWebhookConfiguration (with the CA bundle).")
	flag.StringVar(&o.Registration.Name, "webhook-config-name", "gpufrac-admission", "Name of both webhook configurations.")
	flag.StringVar(&o.Registration.URL, "webhook-url", "", "Base URL the API server calls when --service is empty, e.g. https://127.0.0.1:9443.")
	flag.StringVar(&o.Registration.NamespaceLabelSelector, "namespace-label-selector", "", "Only namespaces matching this label selector (e.g. gpufrac.io/enabled=true) are sent to the webhooks; empty means all but the excluded ones.")
	flag.StringVar(&o.Registration.InjectCAFrom, "cert-manager-inject-ca-from", "", "namespace/certificate for cert-manager's CA injector annotation on the webhook configurations.")
	flag.StringVar(&o.LeaseName, "status-lease-name", statuslease.DefaultName, "Name of the status Lease in --namespace that the updater requires fresh before evicting.")
	flag.DurationVar(&o.LeaseRenewInterval, "status-lease-renew-interval", 10*time.Second, "Renewal period of the status Lease.")
	flag.BoolVar(&o.DisableLease, "disable-status-lease", false, "Do not keep the status Lease (the updater then never evicts).")
	flag.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "How long shutdown waits for in-flight requests and runnables.")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()

	if o.Namespace == "" {
		return fmt.Errorf("--namespace (or $POD_NAMESPACE) is required")
	}
	o.CertDNSNames = bootstrap.SplitList(*certDNS)
	for _, s := range bootstrap.SplitList(*certIPs) {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("--cert-ip-addresses: %q is not an IP address", s)
		}
		o.CertIPs = append(o.CertIPs, ip)
	}
	if *service != "" {
		ns, name := o.Namespace, *service
		if a, b, ok := strings.Cut(*service, "/"); ok {
			ns, name = a, b
		}
		o.Registration.Service = &admission.ServiceReference{Namespace: ns, Name: name, Port: int32(*servicePort)}
	}
	if *timeout < 1 || *timeout > admission.MaxTimeoutSeconds {
		return fmt.Errorf("--webhook-timeout %d: want 1–%d seconds", *timeout, admission.MaxTimeoutSeconds)
	}
	o.Registration.TimeoutSeconds = int32(*timeout)
	o.Registration.ValidatingFailurePolicy = admissionregistrationv1.FailurePolicyType(*validateFail)
	o.Registration.ExcludeNamespaces = bootstrap.SplitList(*excludeNS)
	o.Config = o.Config.WithDefaults()
	// The match conditions send exactly the pods the handler treats as GPU pods.
	o.Registration.GPUResourcePrefix = o.Config.GPUResourcePrefix
	o.Registration.KAIAnnotations = []string{o.Config.KAI.FractionAnnotation, o.Config.KAI.MemoryAnnotation}

	ctrl.SetLogger(klog.NewKlogr())
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	srv, err := admission.NewServer(ctx, restCfg, o)
	if err != nil {
		return err
	}
	return srv.Start(ctx)
}

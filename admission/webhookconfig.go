package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// HTTP paths of the webhooks on the webhook server.
const (
	// MutatePodsPath serves the pod webhook (Mutator).
	MutatePodsPath = "/mutate-v1-pod"
	// ValidateAutoscalerPath serves the GPUFractionAutoscaler webhook (Validator).
	ValidateAutoscalerPath = "/validate-gpufractionautoscaler"
)

// Names of the webhooks inside the configurations.
const (
	// MutatingWebhookName is the pod webhook's name (also the "name" label of the API
	// server's apiserver_admission_webhook_* metrics).
	MutatingWebhookName = "pods.admission.gpufrac.io"
	// ValidatingWebhookName is the GPUFractionAutoscaler webhook's name.
	ValidatingWebhookName = "gpufractionautoscalers.admission.gpufrac.io"
)

// MaxTimeoutSeconds is the longest webhook timeout gpufrac registers: pod creation must
// never wait long for it.
const MaxTimeoutSeconds = 3

// Registration describes the MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration that point the API server at this webhook, and
// creates or updates them (Reconcile).
type Registration struct {
	// Client writes the configurations (cluster-scoped).
	Client client.Client
	// Name of both configurations. Default gpufrac-admission.
	Name string
	// Namespace is gpufrac's own namespace; its pods are never sent to the webhook.
	Namespace string
	// ExcludeNamespaces are more namespaces whose pods are never sent (kube-system
	// always is).
	ExcludeNamespaces []string
	// NamespaceLabelSelector, when set (label selector syntax, e.g.
	// "gpufrac.io/enabled=true"), limits both webhooks to namespaces whose labels match
	// it, on top of the exclusions.
	NamespaceLabelSelector string
	// Service, when set, is the Service in front of the webhook. Otherwise URL is used.
	Service *ServiceReference
	// URL is the webhook server's base URL, e.g. https://127.0.0.1:9443, used when
	// Service is nil; the webhook paths are appended.
	URL string
	// TimeoutSeconds is each webhook's timeout, 1–MaxTimeoutSeconds. Default 2.
	TimeoutSeconds int32
	// ValidatingFailurePolicy is the validating webhook's failure policy. Default Ignore
	// (the CRD's schema and CEL rules still apply while the webhook is down).
	ValidatingFailurePolicy admissionregistrationv1.FailurePolicyType
	// GPUResourcePrefix: only pods with a container request or limit name starting with
	// it (or with KAIAnnotations) are sent. Default "nvidia.com/".
	GPUResourcePrefix string
	// KAIAnnotations are pod annotations that also mark a GPU pod. Default gpu-fraction,
	// gpu-memory.
	KAIAnnotations []string
	// InjectCAFrom, when set (namespace/certificate), adds cert-manager's
	// cert-manager.io/inject-ca-from annotation so cert-manager's CA injector writes the
	// caBundle.
	InjectCAFrom string

	// created is 1 once Reconcile created a configuration (sync/atomic: Reconcile runs
	// from the certificate check and the registration loop).
	created int32
}

// Created reports whether this Registration created either configuration (rather than
// updating one that existed).
func (r *Registration) Created() bool { return atomic.LoadInt32(&r.created) == 1 }

// Delete removes both configurations (absent ones are not an error), so the API server
// stops calling a webhook that no longer serves. It returns the first other API error.
func (r *Registration) Delete(ctx context.Context) error {
	r.defaults()
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: r.Name}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: r.Name}},
	} {
		if err := r.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T %s: %w", obj, r.Name, err)
		}
	}
	return nil
}

// ServiceReference names the Service in front of the webhook.
type ServiceReference struct {
	// Namespace and Name locate the Service.
	Namespace, Name string
	// Port is the Service port. Default 443.
	Port int32
}

func (r *Registration) defaults() {
	if r.Name == "" {
		r.Name = "gpufrac-admission"
	}
	if r.TimeoutSeconds <= 0 {
		r.TimeoutSeconds = 2
	}
	if r.ValidatingFailurePolicy == "" {
		r.ValidatingFailurePolicy = admissionregistrationv1.Ignore
	}
	if r.GPUResourcePrefix == "" {
		r.GPUResourcePrefix = "nvidia.com/"
	}
	if r.KAIAnnotations == nil {
		r.KAIAnnotations = []string{"gpu-fraction", "gpu-memory"}
	}
}

// Validate reports settings that cannot be registered.
func (r *Registration) Validate() error {
	r.defaults()
	if r.TimeoutSeconds > MaxTimeoutSeconds {
		return fmt.Errorf("webhook timeout %ds: at most %ds, so pod creation never waits long for gpufrac", r.TimeoutSeconds, MaxTimeoutSeconds)
	}
	if r.Service == nil && !strings.HasPrefix(r.URL, "https://") {
		return fmt.Errorf("webhook URL %q: want https://host:port (or a Service)", r.URL)
	}
	if _, err := r.selectorBase(); err != nil {
		return err
	}
	if r.ValidatingFailurePolicy != admissionregistrationv1.Ignore && r.ValidatingFailurePolicy != admissionregistrationv1.Fail {
		return fmt.Errorf("validating failure policy %q: want Ignore or Fail", r.ValidatingFailurePolicy)
	}
	return nil
}

func (r *Registration) clientConfig(path string, caBundle []byte) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: caBundle}
	if r.Service != nil {
		port := r.Service.Port
		if port == 0 {
			port = 443
		}
		cc.Service = &admissionregistrationv1.ServiceReference{Namespace: r.Service.Namespace, Name: r.Service.Name, Path: &path, Port: &port}
	} else {
		u := strings.TrimSuffix(r.URL, "/") + path
		cc.URL = &u
	}
	return cc
}

// celString quotes s as a CEL string literal.
func celString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// MatchConditions are the CEL conditions of the pod webhook: the pod asks for a GPU
// resource (a request or limit name with GPUResourcePrefix) in a regular container or a
// native sidecar (an init container with restartPolicy Always), or carries a KAI
// fraction annotation, or uses a Dynamic Resource Allocation claim (spec.resourceClaims:
// the dra backend), and is not excluded with gpufrac.io/exclude=true. An init
// container that runs to completion is not written (docs/admission.md), so it alone
// does not send the pod.
func (r *Registration) MatchConditions() []admissionregistrationv1.MatchCondition {
	r.defaults()
	p := celString(r.GPUResourcePrefix)
	asks := fmt.Sprintf("has(c.resources) && "+
		"((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith(%s))) || "+
		"(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith(%s))))", p, p)
	gpu := fmt.Sprintf("object.spec.containers.exists(c, %s) || "+
		"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.restartPolicy) && c.restartPolicy == 'Always' && %s))", asks, asks)
	gpu += " || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"
	if len(r.KAIAnnotations) > 0 {
		var keys []string
		for _, k := range r.KAIAnnotations {
			keys = append(keys, celString(k)+" in object.metadata.annotations")
		}
		gpu += " || (has(object.metadata.annotations) && (" + strings.Join(keys, " || ") + "))"
	}
	excl := celString(gpufracv1.AnnotationExclude)
	return []admissionregistrationv1.MatchCondition{
		{Name: "requests-gpu", Expression: gpu},
		{Name: "not-excluded", Expression: fmt.Sprintf("!has(object.metadata.annotations) || !(%s in object.metadata.annotations) || object.metadata.annotations[%s] != 'true'", excl, excl)},
	}
}

// selectorBase parses NamespaceLabelSelector (an empty selector when unset).
func (r *Registration) selectorBase() (*metav1.LabelSelector, error) {
	if strings.TrimSpace(r.NamespaceLabelSelector) == "" {
		return &metav1.LabelSelector{}, nil
	}
	sel, err := metav1.ParseToLabelSelector(r.NamespaceLabelSelector)
	if err != nil {
		return nil, fmt.Errorf("namespace label selector %q: %w", r.NamespaceLabelSelector, err)
	}
	return sel, nil
}

// NamespaceSelector of the pod webhook: NamespaceLabelSelector, and never kube-system,
// gpufrac's namespace or ExcludeNamespaces.
func (r *Registration) NamespaceSelector() *metav1.LabelSelector {
	sel, err := r.selectorBase()
	if err != nil { // rejected by Validate
		sel = &metav1.LabelSelector{}
	}
	ns := []string{metav1.NamespaceSystem}
	if r.Namespace != "" && r.Namespace != metav1.NamespaceSystem {
		ns = append(ns, r.Namespace)
	}
	for _, n := range r.ExcludeNamespaces {
		if n != "" && !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
	}
	sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: ns,
	})
	return sel
}

// Mutating returns the desired MutatingWebhookConfiguration: pod CREATE, failurePolicy
// Ignore, TimeoutSeconds, the namespace selector and match conditions, sideEffects
// NoneOnDryRun (events are recorded only for real requests), reinvocation IfNeeded (the
// patch is idempotent).
func (r *Registration) Mutating(caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	r.defaults()
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: r.objectMeta(),
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    MutatingWebhookName,
			ClientConfig:            r.clientConfig(MutatePodsPath, caBundle),
			Rules:                   namespacedRules(corev1.SchemeGroupVersion, "pods", admissionregistrationv1.Create),
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       r.NamespaceSelector(),
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr.To(r.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchConditions:         r.MatchConditions(),
		}},
	}
}

// Validating returns the desired ValidatingWebhookConfiguration: CREATE and UPDATE of
// gpufractionautoscalers, ValidatingFailurePolicy, TimeoutSeconds, sideEffects None.
func (r *Registration) Validating(caBundle []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	r.defaults()
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: r.objectMeta(),
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         ValidatingWebhookName,
			ClientConfig: r.clientConfig(ValidateAutoscalerPath, caBundle),
			Rules: namespacedRules(gpufracv1.GroupVersion, "gpufractionautoscalers",
				admissionregistrationv1.Create, admissionregistrationv1.Update),
			FailurePolicy:           ptr.To(r.ValidatingFailurePolicy),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       r.validatingSelector(),
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(r.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// namespacedRules is the one rule of a webhook: ops on the namespaced resource of gv.
func namespacedRules(gv schema.GroupVersion, resource string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{gv.Group}, APIVersions: []string{gv.Version},
			Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
}

// validatingSelector is NamespaceLabelSelector alone: autoscalers are validated in
// every namespace it selects, gpufrac's own included.
func (r *Registration) validatingSelector() *metav1.LabelSelector {
	sel, err := r.selectorBase()
	if err != nil {
		return &metav1.LabelSelector{}
	}
	return sel
}

func (r *Registration) objectMeta() metav1.ObjectMeta {
	om := metav1.ObjectMeta{Name: r.Name, Labels: map[string]string{"app.kubernetes.io/name": "gpufrac", "app.kubernetes.io/component": "admission"}}
	if r.InjectCAFrom != "" {
		om.Annotations = map[string]string{"cert-manager.io/inject-ca-from": r.InjectCAFrom}
	}
	return om
}

// Reconcile creates both configurations or updates them where they differ from the
// desired ones. A nil caBundle keeps the caBundle already there (set by cert-manager or
// by hand). It returns the first API error.
func (r *Registration) Reconcile(ctx context.Context, caBundle []byte) error {
	r.defaults()
	mw := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: r.Name}}
	err := r.createOrUpdate(ctx, mw, "MutatingWebhookConfiguration", func() {
		want := r.Mutating(caBundle)
		if caBundle == nil {
			keepCABundles(want.Webhooks, mw.Webhooks, mutatingClientConfig)
		}
		mw.Webhooks = want.Webhooks
		mergeMeta(&mw.ObjectMeta, want.ObjectMeta)
	})
	if err != nil {
		return err
	}
	vw := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: r.Name}}
	return r.createOrUpdate(ctx, vw, "ValidatingWebhookConfiguration", func() {
		want := r.Validating(caBundle)
		if caBundle == nil {
			keepCABundles(want.Webhooks, vw.Webhooks, validatingClientConfig)
		}
		vw.Webhooks = want.Webhooks
		mergeMeta(&vw.ObjectMeta, want.ObjectMeta)
	})
}

// createOrUpdate reads obj (a webhook configuration of kind named r.Name), applies the
// wanted state with update and writes only when something changed
// (controllerutil.CreateOrUpdate), noting a creation (Created) and logging a change. It
// returns the API error, naming kind and r.Name.
func (r *Registration) createOrUpdate(ctx context.Context, obj client.Object, kind string, update func()) error {
	res, err := controllerutil.CreateOrUpdate(ctx, r.Client, obj, func() error {
		update()
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", kind, r.Name, err)
	}
	if res == controllerutil.OperationResultCreated {
		atomic.StoreInt32(&r.created, 1)
	}
	if res != controllerutil.OperationResultNone {
		klog.FromContext(ctx).WithName("registration").Info(kind+" "+string(res), "name", r.Name)
	}
	return nil
}

// keepCABundles gives each webhook of want the caBundle of the webhook of the same name
// in cur (certificates managed outside gpufrac: a nil caBundle keeps what is there);
// clientConfig returns a webhook's name and client configuration.
func keepCABundles[W any](want, cur []W, clientConfig func(*W) (string, *admissionregistrationv1.WebhookClientConfig)) {
	have := map[string][]byte{}
	for i := range cur {
		name, cc := clientConfig(&cur[i])
		have[name] = cc.CABundle
	}
	for i := range want {
		name, cc := clientConfig(&want[i])
		if b, ok := have[name]; ok {
			cc.CABundle = b
		}
	}
}

func mutatingClientConfig(w *admissionregistrationv1.MutatingWebhook) (string, *admissionregistrationv1.WebhookClientConfig) {
	return w.Name, &w.ClientConfig
}

func validatingClientConfig(w *admissionregistrationv1.ValidatingWebhook) (string, *admissionregistrationv1.WebhookClientConfig) {
	return w.Name, &w.ClientConfig
}

func mergeMeta(cur *metav1.ObjectMeta, want metav1.ObjectMeta) {
	for k, v := range want.Labels {
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		cur.Labels[k] = v
	}
	for k, v := range want.Annotations {
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[k] = v
	}
}

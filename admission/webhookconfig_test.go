package admission

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestRegistration(t *testing.T) {
	ctx := context.Background()
	c := newFakeReader(t)
	r := &Registration{Client: c, Namespace: "gpufrac-system", URL: "https://127.0.0.1:9443", ExcludeNamespaces: []string{"monitoring"}}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx, []byte("CA1")); err != nil {
		t.Fatal(err)
	}
	mw := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, types.NamespacedName{Name: "gpufrac-admission"}, mw); err != nil {
		t.Fatal(err)
	}
	w := mw.Webhooks[0]
	if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.TimeoutSeconds > MaxTimeoutSeconds || *w.ClientConfig.URL != "https://127.0.0.1:9443"+MutatePodsPath || string(w.ClientConfig.CABundle) != "CA1" {
		t.Errorf("webhook %+v", w)
	}
	ns := w.NamespaceSelector.MatchExpressions[0]
	if ns.Key != "kubernetes.io/metadata.name" || strings.Join(ns.Values, ",") != "kube-system,gpufrac-system,monitoring" {
		t.Errorf("namespace selector %+v", ns)
	}
	if len(w.MatchConditions) != 2 || !strings.Contains(w.MatchConditions[0].Expression, "startsWith('nvidia.com/')") || !strings.Contains(w.MatchConditions[0].Expression, "'gpu-fraction' in object.metadata.annotations") || !strings.Contains(w.MatchConditions[0].Expression, "size(object.spec.resourceClaims) > 0") {
		t.Errorf("match conditions %+v", w.MatchConditions)
	}
	// A GPU held by a native sidecar (an init container with restartPolicy Always)
	// sends the pod too; the prefix is checked there as in spec.containers.
	sidecars := "object.spec.initContainers.exists(c, has(c.restartPolicy) && c.restartPolicy == 'Always' && has(c.resources) && "
	if e := w.MatchConditions[0].Expression; !strings.Contains(e, sidecars) || strings.Count(e, "startsWith('nvidia.com/')") != 4 {
		t.Errorf("match condition without native sidecars: %s", e)
	}
	rv := mw.ResourceVersion
	// Unchanged: no write. New CA bundle: updated.
	if err := r.Reconcile(ctx, []byte("CA1")); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, types.NamespacedName{Name: "gpufrac-admission"}, mw)
	if mw.ResourceVersion != rv {
		t.Error("rewritten without change")
	}
	if err := r.Reconcile(ctx, []byte("CA2")); err != nil {
		t.Fatal(err)
	}
	vw := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	_ = c.Get(ctx, types.NamespacedName{Name: "gpufrac-admission"}, vw)
	if string(vw.Webhooks[0].ClientConfig.CABundle) != "CA2" || vw.Webhooks[0].Rules[0].Resources[0] != "gpufractionautoscalers" {
		t.Errorf("validating webhook %+v", vw.Webhooks[0])
	}
	// A nil bundle (external certificates) keeps the one there.
	if err := r.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, types.NamespacedName{Name: "gpufrac-admission"}, mw)
	if string(mw.Webhooks[0].ClientConfig.CABundle) != "CA2" {
		t.Error("nil bundle erased the caBundle")
	}

	// An opt-in label selector narrows both webhooks; the exclusions stay.
	sel := &Registration{URL: "https://x", NamespaceLabelSelector: "gpufrac.io/enabled=true"}
	if err := sel.Validate(); err != nil {
		t.Fatal(err)
	}
	ms := sel.Mutating(nil).Webhooks[0].NamespaceSelector
	if ms.MatchLabels["gpufrac.io/enabled"] != "true" || len(ms.MatchExpressions) != 1 {
		t.Errorf("mutating selector %+v", ms)
	}
	if vs := sel.Validating(nil).Webhooks[0].NamespaceSelector; vs.MatchLabels["gpufrac.io/enabled"] != "true" || len(vs.MatchExpressions) != 0 {
		t.Errorf("validating selector %+v", vs)
	}
	if err := (&Registration{URL: "https://x", NamespaceLabelSelector: "a in (b"}).Validate(); err == nil {
		t.Error("bad selector accepted")
	}

	// Service mode and limits.
	s := &Registration{Service: &ServiceReference{Namespace: "gpufrac-system", Name: "gpufrac-admission"}, GPUResourcePrefix: "example.com/it's"}
	m := s.Mutating(nil)
	if cc := m.Webhooks[0].ClientConfig; cc.URL != nil || cc.Service.Name != "gpufrac-admission" || *cc.Service.Port != 443 || *cc.Service.Path != MutatePodsPath {
		t.Errorf("service client config %+v", cc)
	}
	if !strings.Contains(m.Webhooks[0].MatchConditions[0].Expression, `'example.com/it\'s'`) {
		t.Errorf("CEL quoting: %s", m.Webhooks[0].MatchConditions[0].Expression)
	}
	if err := (&Registration{URL: "https://x", TimeoutSeconds: 10}).Validate(); err == nil {
		t.Error("timeout 10s accepted")
	}
	if err := (&Registration{URL: "http://x"}).Validate(); err == nil {
		t.Error("http URL accepted")
	}
}

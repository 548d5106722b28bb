package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
)

// serve posts body to h and returns the status code and the decoded AdmissionReview.
func serve(t *testing.T, h http.Handler, body []byte, contentType string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("response %q: %v", w.Body.String(), err)
	}
	return w.Code, out
}

// TestServeHTTPAsControllerRuntime: the pod webhook's own ServeHTTP (typed decoding)
// answers every AdmissionReview exactly as controller-runtime's webhook.Admission
// around the same Mutator did: a patched pod (the API server's review of a ReplicaSet's
// pod), the same pod with no autoscaler, a dry run, a v1beta1 review, an UPDATE, an
// undecodable pod, a pod of another namespace, and reviews whose object or request is
// missing, null or no pod (the fallback of readReview's one-pass decoding); the same
// buffers serve each request in turn, so nothing of one request leaks into the next.
func TestServeHTTPAsControllerRuntime(t *testing.T) {
	full, err := os.ReadFile("testdata/pod-create-review.json")
	if err != nil {
		t.Fatal(err)
	}
	gfa := autoscaler("web", gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi)
	gfa.Spec.TargetRef.Name = "web-0"
	dep, rs := deploymentObjects()
	dep.Name, rs.Name, rs.UID, rs.OwnerReferences[0].Name = "web-0", "web-0-abc", "web-0-rs", "web-0"
	m := NewMutator(newFakeReader(t, dep, rs, gfa, recommendation("web", 80, containerRec("main", "4Gi", "350m"))), scheme.MustNew(), Config{})
	ours, theirs := podWebhook(m), instrument(WebhookMutatePods, &webhook.Admission{Handler: m})

	edit := func(pairs ...string) []byte {
		return []byte(strings.NewReplacer(pairs...).Replace(string(full)))
	}
	cases := map[string][]byte{
		"patched":           full,
		"no autoscaler":     edit(`"name":"web-0-abc"`, `"name":"other-abc"`),
		"dry run":           edit(`"dryRun":false`, `"dryRun":true`),
		"v1beta1":           edit(`"apiVersion":"admission.k8s.io/v1"`, `"apiVersion":"admission.k8s.io/v1beta1"`),
		"update":            edit(`"operation":"CREATE"`, `"operation":"UPDATE"`),
		"undecodable pod":   edit(`"spec":{"volumes"`, `"spec":{"volumes":7,"x"`),
		"other namespace":   edit(`"namespace":"team-a"`, `"namespace":"team-b"`),
		"patched again":     full,
		"patched once more": full,
		"no type meta":      edit(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1",`, `{`),
		"no request":        []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`),
		"no request object": []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"team-a"}}`),
		"null object":       []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u2","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"team-a","object":null}}`),
		"null request":      []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":null}`),
		"object no pod":     []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u3","kind":{"version":"v1","kind":"ConfigMap"},"operation":"CREATE","namespace":"team-a","object":[1,2]}}`),
		"bad uid":           edit(`"uid":"0b1d2c3e-4f50-4a61-8b72-93a4b5c6d7e8"`, `"uid":7`),
	}
	for _, name := range []string{"patched", "no autoscaler", "dry run", "v1beta1", "update", "undecodable pod", "other namespace", "patched again", "no type meta", "no request", "no request object", "null object", "null request", "object no pod", "patched once more"} {
		body := cases[name]
		codeOurs, gotOurs := serve(t, ours, body, "application/json")
		codeTheirs, gotTheirs := serve(t, theirs, body, "application/json")
		if codeOurs != http.StatusOK || codeOurs != codeTheirs || !reflect.DeepEqual(gotOurs, gotTheirs) {
			t.Errorf("%s: ours %d %v\ncontroller-runtime's %d %v", name, codeOurs, gotOurs, codeTheirs, gotTheirs)
		}
		resp, _ := gotOurs["response"].(map[string]any)
		if resp["allowed"] != true {
			t.Errorf("%s: pod not allowed: %v", name, gotOurs)
		}
		if _, patched := resp["patch"]; patched != (name == "patched" || name == "patched again" || name == "patched once more" || name == "v1beta1" || name == "dry run" || name == "no type meta") {
			t.Errorf("%s: patch %v", name, resp["patch"])
		}
	}
}

// TestServeHTTPBadRequests: a request that is no readable AdmissionReview gets an
// error response without UID, as controller-runtime's (the API server then applies
// failurePolicy Ignore), counted as a decode error.
func TestServeHTTPBadRequests(t *testing.T) {
	m := NewMutator(newFakeReader(t), scheme.MustNew(), Config{})
	for _, c := range []struct {
		name, body, contentType string
		code                    float64
	}{
		{"empty", "", "application/json", http.StatusBadRequest},
		{"not JSON", "{", "application/json", http.StatusBadRequest},
		{"content type", `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u"}}`, "text/plain", http.StatusBadRequest},
		{"other kind", `{"kind":"Pod","apiVersion":"v1"}`, "application/json", http.StatusBadRequest},
		{"too large", `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"` + strings.Repeat("x", maxReviewBytes) + `"}}`, "application/json", http.StatusRequestEntityTooLarge},
	} {
		_, got := serve(t, m, []byte(c.body), c.contentType)
		var ar admissionv1.AdmissionReview
		b, _ := json.Marshal(got)
		_ = json.Unmarshal(b, &ar)
		if ar.Response == nil || ar.Response.Allowed || ar.Response.UID != "" || ar.Response.Result == nil || float64(ar.Response.Result.Code) != c.code || ar.Response.Result.Message == "" {
			t.Errorf("%s: %v, want an error response with code %v and no UID", c.name, got, c.code)
		}
	}
}

package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"
)

// maxReviewBytes bounds an AdmissionReview body, 7 MiB: controller-runtime's limit (at
// most two objects of 3 MiB each, twice etcd's recommended 1.5 MiB request, plus 1 MiB
// for the rest of the review).
const maxReviewBytes = 7 << 20

// maxPooledBytes is the largest buffer kept for reuse between requests, 1 MiB: a rare
// huge pod does not pin its buffers for the life of the process.
const maxPooledBytes = 1 << 20

// podReview is the part of an AdmissionReview the pod webhook reads; admission.k8s.io
// v1 and v1beta1 have the same fields. Everything else (userInfo, oldObject, options,
// the request's resource) is skipped, not decoded.
type podReview struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Request    *podReviewRequest `json:"request"`
}

// podReviewRequest is the part of an AdmissionRequest that Mutator.Handle reads.
type podReviewRequest struct {
	UID         types.UID               `json:"uid"`
	Kind        metav1.GroupVersionKind `json:"kind"`
	SubResource string                  `json:"subResource"`
	Namespace   string                  `json:"namespace"`
	Operation   admissionv1.Operation   `json:"operation"`
	DryRun      bool                    `json:"dryRun"`
	// Object is the pod's JSON, decoded by Mutator.decide.
	Object json.RawMessage `json:"object"`
}

// reviewBuffers are one request's buffers, reused through reviewPool: the body, the
// decoded review and the encoded response.
type reviewBuffers struct {
	body   bytes.Buffer
	review podReview
	req    podReviewRequest
	dryRun bool // the admission.Request's DryRun points here
	out    bytes.Buffer
}

var reviewPool = sync.Pool{New: func() any { return new(reviewBuffers) }}

// reviewTypes are the AdmissionReview versions the pod webhook answers, in the version
// asked (the webhook configurations register v1 only).
var reviewTypes = map[string]bool{admissionv1.SchemeGroupVersion.String(): true, "admission.k8s.io/v1beta1": true}

// ServeHTTP serves the pod webhook (MutatePodsPath). It decodes the AdmissionReview's
// few fields Handle needs straight from the JSON into typed structs (no generic
// decoding, no scheme), runs Handle, and writes the AdmissionReview response in the
// request's apiVersion (admission.k8s.io/v1 when it has none). Buffers are reused
// between requests. A body that is empty, larger than 7 MiB, not application/json or
// not an AdmissionReview gets an error response as controller-runtime's webhook.Admission
// writes it (allowed false, no UID): the API server treats it as a failed call, and the
// webhook's failurePolicy Ignore admits the pod.
func (m *Mutator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := reviewPool.Get().(*reviewBuffers)
	defer putReviewBuffers(b)
	if r.Body != nil {
		defer r.Body.Close()
	}
	rv, err := readReview(b, r)
	if err != nil {
		errorsTotal.WithLabelValues("decode").Inc()
		klog.FromContext(r.Context()).Error(err, "Unreadable pod AdmissionReview")
		code := int32(http.StatusBadRequest)
		if errors.Is(err, errTooLarge) {
			code = http.StatusRequestEntityTooLarge
		}
		resp := admission.Errored(code, err)
		writeReview(w, b, metav1.TypeMeta{}, &resp.AdmissionResponse)
		return
	}
	b.dryRun = rv.Request.DryRun
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: rv.Request.UID, Kind: rv.Request.Kind, SubResource: rv.Request.SubResource,
		Namespace: rv.Request.Namespace, Operation: rv.Request.Operation, DryRun: &b.dryRun,
		Object: runtime.RawExtension{Raw: rv.Request.Object},
	}}
	if log := klog.FromContext(r.Context()).V(5); log.Enabled() {
		log.Info("Received a pod AdmissionReview", "uid", req.UID, "namespace", req.Namespace, "operation", req.Operation)
	}
	resp := m.Handle(r.Context(), req)
	if err := resp.Complete(req); err != nil {
		// Complete only fails to encode the patch: admit the pod unchanged.
		errorsTotal.WithLabelValues("encode").Inc()
		klog.FromContext(r.Context()).Error(err, "Encoding the pod's patch; pod admitted unchanged", "namespace", req.Namespace)
		resp = admission.Allowed("").WithWarnings("gpufrac: internal error; pod admitted unchanged")
		_ = resp.Complete(req)
	}
	writeReview(w, b, metav1.TypeMeta{APIVersion: rv.APIVersion, Kind: rv.Kind}, &resp.AdmissionResponse)
}

var errTooLarge = fmt.Errorf("request entity is too large; limit is %d bytes", maxReviewBytes)

// readReview reads r's body into b and decodes the review (case-sensitive field names,
// as the API server's decoders). Errors: an empty or unreadable body, one over
// maxReviewBytes (errTooLarge), a content type other than application/json, invalid
// JSON, an apiVersion or kind other than an AdmissionReview's. A review without
// apiVersion and kind is taken as admission.k8s.io/v1; one without request is an empty
// request (admitted, not a pod CREATE), as controller-runtime decodes it.
func readReview(b *reviewBuffers, r *http.Request) (*podReview, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, errors.New("request body is empty")
	}
	if n := r.ContentLength; n > 0 && n <= maxReviewBytes {
		b.body.Grow(int(n))
	}
	if _, err := b.body.ReadFrom(io.LimitReader(r.Body, maxReviewBytes+1)); err != nil {
		return nil, err
	}
	if b.body.Len() > maxReviewBytes {
		return nil, errTooLarge
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return nil, fmt.Errorf("contentType=%s, expected application/json", ct)
	}
	b.req = podReviewRequest{Object: b.req.Object[:0]}
	b.review = podReview{Request: &b.req}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b.body.Bytes(), &b.review); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	rv := &b.review
	if rv.APIVersion == "" && rv.Kind == "" {
		rv.APIVersion, rv.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	if !reviewTypes[rv.APIVersion] || rv.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("%s, Kind=%s is not an AdmissionReview", rv.APIVersion, rv.Kind)
	}
	return rv, nil
}

// writeReview writes resp as an AdmissionReview of type tm: the request's, or none for
// a request that was no readable review, as controller-runtime writes it.
func writeReview(w http.ResponseWriter, b *reviewBuffers, tm metav1.TypeMeta, resp *admissionv1.AdmissionResponse) {
	out := admissionv1.AdmissionReview{TypeMeta: tm, Response: resp}
	b.out.Reset()
	if err := json.NewEncoder(&b.out).Encode(&out); err != nil {
		errorsTotal.WithLabelValues("encode").Inc()
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(b.out.Bytes()); err != nil {
		klog.Background().V(2).Info("Writing the pod webhook's response", "err", err)
	}
}

// putReviewBuffers returns b to the pool unless its buffers grew past maxPooledBytes.
func putReviewBuffers(b *reviewBuffers) {
	if b.body.Cap() > maxPooledBytes || b.out.Cap() > maxPooledBytes || cap(b.req.Object) > maxPooledBytes {
		return
	}
	b.body.Reset()
	b.req = podReviewRequest{Object: b.req.Object[:0]}
	b.review = podReview{}
	reviewPool.Put(b)
}

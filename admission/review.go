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
	corev1 "k8s.io/api/core/v1"
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

// review is the part of an AdmissionReview the pod webhook reads, with the request R;
// admission.k8s.io v1 and v1beta1 have the same fields. Everything else (userInfo,
// oldObject, options, the request's resource) is skipped, not decoded.
type review[R any] struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *R     `json:"request"`
}

// requestFields are the fields of an AdmissionRequest that Mutator.Handle reads, but
// the object.
type requestFields struct {
	UID         types.UID               `json:"uid"`
	Kind        metav1.GroupVersionKind `json:"kind"`
	SubResource string                  `json:"subResource"`
	Namespace   string                  `json:"namespace"`
	Operation   admissionv1.Operation   `json:"operation"`
	DryRun      bool                    `json:"dryRun"`
}

// podReviewRequest is the request with its object decoded straight into a pod: one pass
// over the body (readReview's first try).
type podReviewRequest struct {
	requestFields
	Object *corev1.Pod `json:"object"`
}

// rawReviewRequest is the request with the object's JSON kept, decoded by
// Mutator.decide as before: readReview's fallback when the first try fails, so an
// object that is no pod or not decodable is answered as it always was.
type rawReviewRequest struct {
	requestFields
	Object json.RawMessage `json:"object"`
}

// reviewBuffers are one request's buffers, reused through reviewPool: the body, the
// decoded review and the encoded response.
type reviewBuffers struct {
	body     bytes.Buffer
	typed    review[podReviewRequest]
	typedReq podReviewRequest
	raw      review[rawReviewRequest]
	rawReq   rawReviewRequest
	decoded  decodedReview
	dryRun   bool // the admission.Request's DryRun points here
	out      bytes.Buffer
}

// decodedReview is what readReview read: the review's type, the request's fields and
// either its pod (decoded with the review) or the object's JSON (pod nil).
type decodedReview struct {
	APIVersion, Kind string
	req              requestFields
	pod              *corev1.Pod
	object           []byte
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
	b.dryRun = rv.req.DryRun
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: rv.req.UID, Kind: rv.req.Kind, SubResource: rv.req.SubResource,
		Namespace: rv.req.Namespace, Operation: rv.req.Operation, DryRun: &b.dryRun,
		Object: runtime.RawExtension{Raw: rv.object},
	}}
	if log := klog.FromContext(r.Context()).V(5); log.Enabled() {
		log.Info("Received a pod AdmissionReview", "uid", req.UID, "namespace", req.Namespace, "operation", req.Operation)
	}
	resp := m.handle(r.Context(), req, rv.pod)
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
func readReview(b *reviewBuffers, r *http.Request) (*decodedReview, error) {
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
	d := &b.decoded
	*d = decodedReview{}
	// One pass: the review and its pod. Whatever that pass cannot decode into a pod
	// (an object that is no pod, missing or null) goes the raw way below, answered as
	// before this pass existed.
	b.typedReq = podReviewRequest{}
	b.typed = review[podReviewRequest]{Request: &b.typedReq}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b.body.Bytes(), &b.typed); err == nil && b.typed.Request != nil && b.typed.Request.Object != nil {
		d.APIVersion, d.Kind, d.req, d.pod = b.typed.APIVersion, b.typed.Kind, b.typed.Request.requestFields, b.typed.Request.Object
	} else {
		b.rawReq = rawReviewRequest{Object: b.rawReq.Object[:0]}
		b.raw = review[rawReviewRequest]{Request: &b.rawReq}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b.body.Bytes(), &b.raw); err != nil {
			return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
		}
		d.APIVersion, d.Kind = b.raw.APIVersion, b.raw.Kind
		if rq := b.raw.Request; rq != nil { // "request": null is an empty request
			d.req, d.object = rq.requestFields, rq.Object
			if string(d.object) == "null" { // no object, as runtime.RawExtension decodes it
				d.object = nil
			}
		}
	}
	if d.APIVersion == "" && d.Kind == "" {
		d.APIVersion, d.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	if !reviewTypes[d.APIVersion] || d.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("%s, Kind=%s is not an AdmissionReview", d.APIVersion, d.Kind)
	}
	return d, nil
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
	if b.body.Cap() > maxPooledBytes || b.out.Cap() > maxPooledBytes || cap(b.rawReq.Object) > maxPooledBytes {
		return
	}
	b.body.Reset()
	// Drop the pod and the request's strings: a pooled buffer pins nothing.
	b.typed, b.typedReq, b.decoded = review[podReviewRequest]{}, podReviewRequest{}, decodedReview{}
	b.rawReq = rawReviewRequest{Object: b.rawReq.Object[:0]}
	b.raw = review[rawReviewRequest]{}
	reviewPool.Put(b)
}

package statuswrite

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A streak is reported from its Threshold-th failure, an event once per distinct
// message; a success starts over.
func TestFailures(t *testing.T) {
	var f Failures
	e1, e2 := errors.New("one"), errors.New("two")
	for _, tc := range []struct {
		err          error // nil: a success
		n            int
		count, event bool
	}{
		{e1, 1, false, false}, {e1, 2, false, false}, {e1, 3, true, true}, {e1, 4, true, false},
		{e2, 5, true, true}, {e2, 6, true, false}, {e1, 7, true, true},
		{nil, 0, false, false}, {e1, 1, false, false}, {e1, 2, false, false}, {e1, 3, true, true},
	} {
		if tc.err == nil {
			f.Succeeded("a")
			continue
		}
		n, count, event := f.Failed("a", tc.err)
		if n != tc.n || count != tc.count || event != tc.event {
			t.Fatalf("after %v: n %d count %v event %v, want %d %v %v", tc.err, n, count, event, tc.n, tc.count, tc.event)
		}
	}
	// Another object has its own streak.
	if n, _, _ := f.Failed("b", e1); n != 1 {
		t.Fatalf("b's streak %d, want 1", n)
	}
	f.Retain(nil)
	if n, _, _ := f.Failed("a", e1); n != 1 {
		t.Fatalf("a's streak after Retain %d, want 1", n)
	}
}

func TestReason(t *testing.T) {
	gr := schema.GroupResource{Group: "gpufrac.io", Resource: "gpufractionautoscalers"}
	custom := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 400, Reason: "SomeWebhookReason"}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewConflict(gr, "x", errors.New("modified")), "Conflict"},
		{fmt.Errorf("writing: %w", apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "K"}, "x", nil)), "Invalid"},
		{apierrors.NewForbidden(gr, "x", errors.New("no")), "Forbidden"},
		{apierrors.NewServerTimeout(gr, "patch", 1), "ServerTimeout"},
		{apierrors.NewTooManyRequests("slow down", 1), "TooManyRequests"},
		{custom, "Other"},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Code: 500}}, "Unknown"},
		{errors.New("connection refused"), "Unknown"},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// Package statuswrite tracks status writes that fail cycle after cycle, so that the
// recommender and the updater can say so on the object (a Warning event) and in a metric,
// not only in their logs.
package statuswrite

import (
	"errors"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Threshold is how many cycles in a row an object's status write must fail before it is
// reported: a single failure (a conflict, a timeout) is retried by the next cycle anyway.
const Threshold = 3

// EventReason is the reason of the Warning event recorded on the autoscaler.
const EventReason = "StatusWriteFailed"

// Failures counts, per object, the status writes that failed in a row. The zero value is
// ready to use; it is safe for concurrent use.
type Failures struct {
	mu sync.Mutex
	m  map[types.UID]*streak
}

type streak struct {
	n     int
	noted string // the message last reported
}

// Failed records a failed write of the object uid with err. It returns how many writes
// of it failed in a row (this one included), whether the failure is to be counted in the
// failure metric (n ≥ Threshold), and whether an event is due: n ≥ Threshold and err's
// message differs from the one last reported for this streak.
func (f *Failures) Failed(uid types.UID, err error) (n int, count, event bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[types.UID]*streak{}
	}
	s := f.m[uid]
	if s == nil {
		s = &streak{}
		f.m[uid] = s
	}
	s.n++
	if s.n < Threshold {
		return s.n, false, false
	}
	msg := err.Error()
	if s.noted == msg {
		return s.n, true, false
	}
	s.noted = msg
	return s.n, true, true
}

// Succeeded ends uid's streak (the next streak is reported again).
func (f *Failures) Succeeded(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, uid)
}

// Retain forgets the objects not in keep (deleted meanwhile).
func (f *Failures) Retain(keep map[types.UID]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for uid := range f.m {
		if !keep[uid] {
			delete(f.m, uid)
		}
	}
}

// reasons are the API status reasons the metric label takes as they are.
var reasons = map[metav1.StatusReason]bool{
	metav1.StatusReasonUnauthorized: true, metav1.StatusReasonForbidden: true, metav1.StatusReasonNotFound: true,
	metav1.StatusReasonAlreadyExists: true, metav1.StatusReasonConflict: true, metav1.StatusReasonGone: true,
	metav1.StatusReasonInvalid: true, metav1.StatusReasonServerTimeout: true, metav1.StatusReasonTimeout: true,
	metav1.StatusReasonTooManyRequests: true, metav1.StatusReasonBadRequest: true, metav1.StatusReasonMethodNotAllowed: true,
	metav1.StatusReasonNotAcceptable: true, metav1.StatusReasonRequestEntityTooLarge: true,
	metav1.StatusReasonUnsupportedMediaType: true, metav1.StatusReasonInternalError: true, metav1.StatusReasonExpired: true,
	metav1.StatusReasonServiceUnavailable: true,
}

// Reason is the metric label of err: its API status reason (Conflict, Invalid,
// Forbidden, …) when it is one of Kubernetes' (metav1.StatusReason constants), "Other"
// for another reason an API server or webhook gave, "Unknown" when err carries none (a
// connection error, a client-side timeout, a status without a reason). The label thus
// takes at most 20 values.
func Reason(err error) string {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return "Unknown"
	}
	r := se.Status().Reason
	switch {
	case r == metav1.StatusReasonUnknown:
		return "Unknown"
	case reasons[r]:
		return string(r)
	}
	return "Other"
}

// Package statuslease is the status Leases (coordination.k8s.io/v1) by which gpufrac's
// components tell the updater they are serving:
//
//   - the admission webhook's (DefaultName): every ready webhook replica renews it
//     (Renewer), and the updater evicts only while it is fresh (Fresh), since a pod
//     evicted while the webhook is down would come back without its fraction;
//   - each recommender instance's (RecommenderLeaseName): its leader renews it after each
//     cycle that ran (Renewer.Renew), and the updater changes pods of the autoscalers
//     that instance owns only while it is fresh, since a recommendation nobody keeps up
//     to date must not shrink a pod (protective growth still goes ahead).
package statuslease

import (
	"context"
	"fmt"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultName is the name of the admission webhook's status Lease.
const DefaultName = "gpufrac-admission-status"

// RecommenderLeasePrefix starts the name of each recommender instance's status Lease.
const RecommenderLeasePrefix = "gpufrac-recommender-status-"

// RecommenderLeaseName is the name of the status Lease of the recommender instance name
// (its --recommender-name, spec.recommenders[0].name of the autoscalers it owns, e.g.
// "default").
func RecommenderLeaseName(name string) string { return RecommenderLeasePrefix + name }

// Results of a renewal attempt, passed to Renewer.Observe (the "result" label of
// gpufrac_admission_status_lease_renewals_total).
const (
	// ResultRenewed: the Lease was created or renewed.
	ResultRenewed = "renewed"
	// ResultNotReady: the webhook was not ready; the Lease was left to go stale.
	ResultNotReady = "not-ready"
	// ResultError: the API request failed.
	ResultError = "error"
)

// Renewer renews a coordination.k8s.io/v1 Lease every RenewInterval while the
// webhook is ready, so other components can tell that new pods will get their fractions
// (the updater evicts only while the Lease is fresh: Fresh). Every replica renews
// the same Lease; holderIdentity names the last one. It is a manager.Runnable that does
// not need leader election.
type Renewer struct {
	// Client reads and writes the Lease (not a cache).
	Client client.Client
	// Namespace and Name locate the Lease. Name defaults to DefaultName.
	Namespace, Name string
	// Identity is written into holderIdentity. Default $POD_NAME (the chart sets it from
	// the downward API), else the host name.
	Identity string
	// Component is the app.kubernetes.io/component label of a Lease Renew creates.
	// Default "admission".
	Component string
	// RenewInterval is the renewal period. Default 10s.
	RenewInterval time.Duration
	// Duration is written into leaseDurationSeconds for readers; Fresh callers pass
	// their own maxAge. Default 3 × RenewInterval.
	Duration time.Duration
	// Ready gates renewal: the Lease is renewed only while it returns nil. Nil means
	// always ready.
	Ready func() error
	// Now returns the current time; tests replace it. Default time.Now.
	Now func() time.Time
	// Observe, when set, is called after every renewal attempt of Start with its result
	// (ResultRenewed, ResultNotReady, ResultError), for metrics.
	Observe func(result string)
}

func (l *Renewer) defaults() {
	if l.Name == "" {
		l.Name = DefaultName
	}
	if l.Component == "" {
		l.Component = "admission"
	}
	if l.Identity == "" {
		l.Identity = os.Getenv("POD_NAME")
	}
	if l.Identity == "" {
		l.Identity, _ = os.Hostname()
	}
	if l.RenewInterval <= 0 {
		l.RenewInterval = 10 * time.Second
	}
	if l.Duration <= 0 {
		l.Duration = 3 * l.RenewInterval
	}
	if l.Now == nil {
		l.Now = time.Now
	}
}

// NeedLeaderElection is false: every serving replica renews.
func (l *Renewer) NeedLeaderElection() bool { return false }

// Start renews the Lease every RenewInterval until ctx ends, then, if this replica was
// the last to renew it, clears renewTime so readers see the webhook gone at once (other
// replicas renew it again within RenewInterval). Errors are logged and counted.
func (l *Renewer) Start(ctx context.Context) error {
	l.defaults()
	log := klog.FromContext(ctx).WithName("status-lease")
	t := time.NewTicker(l.RenewInterval)
	defer t.Stop()
	for {
		l.tick(ctx, log)
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := l.Release(rctx); err != nil {
				log.Error(err, "Releasing the status Lease")
			}
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// tick renews once when ready, observing the result.
func (l *Renewer) tick(ctx context.Context, log klog.Logger) {
	if l.Ready != nil {
		if err := l.Ready(); err != nil {
			l.observe(ResultNotReady)
			log.V(2).Info("Not renewing the status Lease: webhook not ready", "reason", err.Error())
			return
		}
	}
	if err := l.Renew(ctx); err != nil {
		if ctx.Err() == nil {
			l.observe(ResultError)
			log.Error(err, "Renewing the status Lease", "lease", l.Namespace+"/"+l.Name)
		}
		return
	}
	l.observe(ResultRenewed)
}

func (l *Renewer) observe(result string) {
	if l.Observe != nil {
		l.Observe(result)
	}
}

// Renew creates the Lease or sets its renewTime to now and holderIdentity to Identity.
// It returns API errors.
func (l *Renewer) Renew(ctx context.Context) error {
	l.defaults()
	now := metav1.NewMicroTime(l.Now())
	secs := int32(l.Duration / time.Second)
	lease := &coordinationv1.Lease{}
	err := l.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name, Labels: map[string]string{"app.kubernetes.io/name": "gpufrac", "app.kubernetes.io/component": l.Component}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &l.Identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}
		return l.Client.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != l.Identity {
		lease.Spec.AcquireTime = &now
	}
	lease.Spec.HolderIdentity = &l.Identity
	lease.Spec.LeaseDurationSeconds = &secs
	lease.Spec.RenewTime = &now
	return l.Client.Update(ctx, lease)
}

// Release clears renewTime when this replica is the Lease's holder. It returns API
// errors other than NotFound and Conflict (another replica renewed meanwhile).
func (l *Renewer) Release(ctx context.Context) error {
	l.defaults()
	lease := &coordinationv1.Lease{}
	if err := l.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, lease); err != nil {
		return client.IgnoreNotFound(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != l.Identity {
		return nil
	}
	lease.Spec.RenewTime = nil
	if err := l.Client.Update(ctx, lease); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// HeldByOther reports whether another replica serves: the Lease is held by another
// identity and was renewed within 3 × RenewInterval of Now. A missing Lease is not held.
// It returns the client's other errors.
func (l *Renewer) HeldByOther(ctx context.Context) (bool, error) {
	c := *l
	c.defaults()
	lease := &coordinationv1.Lease{}
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, lease)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the status Lease: %w", err)
	}
	return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != c.Identity && lease.Spec.RenewTime != nil &&
		c.Now().Sub(lease.Spec.RenewTime.Time) <= 3*c.RenewInterval, nil
}

// clock is Fresh's clock; tests replace it.
var clock = time.Now

// Fresh reports whether the status Lease ns/name was renewed
// within maxAge of now (this process's clock; keep maxAge well above the renewal period
// plus clock skew, e.g. 30s). A missing Lease or one without renewTime is not fresh and
// not an error. It returns the reader's errors otherwise. The updater calls it before
// every eviction: a pod evicted while the webhook is down would come back without its
// fraction.
func Fresh(ctx context.Context, c client.Reader, ns, name string, maxAge time.Duration) (bool, error) {
	fresh, _, err := freshWithin(ctx, c, ns, name, maxAge, false)
	return fresh, err
}

// FreshOrDeclared is Fresh with the age allowed raised to the Lease's own
// leaseDurationSeconds where that is longer than maxAge: a recommender renews its Lease
// after each cycle and declares 3 × its --interval there, so a recommender run with a
// long interval (a large fleet, a Prometheus that must not be queried every minute) is
// not read as stale between two cycles that are on time. It returns the age allowed.
func FreshOrDeclared(ctx context.Context, c client.Reader, ns, name string, maxAge time.Duration) (bool, time.Duration, error) {
	return freshWithin(ctx, c, ns, name, maxAge, true)
}

func freshWithin(ctx context.Context, c client.Reader, ns, name string, maxAge time.Duration, declared bool) (bool, time.Duration, error) {
	if maxAge <= 0 {
		return false, maxAge, fmt.Errorf("maxAge %v: want a positive duration", maxAge)
	}
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return false, maxAge, nil
		}
		return false, maxAge, fmt.Errorf("reading Lease %s/%s: %w", ns, name, err)
	}
	if d := lease.Spec.LeaseDurationSeconds; declared && d != nil && time.Duration(*d)*time.Second > maxAge {
		maxAge = time.Duration(*d) * time.Second
	}
	if lease.Spec.RenewTime == nil {
		return false, maxAge, nil
	}
	age := clock().Sub(lease.Spec.RenewTime.Time)
	return age <= maxAge && age >= -maxAge, maxAge, nil
}

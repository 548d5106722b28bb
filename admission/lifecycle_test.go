package admission

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gpufrac/gpufrac/statuslease"
)

func registered(t *testing.T, c client.Client) (*admissionregistrationv1.MutatingWebhookConfiguration, bool) {
	t.Helper()
	mw := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := c.Get(context.Background(), types.NamespacedName{Name: "gpufrac-admission"}, mw)
	if apierrors.IsNotFound(err) {
		vw := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := c.Get(context.Background(), types.NamespacedName{Name: "gpufrac-admission"}, vw); !apierrors.IsNotFound(err) {
			t.Fatalf("validating configuration without the mutating one: %v", err)
		}
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return mw, true
}

// webhookOn returns controller-runtime's webhook server (as NewServer builds it) on
// 127.0.0.1:port with a self-managed certificate.
func webhookOn(t *testing.T, port int) webhook.Server {
	t.Helper()
	cm := &CertManager{Client: newFakeReader(t), Namespace: "gpufrac-system", SecretName: "tls", DNSNames: []string{"localhost"}}
	if err := cm.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = cm.GetCertificate }}})
}

// Issue 14 kind 13: with the webhook port taken the server never starts listening, so
// the configurations are never registered, however many CA bundles the certificate
// check publishes meanwhile; with the port free they are registered, with the latest
// bundle, once the server listens, and later bundles are registered directly.
func TestRegisterOnlyOnceServing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port

	c := newFakeReader(t)
	s := &Server{Registration: &Registration{Client: c, Namespace: "gpufrac-system", URL: "https://127.0.0.1:" + strconv.Itoa(port)}}
	ctx, cancel := context.WithCancel(context.Background())
	srv := webhookOn(t, port)
	done := make(chan error, 1)
	go func() {
		done <- s.registerWhenServing(ctx, func() error { return srv.StartedChecker()(nil) }, time.Millisecond)
	}()
	if err := s.reconcile(ctx, []byte("CA1")); err != nil { // the certificate check publishes a bundle
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err == nil {
		t.Fatal("webhook server started on a taken port")
	}
	cancel()
	<-done
	if _, ok := registered(t, c); ok {
		t.Fatal("configurations registered although the webhook server never listened")
	}

	// Port free: registered once the server listens, with the latest bundle.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = free.Addr().(*net.TCPAddr).Port
	free.Close()
	s = &Server{Registration: &Registration{Client: c, Namespace: "gpufrac-system", URL: "https://127.0.0.1:" + strconv.Itoa(port)}}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	srv = webhookOn(t, port)
	if err := s.reconcile(ctx, []byte("CA1")); err != nil {
		t.Fatal(err)
	}
	if _, ok := registered(t, c); ok {
		t.Fatal("registered before the webhook server listens")
	}
	if err := s.reconcile(ctx, []byte("CA2")); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Start(ctx) }()
	if err := s.registerWhenServing(ctx, func() error { return srv.StartedChecker()(nil) }, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mw, ok := registered(t, c)
	if !ok || string(mw.Webhooks[0].ClientConfig.CABundle) != "CA2" {
		t.Fatalf("after the server listens: registered %v, configuration %+v", ok, mw)
	}
	if p := s.regErr.Load(); p == nil || *p != nil {
		t.Errorf("registration result not recorded for readiness: %v", p)
	}
	if err := s.reconcile(ctx, []byte("CA3")); err != nil {
		t.Fatal(err)
	}
	if mw, _ := registered(t, c); string(mw.Webhooks[0].ClientConfig.CABundle) != "CA3" {
		t.Errorf("a later bundle was not registered: %q", mw.Webhooks[0].ClientConfig.CABundle)
	}
}

// After a failed start the configurations are removed unless another replica serves
// (its fresh status Lease); without a Lease only configurations this process created are.
func TestCleanUpAfterFailure(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpufrac-system", Name: statuslease.DefaultName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: &metav1.MicroTime{Time: renewed}}}
	}
	for _, tc := range []struct {
		name        string
		lease       *coordinationv1.Lease // nil: no Lease object
		disabled    bool                  // DisableLease
		preexisting bool                  // the configurations existed before this process
		wantDeleted bool
	}{
		{name: "created here, lease disabled", disabled: true, wantDeleted: true},
		{name: "pre-existing, lease disabled", disabled: true, preexisting: true, wantDeleted: false},
		{name: "another replica renewed 5s ago", lease: lease("admission-b", now.Add(-5*time.Second)), preexisting: true, wantDeleted: false},
		{name: "another replica's lease is stale", lease: lease("admission-b", now.Add(-time.Minute)), preexisting: true, wantDeleted: true},
		{name: "this replica held it", lease: lease("admission-a", now.Add(-time.Second)), preexisting: true, wantDeleted: true},
		{name: "no lease object", preexisting: true, wantDeleted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newFakeReader(t)
			if tc.lease != nil {
				if err := c.Create(ctx, tc.lease); err != nil {
					t.Fatal(err)
				}
			}
			url := "https://127.0.0.1:9443"
			if tc.preexisting {
				if err := (&Registration{Client: c, Namespace: "gpufrac-system", URL: url}).Reconcile(ctx, []byte("CA")); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{Registration: &Registration{Client: c, Namespace: "gpufrac-system", URL: url}}
			if !tc.disabled {
				s.Lease = &statuslease.Renewer{Client: c, Namespace: "gpufrac-system", Identity: "admission-a", RenewInterval: 10 * time.Second, Now: func() time.Time { return now }}
			}
			s.serving.Store(true)
			if err := s.reconcile(ctx, []byte("CA")); err != nil {
				t.Fatal(err)
			}
			if s.Registration.Created() == tc.preexisting {
				t.Fatalf("Created() %v with preexisting %v", s.Registration.Created(), tc.preexisting)
			}
			deleted, err := s.CleanUp(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, still := registered(t, c)
			if deleted != tc.wantDeleted || still == tc.wantDeleted {
				t.Errorf("deleted %v, configurations still there %v; want deleted %v", deleted, still, tc.wantDeleted)
			}
		})
	}
}

// Registrations at the same moment (registerWhenServing and the certificate check's
// reconcile) are serialised: none fails with a conflict on the existing configurations,
// and readiness records success, not a loser's conflict.
func TestRegisterConcurrently(t *testing.T) {
	c := newFakeReader(t)
	s := &Server{Registration: &Registration{Client: c, Namespace: "gpufrac-system", URL: "https://127.0.0.1:9443"}}
	s.serving.Store(true)
	ctx := context.Background()
	if err := s.reconcile(ctx, []byte("CA1")); err != nil { // the configurations exist
		t.Fatal(err)
	}
	errs := make(chan error, 40)
	for i := range cap(errs) {
		go func() { errs <- s.reconcile(ctx, []byte("CA"+strconv.Itoa(i%2+2))) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("concurrent registration: %v", err)
		}
	}
	if p := s.regErr.Load(); p == nil || *p != nil {
		t.Errorf("readiness records %v, want success", p)
	}
}

// ctxManager is a manager whose Start hands over its context and runs until it ends.
type ctxManager struct {
	manager.Manager
	started chan context.Context
}

func (m *ctxManager) Start(ctx context.Context) error {
	m.started <- ctx
	<-ctx.Done()
	return nil
}

// A pod being deleted gets SIGTERM while its endpoint is still being removed from the
// Service (EndpointSlice controller, then whatever routes the API server's calls): a
// webhook server that closes its listener at once refuses calls the API server still
// sends it, and failurePolicy Ignore admits those pods without their fraction (a
// replacement the updater just evicted among them). With a shutdown delay the manager,
// and so the webhook server and the status Lease, keep running that long after the
// signal; without one they stop with it.
func TestShutdownDelayKeepsServing(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Second, 5 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			asked := make(chan time.Duration, 1)
			fire := make(chan time.Time)
			m := &ctxManager{started: make(chan context.Context, 1)}
			s := &Server{Manager: m, shutdownDelay: delay,
				after: func(d time.Duration) <-chan time.Time { asked <- d; return fire }}
			ctx, sigterm := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Start(ctx) }()
			mctx := <-m.started
			sigterm()
			if delay == 0 {
				<-mctx.Done() // stops with the signal
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				return
			}
			select {
			case d := <-asked:
				if d != delay {
					t.Errorf("waits %v after the signal, want %v", d, delay)
				}
			case <-mctx.Done():
				t.Fatal("the manager stopped with the signal, before the shutdown delay")
			}
			if mctx.Err() != nil {
				t.Fatal("the manager stopped before the shutdown delay ended")
			}
			close(fire)
			<-mctx.Done()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func secretOf(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "gpufrac-system", Name: "tls"}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// handshake serves with cm's certificate and connects trusting only bundle.
func handshake(t *testing.T, cm *CertManager, bundle []byte) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: cm.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("empty bundle")
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + ln.Addr().String())
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestCertManagerLifecycle(t *testing.T) {
	ctx := context.Background()
	c := newFakeReader(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var bundles int
	cm := &CertManager{
		Client: c, Namespace: "gpufrac-system", SecretName: "tls",
		DNSNames: []string{"gpufrac-admission.gpufrac-system.svc"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		CAValidity: 300 * 24 * time.Hour, CertValidity: 30 * 24 * time.Hour, CARolloverDelay: 5 * time.Minute,
		Now:      func() time.Time { return now },
		OnBundle: func(context.Context, []byte) error { bundles++; return nil },
	}
	if _, err := cm.GetCertificate(nil); err == nil {
		t.Fatal("certificate before Ensure")
	}
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	s1 := secretOf(t, c)
	if s1.Type != corev1.SecretTypeTLS || len(parseCerts(s1.Data[SecretCABundle])) != 1 {
		t.Fatalf("secret %v", s1.Type)
	}
	if bundles != 1 {
		t.Errorf("OnBundle called %d times", bundles)
	}
	// Real TLS with the real clock: the fake "now" is in the future, so this only runs
	// when the certificate is valid now. Use a manager on the real clock for it.
	real := &CertManager{Client: newFakeReader(t), Namespace: "gpufrac-system", SecretName: "tls", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	if err := real.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, real, real.CABundle()); err != nil {
		t.Fatalf("TLS with the generated CA: %v", err)
	}

	// A second check changes nothing.
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if s := secretOf(t, c); s.ResourceVersion != s1.ResourceVersion {
		t.Error("secret rewritten without need")
	}

	// Past two thirds of the serving lifetime: renewed by the same CA.
	now = now.Add(21 * 24 * time.Hour)
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := secretOf(t, c)
	if string(s2.Data[corev1.TLSCertKey]) == string(s1.Data[corev1.TLSCertKey]) {
		t.Fatal("serving certificate not renewed")
	}
	if string(s2.Data[SecretCABundle]) != string(s1.Data[SecretCABundle]) {
		t.Fatal("CA changed with the serving certificate")
	}

	// A new DNS name forces a new serving certificate.
	cm.DNSNames = append(cm.DNSNames, "extra.example.com")
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	leaf := parseCerts(secretOf(t, c).Data[corev1.TLSCertKey])[0]
	if len(leaf.DNSNames) != 2 {
		t.Errorf("DNS names %v", leaf.DNSNames)
	}

	// Past two thirds of the CA lifetime: a new CA joins the bundle first; the serving
	// certificate moves to it only after the rollover delay. First get a serving
	// certificate that is still valid when the CA becomes due (issued on day 150 with a
	// long lifetime; it is capped to the CA's remaining life).
	now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(150 * 24 * time.Hour)
	cm.CertValidity = 299 * 24 * time.Hour
	cm.DNSNames = append(cm.DNSNames, "force.example.com") // forces a reissue now
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	oldCA := parseCerts(secretOf(t, c).Data[SecretCABundle])[0]
	now = oldCA.NotBefore.Add(time.Duration(float64(oldCA.NotAfter.Sub(oldCA.NotBefore)) * 0.7))
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	rot := secretOf(t, c)
	cas := parseCerts(rot.Data[SecretCABundle])
	if len(cas) != 2 || !cas[1].Equal(oldCA) {
		t.Fatalf("bundle after CA rotation has %d CAs, want new + old", len(cas))
	}
	servingNow := parseCerts(rot.Data[corev1.TLSCertKey])[0]
	if servingNow.CheckSignatureFrom(oldCA) != nil {
		t.Fatal("serving certificate moved to the new CA before the rollover delay")
	}
	now = now.Add(6 * time.Minute)
	if err := cm.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	after := secretOf(t, c)
	if parseCerts(after.Data[corev1.TLSCertKey])[0].CheckSignatureFrom(parseCerts(after.Data[SecretCABundle])[0]) != nil {
		t.Fatal("serving certificate not issued by the new CA after the rollover delay")
	}
}

func TestCertManagerSharedSecret(t *testing.T) {
	// Two replicas on one Secret converge on the same certificate.
	ctx := context.Background()
	c := newFakeReader(t)
	a := &CertManager{Client: c, Namespace: "gpufrac-system", SecretName: "tls", DNSNames: []string{"x"}}
	b := &CertManager{Client: c, Namespace: "gpufrac-system", SecretName: "tls", DNSNames: []string{"x"}}
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ca, _ := a.GetCertificate(nil)
	cb, _ := b.GetCertificate(nil)
	if string(ca.Certificate[0]) != string(cb.Certificate[0]) {
		t.Error("replicas serve different certificates")
	}
}

// A short --cert-validity is renewed after two thirds of its validity, not at once:
// the 5-minute backdating of NotBefore is not lifetime.
func TestDueForRenewalShortValidity(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, validity := range []time.Duration{time.Minute, 3 * time.Minute, time.Hour, 365 * 24 * time.Hour} {
		c := &x509.Certificate{NotBefore: now.Add(-backdate), NotAfter: now.Add(validity)}
		if dueForRenewal(c, now) || dueForRenewal(c, now.Add(validity/2)) {
			t.Errorf("validity %v: due right after issue or at half its validity", validity)
		}
		if !dueForRenewal(c, now.Add(validity*2/3+time.Second)) {
			t.Errorf("validity %v: not due with a third left", validity)
		}
	}
}

// A serving certificate that has expired (cert-manager down, or a self-managed Secret
// that cannot be written: an immutable Secret, a policy that denies the update) fails
// every API server's TLS handshake: the webhook is down for the API server, which
// admits pods unchanged. The replica must then be unready, so its status Lease goes
// stale and the updater stops evicting pods that would come back without their
// fraction. Both the self-managed
// certificate and an external one (--cert-dir) count. (notBefore is not checked: the
// API server's clock decides it, and a replica whose own clock runs behind would go
// unready for a certificate every API server accepts.)
func TestReadyOnlyWithAValidServingCertificate(t *testing.T) {
	ctx := context.Background()
	started := func() error { return nil }
	const validity = 30 * 24 * time.Hour
	for _, tc := range []struct {
		name  string
		shift time.Duration // the clock at the check, from when the certificate was issued
		ready bool
	}{
		{"just issued", 0, true},
		{"a day before expiry", validity - 24*time.Hour, true},
		{"a minute after expiry", validity + time.Minute, false},
		{"a year after expiry", validity + 365*24*time.Hour, false},
		{"an hour before expiry", validity - time.Hour, true},
	} {
		t.Run("self-managed/"+tc.name, func(t *testing.T) {
			issued := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			now := issued
			cm := &CertManager{Client: newFakeReader(t), Namespace: "gpufrac-system", SecretName: "tls",
				DNSNames: []string{"localhost"}, CertValidity: validity, Now: func() time.Time { return now }}
			if err := cm.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			// No check renews it (the Secret cannot be written): the loaded one stays.
			now = issued.Add(tc.shift)
			s := &Server{Certs: cm}
			s.synced.Store(true)
			if err := s.ready(started); (err == nil) != tc.ready {
				t.Errorf("ready() = %v, want ready %v", err, tc.ready)
			}
		})
		t.Run("external/"+tc.name, func(t *testing.T) {
			// Files as cert-manager writes them, issued so that the real clock is
			// tc.shift after the issue.
			issued := time.Now().Add(-tc.shift)
			ca, caKey, err := newCA(issued, 10*validity)
			if err != nil {
				t.Fatal(err)
			}
			crt, key, err := issueServing(ca, caKey, []string{"localhost"}, nil, issued, validity)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
				t.Fatal(err)
			}
			s := &Server{}
			opts, err := s.loadCerts(ctx, nil, Options{Namespace: "gpufrac-system", CertDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			s.synced.Store(true)
			if err := s.ready(started); (err == nil) != tc.ready {
				t.Errorf("ready() = %v, want ready %v", err, tc.ready)
			}
			// The webhook server's TLS options serve the files' certificate.
			cfg := &tls.Config{}
			for _, o := range opts {
				o(cfg)
			}
			if got, err := cfg.GetCertificate(nil); err != nil || !bytes.Equal(got.Certificate[0], parseCerts(crt)[0].Raw) {
				t.Errorf("served certificate is not the one in --cert-dir (%v)", err)
			}
		})
	}
}

package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the certificate Secret (kubernetes.io/tls plus the CA).
const (
	// SecretCABundle holds the PEM CA certificates the webhook configurations trust: the
	// current CA first, then older CAs that have not expired yet.
	SecretCABundle = "ca.crt"
	// SecretCAKey holds the PEM private key of the current CA.
	SecretCAKey = "ca.key"
	// AnnotationCARotatedAt on the Secret is when the current CA was created (RFC 3339);
	// a serving certificate is issued by a new CA only CARolloverDelay after that, so the
	// API server trusts the new CA before it sees a certificate signed by it.
	AnnotationCARotatedAt = "gpufrac.io/ca-rotated-at"
)

// CertManager keeps a self-managed CA and serving certificate in a Secret, renews them
// before they expire, and serves the certificate to the webhook server through
// GetCertificate. Several replicas may share one Secret: writes use optimistic
// concurrency, and every replica loads what the Secret holds. It is a manager.Runnable
// that re-checks the Secret every CheckInterval.
type CertManager struct {
	// Client reads and writes the Secret; it should not be a cache (a fresh read decides
	// rotation).
	Client client.Client
	// Namespace and SecretName locate the Secret.
	Namespace, SecretName string
	// DNSNames and IPAddresses are the serving certificate's subject alternative names.
	DNSNames []string
	// IPAddresses are the serving certificate's IP subject alternative names.
	IPAddresses []net.IP
	// CAValidity is the CA's lifetime. Default 10 years.
	CAValidity time.Duration
	// CertValidity is the serving certificate's lifetime. Default 1 year.
	CertValidity time.Duration
	// CARolloverDelay is how long a new CA is trusted (in the webhook configurations'
	// caBundle) before it issues the serving certificate. Default 5m.
	CARolloverDelay time.Duration
	// CheckInterval is the period of Secret checks. Default 1m.
	CheckInterval time.Duration
	// OnBundle, if set, is called with the CA bundle after every check that loaded one
	// (to patch the webhook configurations); its error is logged and retried next check.
	OnBundle func(ctx context.Context, caBundle []byte) error
	// Now returns the current time; tests replace it. Default time.Now.
	Now func() time.Time

	cert   atomic.Pointer[tls.Certificate]
	bundle atomic.Pointer[[]byte]
	mu     sync.Mutex
}

// renewAt is the share of a certificate's lifetime after which it is renewed: a third of
// the lifetime is left then.
const renewAt = 2.0 / 3.0

func (m *CertManager) defaults() {
	if m.CAValidity <= 0 {
		m.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if m.CertValidity <= 0 {
		m.CertValidity = 365 * 24 * time.Hour
	}
	if m.CARolloverDelay <= 0 {
		m.CARolloverDelay = 5 * time.Minute
	}
	if m.CheckInterval <= 0 {
		m.CheckInterval = time.Minute
	}
	if m.Now == nil {
		m.Now = time.Now
	}
}

// GetCertificate returns the loaded serving certificate (for tls.Config.GetCertificate);
// it errors until the first successful Ensure.
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("serving certificate not loaded yet")
}

// CABundle returns the PEM CA bundle loaded by the last Ensure, or nil.
func (m *CertManager) CABundle() []byte {
	if b := m.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// Loaded is a readiness check: nil once a certificate is loaded, while it has not
// expired (Now). An expired one, kept because no check could renew it (the Secret
// cannot be written), fails every API server's handshake.
func (m *CertManager) Loaded() error {
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	return unexpired(m.GetCertificate, now())
}

// unexpired returns nil when get returns a serving certificate that has not expired at
// now, else why not. notBefore is not checked: the API server's clock decides it, and a
// replica whose clock runs behind would go unready for a certificate it accepts.
func unexpired(get func(*tls.ClientHelloInfo) (*tls.Certificate, error), now time.Time) error {
	c, err := get(nil)
	if err != nil {
		return err
	}
	if c == nil || len(c.Certificate) == 0 {
		return errors.New("serving certificate not loaded yet")
	}
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
	}
	if !now.Before(leaf.NotAfter) {
		return fmt.Errorf("serving certificate expired at %s: API servers cannot call the webhook", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// NeedLeaderElection is false: every replica serves and needs the certificate.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start checks the Secret every CheckInterval until ctx ends. Errors are logged and
// counted; the last loaded certificate stays in use.
func (m *CertManager) Start(ctx context.Context) error {
	m.defaults()
	log := klog.FromContext(ctx).WithName("certs")
	t := time.NewTicker(m.CheckInterval)
	defer t.Stop()
	for {
		if err := m.Ensure(ctx); err != nil && ctx.Err() == nil {
			errorsTotal.WithLabelValues("certificate").Inc()
			log.Error(err, "Checking the webhook certificate", "secret", m.Namespace+"/"+m.SecretName)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Ensure reads the Secret, creates or renews the CA and the serving certificate when
// needed, writes the Secret back (create, or update at the read resourceVersion), loads
// the certificate, and calls OnBundle. A write conflict with another replica re-reads
// the Secret once. It returns API and certificate errors.
func (m *CertManager) Ensure(ctx context.Context) error {
	m.defaults()
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if err = m.ensureOnce(ctx); err == nil || !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) {
			break
		}
	}
	if err != nil {
		return err
	}
	if m.OnBundle != nil {
		if err := m.OnBundle(ctx, m.CABundle()); err != nil {
			return fmt.Errorf("publishing the CA bundle: %w", err)
		}
	}
	return nil
}

func (m *CertManager) ensureOnce(ctx context.Context) error {
	now := m.Now()
	sec := &corev1.Secret{}
	err := m.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.SecretName}, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s/%s: %w", m.Namespace, m.SecretName, err)
	}
	if !exists {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName, Labels: map[string]string{"app.kubernetes.io/name": "gpufrac", "app.kubernetes.io/component": "admission"}},
			Type:       corev1.SecretTypeTLS,
		}
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	changed, err := m.renew(sec, now)
	if err != nil {
		return err
	}
	if changed {
		if exists {
			err = m.Client.Update(ctx, sec)
		} else {
			err = m.Client.Create(ctx, sec)
		}
		if err != nil {
			return fmt.Errorf("writing Secret %s/%s: %w", m.Namespace, m.SecretName, err)
		}
		klog.FromContext(ctx).Info("Webhook certificate written", "secret", m.Namespace+"/"+m.SecretName)
	}
	return m.load(sec)
}

// renew updates the Secret's data in place when the CA or the serving certificate is
// missing, invalid, past renewAt of its lifetime, or (serving) not issued by the current
// CA or not covering the configured names. It reports whether anything changed.
func (m *CertManager) renew(sec *corev1.Secret, now time.Time) (bool, error) {
	changed := false
	cas := parseCerts(sec.Data[SecretCABundle])
	caKey, _ := parseKey(sec.Data[SecretCAKey])
	var ca *x509.Certificate
	if len(cas) > 0 && caKey != nil && keyMatches(cas[0], caKey) && !dueForRenewal(cas[0], now) {
		ca = cas[0]
	}
	if ca == nil {
		cert, key, err := newCA(now, m.CAValidity)
		if err != nil {
			return false, err
		}
		keyPEM, err := encodeKey(key)
		if err != nil {
			return false, err
		}
		// Keep older CAs that still verify certificates until they expire.
		bundle := [][]byte{pemCert(cert.Raw)}
		for _, old := range cas {
			if now.Before(old.NotAfter) && !bytes.Equal(old.Raw, cert.Raw) {
				bundle = append(bundle, pemCert(old.Raw))
			}
		}
		sec.Data[SecretCABundle] = bytes.Join(bundle, nil)
		sec.Data[SecretCAKey] = keyPEM
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		sec.Annotations[AnnotationCARotatedAt] = now.UTC().Format(time.RFC3339)
		ca, caKey, cas = cert, key, parseCerts(sec.Data[SecretCABundle])
		changed = true
	}
	serving := parseCerts(sec.Data[corev1.TLSCertKey])
	servingKey, _ := parseKey(sec.Data[corev1.TLSPrivateKeyKey])
	valid := len(serving) > 0 && servingKey != nil && keyMatches(serving[0], servingKey) &&
		!dueForRenewal(serving[0], now) && m.covers(serving[0]) && trustedBy(serving[0], cas)
	signedByCurrent := valid && serving[0].CheckSignatureFrom(ca) == nil
	if valid && signedByCurrent {
		return changed, nil
	}
	if valid && !signedByCurrent {
		// The current CA is new: wait until the API server has had time to trust it.
		rotated, err := time.Parse(time.RFC3339, sec.Annotations[AnnotationCARotatedAt])
		if err == nil && now.Before(rotated.Add(m.CARolloverDelay)) {
			return changed, nil
		}
	}
	certPEM, keyPEM, err := issueServing(ca, caKey, m.DNSNames, m.IPAddresses, now, min(m.CertValidity, ca.NotAfter.Sub(now)))
	if err != nil {
		return false, err
	}
	sec.Data[corev1.TLSCertKey] = certPEM
	sec.Data[corev1.TLSPrivateKeyKey] = keyPEM
	return true, nil
}

// covers reports whether the certificate names every configured DNS name and IP.
func (m *CertManager) covers(c *x509.Certificate) bool {
	for _, d := range m.DNSNames {
		if !slices.Contains(c.DNSNames, d) {
			return false
		}
	}
	for _, ip := range m.IPAddresses {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// load makes the Secret's serving certificate and bundle current.
func (m *CertManager) load(sec *corev1.Secret) error {
	pair, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", m.Namespace, m.SecretName, err)
	}
	bundle := bytes.Clone(sec.Data[SecretCABundle])
	m.cert.Store(&pair)
	m.bundle.Store(&bundle)
	if pair.Leaf != nil {
		certExpiry.WithLabelValues("serving").Set(float64(pair.Leaf.NotAfter.Unix()))
	}
	if cas := parseCerts(bundle); len(cas) > 0 {
		certExpiry.WithLabelValues("ca").Set(float64(cas[0].NotAfter.Unix()))
	}
	return nil
}

// dueForRenewal reports whether a self-managed certificate has a third of its validity
// left. The validity counts from when it was issued, NotBefore + backdate (NotBefore is
// backdated for clock skew), not from NotBefore: counting the backdating as lifetime made
// a certificate shorter than about 10 minutes (--cert-validity) due at once, so the
// Secret was rewritten at every check.
func dueForRenewal(c *x509.Certificate, now time.Time) bool {
	issued := c.NotBefore.Add(backdate)
	if issued.After(c.NotAfter) {
		issued = c.NotBefore
	}
	life := c.NotAfter.Sub(issued)
	return !now.Before(issued.Add(time.Duration(float64(life) * renewAt)))
}

func trustedBy(c *x509.Certificate, cas []*x509.Certificate) bool {
	for _, ca := range cas {
		if c.CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}

func keyMatches(c *x509.Certificate, key *ecdsa.PrivateKey) bool {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && pub.Equal(&key.PublicKey)
}

// backdate tolerates clock skew between this process and the API server.
const backdate = 5 * time.Minute

// newKeyAndSerial returns a new P-256 key and a random 127-bit serial number for a
// certificate of it.
func newKeyAndSerial() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("gpufrac-admission-ca@%d", now.Unix()), Organization: []string{"gpufrac"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func issueServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, dns []string, ips []net.IP, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, nil, err
	}
	cn := "gpufrac-admission"
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"gpufrac"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	return pemCert(der), keyPEM, err
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// parseCerts returns the certificates of a PEM bundle, skipping what does not parse.
func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func parseKey(data []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an ECDSA key")
	}
	return ek, nil
}

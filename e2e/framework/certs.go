package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// certValidity is how long generated certificates stay valid; long enough for a demo
// cluster left running for weeks.
const certValidity = 365 * 24 * time.Hour

// keyPair is a certificate with its private key, in parsed and PEM form.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newECKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// newCA creates a self-signed certificate authority.
func newCA(cn string) (*keyPair, error) {
	return newKeyPair(&x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
}

// issue signs a leaf certificate. A cert with DNS names or IPs is a serving cert, one
// without is a client cert.
func (ca *keyPair) issue(cn string, orgs []string, dns []string, ips []net.IP) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:    dns,
		IPAddresses: ips,
	}
	if len(dns) > 0 || len(ips) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	return newKeyPair(tmpl, ca)
}

// newKeyPair creates a key and a certificate of tmpl (given a new serial number, valid
// from an hour ago for certValidity) signed by issuer, or self-signed when issuer is nil.
func newKeyPair(tmpl *x509.Certificate, issuer *keyPair) (*keyPair, error) {
	key, keyPEM, err := newECKey()
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(certValidity)
	parent, signer := tmpl, crypto.Signer(key)
	if issuer != nil {
		parent, signer = issuer.cert, issuer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

func (kp *keyPair) write(certFile, keyFile string) error {
	if err := os.WriteFile(certFile, kp.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, kp.keyPEM, 0o600)
}

// pkiPaths lists the files writePKI creates, all under <Dir>/pki.
type pkiPaths struct {
	CACert, CAKey             string
	ServingCert, ServingKey   string
	SAKey, SAPub              string
	FrontProxyCACert          string
	FrontProxyClientCert      string
	FrontProxyClientKey       string
	AdminKubeconfig           string
	ControllerManagerKubeconf string
	SchedulerKubeconfig       string
}

func newPKIPaths(dir string) pkiPaths {
	p := filepath.Join(dir, "pki")
	return pkiPaths{
		CACert:                    filepath.Join(p, "ca.crt"),
		CAKey:                     filepath.Join(p, "ca.key"),
		ServingCert:               filepath.Join(p, "apiserver.crt"),
		ServingKey:                filepath.Join(p, "apiserver.key"),
		SAKey:                     filepath.Join(p, "sa.key"),
		SAPub:                     filepath.Join(p, "sa.pub"),
		FrontProxyCACert:          filepath.Join(p, "front-proxy-ca.crt"),
		FrontProxyClientCert:      filepath.Join(p, "front-proxy-client.crt"),
		FrontProxyClientKey:       filepath.Join(p, "front-proxy-client.key"),
		AdminKubeconfig:           filepath.Join(dir, "kubeconfig"),
		ControllerManagerKubeconf: filepath.Join(p, "controller-manager.kubeconfig"),
		SchedulerKubeconfig:       filepath.Join(p, "scheduler.kubeconfig"),
	}
}

// writePKI generates the CA, the apiserver serving cert, a front-proxy CA and client, the service-account key pair
// and the kubeconfigs of the admin, the controller-manager and the scheduler, all
// pointing at server (https://127.0.0.1:PORT).
func writePKI(dir, server string) (pkiPaths, error) {
	paths := newPKIPaths(dir)
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		return paths, err
	}
	ca, err := newCA("gpufrac-e2e-ca")
	if err != nil {
		return paths, fmt.Errorf("generate CA: %w", err)
	}
	if err := ca.write(paths.CACert, paths.CAKey); err != nil {
		return paths, err
	}
	serving, err := ca.issue("kube-apiserver", nil,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(serviceIP)})
	if err != nil {
		return paths, fmt.Errorf("generate apiserver serving cert: %w", err)
	}
	if err := serving.write(paths.ServingCert, paths.ServingKey); err != nil {
		return paths, err
	}

	fpCA, err := newCA("gpufrac-e2e-front-proxy-ca")
	if err != nil {
		return paths, fmt.Errorf("generate front-proxy CA: %w", err)
	}
	if err := os.WriteFile(paths.FrontProxyCACert, fpCA.certPEM, 0o644); err != nil {
		return paths, err
	}
	fpClient, err := fpCA.issue("front-proxy-client", nil, nil, nil)
	if err != nil {
		return paths, fmt.Errorf("generate front-proxy client cert: %w", err)
	}
	if err := fpClient.write(paths.FrontProxyClientCert, paths.FrontProxyClientKey); err != nil {
		return paths, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return paths, fmt.Errorf("generate service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return paths, err
	}
	if err := os.WriteFile(paths.SAKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600); err != nil {
		return paths, err
	}
	if err := os.WriteFile(paths.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return paths, err
	}

	for _, u := range []struct {
		cn, org, file string
	}{
		{"kubernetes-admin", "system:masters", paths.AdminKubeconfig},
		{"system:kube-controller-manager", "", paths.ControllerManagerKubeconf},
		{"system:kube-scheduler", "", paths.SchedulerKubeconfig},
	} {
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		kp, err := ca.issue(u.cn, orgs, nil, nil)
		if err != nil {
			return paths, fmt.Errorf("generate client cert %s: %w", u.cn, err)
		}
		if err := writeKubeconfig(u.file, server, ca.certPEM, kp, u.cn); err != nil {
			return paths, err
		}
	}
	return paths, nil
}

func writeKubeconfig(file, server string, caPEM []byte, kp *keyPair, user string) error {
	const name = "gpufrac-e2e"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, file)
}

// ServingCert is a CA and a serving certificate it signed, written as PEM files.
type ServingCert struct {
	// CAFile, CertFile and KeyFile are the paths of the PEM files.
	CAFile, CertFile, KeyFile string
	// CAPEM is the CA certificate, e.g. for a webhook configuration's caBundle.
	CAPEM []byte
}

// WriteServingCert generates a new CA and a serving certificate for 127.0.0.1 and
// localhost signed by it (EC P-256, valid for a year) and writes ca.crt, tls.crt and
// tls.key into dir, created if missing. Errors are from key generation or file writes.
func WriteServingCert(dir, cn string) (ServingCert, error) {
	s := ServingCert{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s, err
	}
	ca, err := newCA(cn + "-ca")
	if err != nil {
		return s, err
	}
	leaf, err := ca.issue(cn, nil, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return s, err
	}
	if err := os.WriteFile(s.CAFile, ca.certPEM, 0o644); err != nil {
		return s, err
	}
	s.CAPEM = ca.certPEM
	return s, leaf.write(s.CertFile, s.KeyFile)
}

package cluster

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// certSummary is what the components rely on in a certificate.
type certSummary struct {
	Subject   string
	Issuer    string
	IsCA      bool
	KeyUsage  x509.KeyUsage
	ExtUsage  []x509.ExtKeyUsage
	DNSNames  []string
	IPs       []string
	NotBefore time.Time
	NotAfter  time.Time
}

func summarize(t *testing.T, pemBytes []byte) (*x509.Certificate, certSummary) {
	t.Helper()
	blk, rest := pem.Decode(pemBytes)
	if blk == nil || blk.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("not one PEM certificate: %q", pemBytes)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	s := certSummary{
		Subject: c.Subject.CommonName, Issuer: c.Issuer.CommonName, IsCA: c.IsCA, KeyUsage: c.KeyUsage,
		ExtUsage: c.ExtKeyUsage, DNSNames: c.DNSNames, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
	}
	for _, ip := range c.IPAddresses {
		s.IPs = append(s.IPs, ip.String())
	}
	return c, s
}

func parseKey(t *testing.T, pemBytes []byte, typ string) any {
	t.Helper()
	blk, _ := pem.Decode(pemBytes)
	if blk == nil || blk.Type != typ {
		t.Fatalf("not a PEM %s: %q", typ, pemBytes)
	}
	var k any
	var err error
	if typ == "PUBLIC KEY" {
		k, err = x509.ParsePKIXPublicKey(blk.Bytes)
	} else {
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewPKI(t *testing.T) {
	now := time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC)
	p, err := newPKI(now)
	if err != nil {
		t.Fatal(err)
	}
	ca, caSum := summarize(t, p.CACert)
	srv, srvSum := summarize(t, p.ServerCert)
	from, until := now.Add(-time.Hour), now.Add(7*24*time.Hour)
	if diff := cmp.Diff(certSummary{
		Subject: "proxykit-e2e-ca", Issuer: "proxykit-e2e-ca", IsCA: true,
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		NotBefore: from, NotAfter: until,
	}, caSum); diff != "" {
		t.Errorf("CA (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(certSummary{
		Subject: "kube-apiserver", Issuer: "proxykit-e2e-ca",
		KeyUsage:  x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:  []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:       []string{"10.88.0.2", "10.96.0.1", "127.0.0.1"},
		NotBefore: from, NotAfter: until,
	}, srvSum); diff != "" {
		t.Errorf("API server certificate (-want +got):\n%s", diff)
	}
	// The chain verifies for every name the API server is reached by.
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range append(srv.DNSNames, "10.88.0.2", "10.96.0.1") {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	// Each key is the private half of its certificate or public key.
	pairs := []struct {
		name string
		priv []byte
		pub  any
	}{
		{"CA", p.CAKey, ca.PublicKey},
		{"API server", p.ServerKey, srv.PublicKey},
		{"service account", p.SAPrivateKey, parseKey(t, p.SAPublicKey, "PUBLIC KEY")},
	}
	for _, pr := range pairs {
		k, ok := parseKey(t, pr.priv, "PRIVATE KEY").(*ecdsa.PrivateKey)
		if !ok || !k.PublicKey.Equal(pr.pub) {
			t.Errorf("%s: private key does not match its public key", pr.name)
		}
	}
	if !net.IP(NodeIP(1).AsSlice()).Equal(srv.IPAddresses[0]) {
		t.Errorf("first IP SAN %v, want node 1's %v", srv.IPAddresses[0], NodeIP(1))
	}
}

package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// pki is the cluster's certificate authority, the API server's serving
// certificate and the service-account signing key, all PEM-encoded. A real
// CA is needed: kube-controller-manager publishes it to every namespace as
// kube-root-ca.crt, which every pod mounts.
type pki struct {
	CACert, CAKey             []byte
	ServerCert, ServerKey     []byte
	SAPublicKey, SAPrivateKey []byte
}

// certLifetime covers any run; a fresh PKI is made by every Up.
const certLifetime = 7 * 24 * time.Hour

// apiServerSANs are the names and addresses the API server is reached by:
// its node IP (kubeconfigs), the kubernetes Service (pods), loopback
// (components beside it) and the Service's DNS names.
func apiServerSANs() ([]string, []net.IP) {
	return []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain},
		[]net.IP{net.IP(NodeIP(1).AsSlice()), net.ParseIP(APIServiceIP).To4(), net.IPv4(127, 0, 0, 1).To4()}
}

// newPKI makes a CA valid from now, signs the API server's certificate
// with it and makes the service-account key pair. ECDSA P-256 keys: every
// component accepts them and they cost nothing to make.
func newPKI(now time.Time) (pki, error) {
	var p pki
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("cluster: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "proxykit-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return p, fmt.Errorf("cluster: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, fmt.Errorf("cluster: CA certificate: %w", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("cluster: API server key: %w", err)
	}
	names, ips := apiServerSANs()
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, srvKey.Public(), caKey)
	if err != nil {
		return p, fmt.Errorf("cluster: API server certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("cluster: service-account key: %w", err)
	}
	p.CACert = pemBlock("CERTIFICATE", caDER)
	p.ServerCert = pemBlock("CERTIFICATE", srvDER)
	if p.CAKey, err = pemPrivateKey(caKey); err != nil {
		return p, err
	}
	if p.ServerKey, err = pemPrivateKey(srvKey); err != nil {
		return p, err
	}
	if p.SAPrivateKey, err = pemPrivateKey(saKey); err != nil {
		return p, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return p, fmt.Errorf("cluster: service-account public key: %w", err)
	}
	p.SAPublicKey = pemBlock("PUBLIC KEY", pub)
	return p, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pemPrivateKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("cluster: private key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

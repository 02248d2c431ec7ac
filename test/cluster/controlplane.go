package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	etcdClientURL = "http://127.0.0.1:2379"
	apiPort       = "6443"
	// ServiceCIDR is the apiserver's --service-cluster-ip-range.
	ServiceCIDR = "10.96.0.0/16"
)

// ControlPlaneConfig configures StartControlPlane. The zero value runs etcd
// and the apiserver reachable only on the namespace's loopback.
type ControlPlaneConfig struct {
	// Setup runs in the new namespace before etcd and the apiserver start,
	// e.g. to attach it to a lab's bridge; nil does nothing.
	Setup func(ns *NS)
	// Address is the apiserver's advertised address, where agents in other
	// namespaces reach it; "" is 127.0.0.1 (reachable from the namespace and,
	// through NS.Dial, from the test only).
	Address string
}

// ControlPlane is a running etcd and kube-apiserver inside a namespace of
// their own.
type ControlPlane struct {
	NS *NS
	// Admin is a clientset authenticated as a system:masters user.
	Admin *kubernetes.Clientset
	// Address is where the apiserver is reached from other namespaces.
	Address string

	t          testing.TB
	dir        string
	bins       Binaries
	adminToken string
	etcd, api  *process
}

// StartControlPlane starts etcd and kube-apiserver (RBAC authorization, a
// static admin token, service-account tokens signed by a fresh key) in a
// new namespace, waits for /readyz and tears both down when t ends.
func StartControlPlane(t testing.TB, bins Binaries, cfg ControlPlaneConfig) *ControlPlane {
	t.Helper()
	ns := NewNS(t, "cp")
	if cfg.Setup != nil {
		cfg.Setup(ns)
	}
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1"
	}
	c := &ControlPlane{NS: ns, Address: cfg.Address, t: t, dir: t.TempDir(), bins: bins}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	c.adminToken = hex.EncodeToString(tok[:])
	if err := c.writeFiles(); err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(c.RESTConfig(c.adminToken))
	if err != nil {
		t.Fatal(err)
	}
	c.Admin = admin
	c.StartEtcd()
	c.StartAPIServer()
	return c
}

// writeFiles writes the token file and the service-account key.
func (c *ControlPlane) writeFiles() error {
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", c.adminToken)
	if err := os.WriteFile(filepath.Join(c.dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if err := os.WriteFile(filepath.Join(c.dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "sa.pub"), pub, 0o600)
}

// StartEtcd starts etcd (again, after KillEtcd, on the same data) and
// waits until it is healthy.
func (c *ControlPlane) StartEtcd() {
	c.t.Helper()
	p, err := startProcess(c.t, c.NS, c.dir, "etcd", c.bins.Etcd,
		"--name=pk", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdClientURL, "--advertise-client-urls="+etcdClientURL,
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=pk=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		c.t.Fatal(err)
	}
	c.etcd = p
	hc := c.httpClient("")
	if err := poll(context.Background(), 30*time.Second, func() bool {
		resp, err := hc.Get(etcdClientURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && !p.exited()
	}); err != nil {
		c.t.Fatalf("etcd not healthy: %v\n%s", err, tail(p.log, 20))
	}
}

// KillEtcd kills etcd by its PID.
func (c *ControlPlane) KillEtcd() { c.etcd.kill() }

// StartAPIServer starts kube-apiserver (again, after KillAPIServer) with
// extra flags and waits for /readyz.
func (c *ControlPlane) StartAPIServer(extra ...string) {
	c.t.Helper()
	args := append([]string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=0.0.0.0", "--secure-port=" + apiPort, "--advertise-address=" + c.Address,
		"--cert-dir=" + filepath.Join(c.dir, "certs"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(c.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(c.dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(c.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--endpoint-reconciler-type=none",
		"--profiling=false"}, extra...)
	p, err := startProcess(c.t, c.NS, c.dir, "kube-apiserver", c.bins.APIServer, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.api = p
	if err := c.WaitReady(context.Background(), 60*time.Second); err != nil {
		c.t.Fatalf("kube-apiserver not ready: %v\n%s", err, tail(p.log, 30))
	}
}

// KillAPIServer kills kube-apiserver by its PID.
func (c *ControlPlane) KillAPIServer() { c.api.kill() }

// WaitReady polls /readyz until it answers 200 or timeout passes.
func (c *ControlPlane) WaitReady(ctx context.Context, timeout time.Duration) error {
	hc := c.httpClient(c.adminToken)
	return poll(ctx, timeout, func() bool {
		if c.api.exited() {
			return false
		}
		resp, err := hc.Get("https://127.0.0.1:" + apiPort + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// httpClient talks to the namespace's loopback, with token as bearer.
func (c *ControlPlane) httpClient(token string) *http.Client {
	tr := &http.Transport{
		DialContext:     func(_ context.Context, network, addr string) (net.Conn, error) { return c.NS.Dial(network, addr) },
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: bearer{token, tr}}
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.rt.RoundTrip(r)
}

// RESTConfig is a client configuration for the test process, dialling the
// apiserver on its namespace's loopback, authenticated by token.
func (c *ControlPlane) RESTConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            "https://127.0.0.1:" + apiPort,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Dial:            func(_ context.Context, network, addr string) (net.Conn, error) { return c.NS.Dial(network, addr) },
		QPS:             -1,
	}
}

// ServiceAccountToken creates the service account namespace/name (if
// missing) and returns a token for it from the TokenRequest API.
func (c *ControlPlane) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := c.Admin.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("service account %s/%s: %w", namespace, name, err)
	}
	exp := int64(24 * 3600)
	tr, err := c.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// WriteKubeconfig writes a kubeconfig reaching the apiserver at
// c.Address with token into dir and returns its path.
func (c *ControlPlane) WriteKubeconfig(dir, name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: "https://" + net.JoinHostPort(c.Address, apiPort), InsecureSkipTLSVerify: true}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: name}
	cfg.CurrentContext = "lab"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// poll calls cond every 50ms until it holds, timeout passes or ctx ends.
func poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// httpIn is an HTTP client dialling from inside ns.
func httpIn(ns *NS) *http.Client {
	// Each call makes a new client: a kept-alive connection would stay
	// open in the server (the agent's has no idle timeout) and show up as
	// a leak of its goroutines and files.
	tr := &http.Transport{
		DialContext:       func(_ context.Context, network, addr string) (net.Conn, error) { return ns.Dial(network, addr) },
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

// advanceEtcd writes n revisions of a key outside the apiserver's prefix
// and compacts etcd up to the last, so that resource versions handed out
// before are gone.
func (c *ControlPlane) advanceEtcd(ctx context.Context, n int) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{etcdClientURL},
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(_ context.Context, addr string) (net.Conn, error) { return c.NS.Dial("tcp", addr) })},
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	var rev int64
	for i := range n {
		resp, err := cli.Put(ctx, "/proxykit-test/advance", strconv.Itoa(i))
		if err != nil {
			return fmt.Errorf("etcd put: %w", err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev); err != nil {
		return fmt.Errorf("etcd compact: %w", err)
	}
	return nil
}

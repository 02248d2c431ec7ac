package cluster

import (
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/proxykit/proxykit/test/e2e/build"
)

// MaxNodes is the most nodes a cluster has: the upstream tests that need
// the most (NodePort health checks when externalTrafficPolicy changes) need
// three.
const MaxNodes = 3

// The cluster's fixed addressing (see the package doc).
const (
	// ClusterCIDR holds every node's pod subnet.
	ClusterCIDR = "10.244.0.0/16"
	// ServiceCIDR holds every Service's cluster IP.
	ServiceCIDR = "10.96.0.0/16"
	// DNSServiceIP is the kube-dns Service's cluster IP, every pod's
	// nameserver.
	DNSServiceIP = "10.96.0.10"
	// APIServiceIP is the kubernetes Service's cluster IP.
	APIServiceIP = "10.96.0.1"
	// BridgeIP is the runner's address on the fabric.
	BridgeIP = "10.88.0.1"
	// fabricBits is the prefix length of the fabric's subnet.
	fabricBits = 24
	// ClusterDomain is the DNS domain of Services.
	ClusterDomain = "cluster.local"
	// ProxyHealthzPort is where the proxy serves /healthz on each node.
	ProxyHealthzPort = 10256
	apiServerPort    = 6443
)

// Config says what cluster Up brings up.
type Config struct {
	// Nodes is how many nodes, 1 to MaxNodes; zero means 1.
	Nodes int
	// Bin names the programs to run; Etcd, APIServer, ControllerManager,
	// Scheduler, Kubelet and CoreDNS are required.
	Bin build.Binaries
	// Images are OCI tarballs imported into every node's containerd
	// (pause and agnhost at least: no node pulls from a registry).
	Images []string
	// WorkDir receives the configurations, certificates, kubeconfigs and
	// every process's log (WorkDir/<node>/<process>.log). It must not lie
	// under /run, /var/lib or /var/log, which the nodes mount over.
	WorkDir string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// VM, when set, makes the worker nodes virtual machines (see VM);
	// Nodes must then be 1, the control plane's namespace. Nil: every node
	// is a namespace.
	VM *VM
}

// Proxy is the service proxy StartProxy runs on every node.
type Proxy struct {
	// Name names the proxy in logs and process names: "proxykit" or
	// "kube-proxy".
	Name string
	// Binary is the program; it must accept kube-proxy's flags.
	Binary string
	// Mode is its --proxy-mode; empty leaves the program's default.
	Mode string
	// Args are appended to the flags StartProxy passes.
	Args []string
}

// withDefaults returns cfg with its zero values replaced, or an error
// naming what is missing or out of range.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return cfg, fmt.Errorf("cluster: Nodes %d: want 1 to %d", cfg.Nodes, MaxNodes)
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.WorkDir == "" {
		return cfg, fmt.Errorf("cluster: WorkDir is required")
	}
	dir, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return cfg, fmt.Errorf("cluster: WorkDir %q: %w", cfg.WorkDir, err)
	}
	for _, hidden := range nodeTmpfs {
		if dir == hidden || strings.HasPrefix(dir, hidden+"/") || (hidden == "/run" && strings.HasPrefix(dir, "/var/run/")) {
			return cfg, fmt.Errorf("cluster: WorkDir %q lies under %s, which every node mounts over", cfg.WorkDir, hidden)
		}
	}
	cfg.WorkDir = dir
	if cfg.VM != nil {
		if cfg.VM, err = cfg.VM.withDefaults(cfg.Nodes); err != nil {
			return cfg, err
		}
	}
	for name, path := range map[string]string{
		"Etcd": cfg.Bin.Etcd, "APIServer": cfg.Bin.APIServer, "ControllerManager": cfg.Bin.ControllerManager,
		"Scheduler": cfg.Bin.Scheduler, "Kubelet": cfg.Bin.Kubelet, "CoreDNS": cfg.Bin.CoreDNS,
	} {
		if path == "" {
			return cfg, fmt.Errorf("cluster: Bin.%s is required", name)
		}
	}
	return cfg, nil
}

// nodeTmpfs are the directories every node mounts a tmpfs of its own over.
var nodeTmpfs = [...]string{"/run", "/var/lib", "/var/log"}

// NodeName is the name of node i (1-based).
func NodeName(i int) string { return fmt.Sprintf("e2e-node-%d", i) }

// NodeIP is the address of node i (1-based) on the fabric.
func NodeIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 88, 0, byte(i + 1)}) }

// APIServerURL is the API server's address, valid from the runner and
// every node.
func APIServerURL() string { return fmt.Sprintf("https://%s:%d", NodeIP(1), apiServerPort) }

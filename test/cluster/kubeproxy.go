package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kube-proxy's identity in the lab, as kubeadm installs it: a service
// account bound to the apiserver's bootstrap role system:node-proxier.
const (
	kubeProxySA   = "kube-proxy"
	kubeProxyRole = "system:node-proxier"
)

// The ports kube-proxy and the agent serve /healthz and metrics on by
// default (kube-proxy's), and the ones an agent started beside a running
// kube-proxy uses until kube-proxy is gone.
const (
	HealthzAddr       = "127.0.0.1:10256"
	MetricsAddr       = "127.0.0.1:10249"
	SideBySideHealthz = "127.0.0.1:10266"
	SideBySideMetrics = "127.0.0.1:10259"
	syncTimestamp     = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
)

// kubeProxyKubeconfig creates kube-proxy's service account and binding
// once and returns its kubeconfig.
func (l *Lab) kubeProxyKubeconfig() string {
	l.t.Helper()
	if l.kpKubeconfig != "" {
		return l.kpKubeconfig
	}
	ctx := context.Background()
	token, err := l.CP.ServiceAccountToken(ctx, agentSANS, kubeProxySA)
	if err != nil {
		l.t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lab:" + kubeProxySA},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kubeProxyRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentSANS, Name: kubeProxySA}},
	}
	if _, err := l.CP.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		l.t.Fatalf("kube-proxy's binding: %v", err)
	}
	if l.kpKubeconfig, err = l.CP.WriteKubeconfig(l.dir, kubeProxySA, token); err != nil {
		l.t.Fatal(err)
	}
	return l.kpKubeconfig
}

// StartKubeProxy starts upstream kube-proxy on the node in mode
// ("iptables" or "nftables"), serving /healthz and metrics where kube-proxy
// does by default; extra flags come last. The conntrack settings are left
// alone: nf_conntrack_max is the machine's, not the namespace's.
func (n *Node) StartKubeProxy(mode string, extra ...string) {
	l := n.lab
	l.t.Helper()
	args := append([]string{
		"--kubeconfig", l.kubeProxyKubeconfig(), "--hostname-override", n.Name,
		"--proxy-mode", mode, "--cluster-cidr", ClusterCIDR,
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0", "--oom-score-adj=0",
		"--healthz-bind-address", HealthzAddr, "--metrics-bind-address", MetricsAddr,
	}, extra...)
	p, err := startProcess(l.t, n.NS, l.dir, "kube-proxy-"+n.Name, l.CP.bins.KubeProxy, args...)
	if err != nil {
		l.t.Fatal(err)
	}
	n.kubeProxy = p
}

// StopKubeProxy stops kube-proxy with SIGTERM, as deleting its pod does:
// its rules stay in the kernel.
func (n *Node) StopKubeProxy() { n.kubeProxy.stop(10 * time.Second) }

// KubeProxyCleanup runs "kube-proxy --cleanup" in the node's namespace and
// returns its output.
func (n *Node) KubeProxyCleanup() (string, error) {
	return n.NS.Run(n.lab.CP.bins.KubeProxy, "--cleanup")
}

// AgentCleanup runs "nodeagent --cleanup" in the node's namespace, with
// the flags the agent runs with, and returns its output.
func (n *Node) AgentCleanup() (string, error) {
	return n.NS.Run(n.lab.bin, n.agentArgs("--cleanup")...)
}

// Synced checks that the proxy serving metrics at addr in the node's
// namespace (the agent or kube-proxy: both export kube-proxy's metric) has
// programmed its rules at least once.
func (n *Node) Synced(addr string) error {
	v, err := metricAt(n.NS, addr, syncTimestamp)
	if err != nil {
		return err
	}
	if v == 0 {
		return fmt.Errorf("%s: no sync yet (metrics at %s)", n.Name, addr)
	}
	return nil
}

// Owner is whose objects in a node's kernel a check looks for.
type Owner int

const (
	// KubeProxy is upstream kube-proxy: iptables chains KUBE-, nftables
	// tables kube-proxy. KUBE-FIREWALL is left out: it is kubelet's chain,
	// which kube-proxy's iptables mode creates a copy of and, kubelet
	// owning it, deliberately leaves in place on --cleanup.
	KubeProxy Owner = iota
	// Agent is the node agent, in every mode: chains PK-, PKU- and PKV-,
	// tables proxykit.
	Agent
)

// Objects lists what owner holds in the node's kernel, as "ip6 nat
// KUBE-SERVICES" (an iptables chain) or "nft ip kube-proxy" (a table).
func (n *Node) Objects(owner Owner) ([]string, error) {
	var out []string
	for _, fam := range []struct{ save, name string }{{"iptables-save", "ip"}, {"ip6tables-save", "ip6"}} {
		save, err := n.NS.Run(fam.save)
		if err != nil {
			return nil, err
		}
		table := ""
		for _, line := range strings.Split(save, "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, ":"):
				chain, _, _ := strings.Cut(line[1:], " ")
				if owns(owner, chain) {
					out = append(out, fam.name+" "+table+" "+chain)
				}
			}
		}
	}
	tables, err := n.NS.Run("nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	want := map[Owner]string{KubeProxy: "kube-proxy", Agent: "proxykit"}[owner]
	for _, line := range strings.Split(tables, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" && f[2] == want {
			out = append(out, "nft "+f[1]+" "+f[2])
		}
	}
	slices.Sort(out)
	return out, nil
}

func owns(owner Owner, chain string) bool {
	if owner == KubeProxy {
		return strings.HasPrefix(chain, "KUBE-") && chain != "KUBE-FIREWALL"
	}
	return strings.HasPrefix(chain, "PK-") || strings.HasPrefix(chain, "PKU-") || strings.HasPrefix(chain, "PKV-")
}

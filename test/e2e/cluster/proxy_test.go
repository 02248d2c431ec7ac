package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProxyArgs(t *testing.T) {
	c := &Cluster{cfg: Config{WorkDir: "/w"}}
	n := &node{i: 2, name: NodeName(2), ip: NodeIP(2)}
	got := c.proxyArgs(n, Proxy{Name: "kube-proxy", Binary: "/b/kube-proxy", Mode: "nftables", Args: []string{"--v=2"}})
	want := []string{
		"--kubeconfig=/w/kube-proxy.kubeconfig",
		"--hostname-override=e2e-node-2",
		"--cluster-cidr=10.244.0.0/16",
		"--conntrack-max-per-core=0",
		"--oom-score-adj=0",
		"--healthz-bind-address=0.0.0.0:10256",
		"--metrics-bind-address=127.0.0.1:10249",
		"--proxy-mode=nftables",
		"--v=2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("proxy flags (-want +got):\n%s", diff)
	}
}

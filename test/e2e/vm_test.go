package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/test/e2e/cluster"
)

func TestClusterKinds(t *testing.T) {
	for _, tc := range []struct {
		name             string
		modes, kubeProxy []string
		want             []bool
	}{
		{"namespaces only", []string{"iptables", "nftables"}, []string{"iptables"}, []bool{false}},
		{"VMs only", []string{"ipvs"}, []string{"ipvs"}, []bool{true}},
		{"both, namespaces first", []string{"iptables", "ipvs"}, nil, []bool{false, true}},
		{"kube-proxy alone in a VM", nil, []string{"ipvs"}, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clusterKinds(options{modes: tc.modes, kubeProxy: tc.kubeProxy})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("clusterKinds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProxiesOn(t *testing.T) {
	ps := []cluster.Proxy{{Name: "kube-proxy", Mode: "ipvs"}, {Name: "proxykit", Mode: "iptables"}, {Name: "proxykit", Mode: "ipvs"}}
	if diff := cmp.Diff([]cluster.Proxy{{Name: "kube-proxy", Mode: "ipvs"}, {Name: "proxykit", Mode: "ipvs"}}, proxiesOn(ps, true)); diff != "" {
		t.Errorf("on VMs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]cluster.Proxy{{Name: "proxykit", Mode: "iptables"}}, proxiesOn(ps, false)); diff != "" {
		t.Errorf("on namespaces (-want +got):\n%s", diff)
	}
}

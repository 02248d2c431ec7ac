package main

import (
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/vmtest"
)

// TestKernelIPVSInVM runs the agent's ipvs-mode kernel test inside a VM
// whose kernel has IPVS and dummy links (this machine's may have
// neither) and lacks xfrm_user, as some nodes' do: the agent must not
// need it.
func TestKernelIPVSInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	vmtest.Run(t, vmtest.Config{
		Run: "^TestKernelIPVSServesTraffic$",
		Modules: []string{
			"ip_vs", "ip_vs_rr", "dummy", "ip_set", "ip_set_hash_ip", "ip_set_hash_ipport",
			"ip_set_hash_ipportip", "ip_set_hash_ipportnet", "xt_set",
		},
		Omit:    []string{"xfrm_user"},
		Tools:   []string{"iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save"},
		Args:    []string{"-test.v"},
		Timeout: 10 * time.Minute,
	})
}

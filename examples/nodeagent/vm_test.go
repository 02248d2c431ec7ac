package main

import (
	"slices"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/vmtest"
)

// vmIPVSModules are what mode ipvs needs loaded in the VM: IPVS with the
// default scheduler, dummy links and the ipset types it creates (the
// kernel loads the rest on demand).
var vmIPVSModules = []string{
	"ip_vs", "ip_vs_rr", "dummy", "ip_set", "ip_set_hash_ip", "ip_set_hash_ipport",
	"ip_set_hash_ipportip", "ip_set_hash_ipportnet", "xt_set",
}

// vmIPTables are the iptables tools of both families.
var vmIPTables = []string{"iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save"}

// TestKernelInVM runs the agent's kernel tests that need IPVS inside a
// VM whose kernel has IPVS and dummy links (this machine's may have
// neither) and lacks xfrm_user, as some nodes' do: no mode of the agent
// may need it. One VM serves them all, as booting one costs minutes
// under TCG: ipvs mode serving traffic, the mode-switch cycle through
// every mode, ipvs included, and ipvs mode's drift repaired.
func TestKernelInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	vmtest.Run(t, vmtest.Config{
		Run:     "^TestKernel(IPVSServesTraffic|ModeSwitchLeavesNothingBehind|DriftRepaired)$",
		Modules: slices.Concat(vmIPVSModules, []string{"xt_TPROXY", "xt_socket"}),
		Omit:    []string{"xfrm_user"},
		Tools:   slices.Concat(vmIPTables, []string{"nft"}),
		Args:    []string{"-test.v"},
		Timeout: 20 * time.Minute,
	})
}

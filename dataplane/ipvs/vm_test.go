package ipvs

import (
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/vmtest"
)

// ipvsModules are loaded before the kernel tests start in the VM: IPVS
// with the default scheduler, the dummy link type and the ipset types the
// dataplane creates.
var ipvsModules = []string{
	"ip_vs", "ip_vs_rr", "dummy", "ip_set", "ip_set_hash_ip", "ip_set_hash_ipport",
	"ip_set_hash_ipportip", "ip_set_hash_ipportnet", "ip_set_bitmap_port", "xt_set",
}

// TestKernelTestsInVM runs this package's kernel tests inside a VM whose
// kernel has IPVS and dummy links (this machine's may have neither).
func TestKernelTestsInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	vmtest.Run(t, vmtest.Config{
		Run:     "^TestKernel(Conformance|GracefulTermination)$",
		Modules: ipvsModules,
		Tools:   []string{"iptables", "iptables-restore", "iptables-save"},
		Args:    []string{"-test.v"},
		Timeout: 20 * time.Minute,
	})
}

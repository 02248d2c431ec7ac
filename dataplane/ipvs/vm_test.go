package ipvs

import (
	"flag"
	"os"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/fuzzobj"
	"github.com/proxykit/proxykit/internal/vmtest"
)

// ipvsModules are loaded before the kernel tests start in the VM: IPVS
// with the default scheduler, the dummy link type and the ipset types the
// dataplane creates.
var ipvsModules = []string{
	"ip_vs", "ip_vs_rr", "dummy", "ip_set", "ip_set_hash_ip", "ip_set_hash_ipport",
	"ip_set_hash_ipportip", "ip_set_hash_ipportnet", "xt_set",
}

// vmTools are the programs the VM needs: the iptables ruleset IPVS mode
// writes, and nft, with which Cleanup removes the base chains iptables-nft
// left empty and the corpus replay checks that nothing is left.
var vmTools = []string{"iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save", "nft"}

// vmScenarios are the conformance scenarios the VM runs, in both pod
// networks (routed and bridge): the whole suite takes a quarter of an
// hour under TCG on a busy machine, these two to four minutes a shape:
// cluster IPs with UDP and hairpins, LoadBalancer VIPs with source
// ranges, node ports, external IPs under both external traffic policies,
// services with both traffic policies Local (where IPVS mode differs
// most), services without endpoints, IPv6, names at the API server's
// limits and upstream e2e's named targetPort. Every reproducible case
// runs on a host whose kernel has IPVS, and in the VM with
// allScenariosEnv=1 (over an hour under TCG).
const vmScenarios = "ClusterIPGeneral|LoadBalancer|NodePorts:_ipv4,_localhost-nodeports_disabled|ExternalTrafficPolicyLocal|" +
	"ExternalTrafficPolicyCluster|BothTrafficPoliciesLocal|BothTrafficPoliciesLocal_without_local_endpoints|" +
	"NoEndpointsReject|IPv6_NoEndpointsReject|IPv6_ExternalTrafficPolicyLocal|SessionAffinity|" +
	"LongNames|NamedTargetPortDifferentPorts"

// allScenariosEnv=1 makes TestKernelTestsInVM run every scenario.
const allScenariosEnv = "PROXYKIT_IPVS_VM_ALL"

// TestKernelTestsInVM runs this package's kernel tests inside a VM whose
// kernel has IPVS and dummy links (this machine's may have neither) and
// lacks xfrm_user, as some nodes' kernels do (TestKernelWithoutXFRM).
func TestKernelTestsInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	run := "^TestKernel(GracefulTermination|Conformance|ConformanceBridge|NodeAddresses|InternalTraffic|WithoutXFRM|FuzzCorporaAccepted)$"
	// One scenario at a time in CI's subset, whose probes must not time
	// out on a busy runner; the whole suite runs three at a time, as its
	// scenarios mostly wait for connections a verdict drops.
	timeout, args, mem := 30*time.Minute, []string{"-test.v", "-test.parallel", "1"}, 0
	if os.Getenv(allScenariosEnv) == "1" {
		timeout, args, mem = 90*time.Minute, []string{"-test.v", "-test.parallel", "3"}, 2048
	} else {
		run += "/^(" + vmScenarios + ")$"
	}
	vmtest.Run(t, vmtest.Config{
		Run:       run,
		Modules:   ipvsModules,
		Omit:      []string{"xfrm_user"},
		Tools:     vmTools,
		Files:     corpusFiles(t),
		Args:      args,
		Timeout:   timeout,
		MemoryMiB: mem,
	})
}

// corpusFiles maps every file of the model's fuzz corpora to where
// TestKernelFuzzCorporaAccepted reads it in the VM: the tests run in /pkg,
// so the repository root it names, "../..", is "/" there.
func corpusFiles(t *testing.T) map[string]string {
	files := map[string]string{}
	for _, dir := range fuzzobj.ModelCorpusDirs() {
		host, err := filepath.Abs(filepath.Join("../..", dir))
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(host)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			files[path.Join("/", filepath.ToSlash(dir), e.Name())] = filepath.Join(host, e.Name())
		}
	}
	return files
}

// TestKernelBenchmarksInVM runs this package's kernel benchmarks inside
// the VM when the host's go test was given -bench, e.g.
//
//	go test -run KernelBenchmarksInVM -bench KernelSync ./dataplane/ipvs
func TestKernelBenchmarksInVM(t *testing.T) {
	bench := flag.Lookup("test.bench").Value.String()
	if bench == "" {
		t.Skip("runs benchmarks in a VM only when go test is given -bench")
	}
	vmtest.Run(t, vmtest.Config{
		Run:       "^$",
		Modules:   ipvsModules,
		Tools:     vmTools,
		Args:      []string{"-test.bench", bench, "-test.benchtime", "1x", "-test.benchmem"},
		Timeout:   30 * time.Minute,
		MemoryMiB: 2048,
	})
}

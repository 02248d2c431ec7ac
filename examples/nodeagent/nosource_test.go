package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// TestOnceWithoutSourceTouchesNothing: the README's `sudo ./nodeagent
// --once`, with no source, asks the host for no iptables Runner, sets no
// sysctl (nf_conntrack_max and the hash size included, which the kernel
// test keeps away from) and no OOM score, prints the demo's rules and says
// why; with --demo it programs the demo and sets them.
func TestOnceWithoutSourceTouchesNothing(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		touched  bool
		wantLogs []string
	}{
		{[]string{"--once"}, false, []string{noSource, noClusterCIDR, demoStart + `clusterCIDRs=[] nodePortAddresses=["all"]`,
			`I "Printed the rules of one sync (dry run: nothing was programmed)" mode="iptables" ipFamilies=["IPv4","IPv6"] servicePorts=8 endpoints=16 elapsed="X"`}},
		{[]string{"--demo", "--once"}, true, []string{noClusterCIDR, demoStart + `clusterCIDRs=[] nodePortAddresses=["all"]`, programmed}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			values := map[string]string{
				"net/netfilter/nf_conntrack_max":                     "1024",
				"net/netfilter/nf_conntrack_tcp_timeout_established": "432000",
				"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "60",
				"net/netfilter/nf_conntrack_tcp_be_liberal":          "0",
				"net/netfilter/nf_conntrack_udp_timeout":             "30",
				"net/netfilter/nf_conntrack_udp_timeout_stream":      "120",
			}
			sys, params := sysctl.NewFake(values), sysctl.NewFake(map[string]string{"hashsize": "256"})
			var oom, runners int
			h := fakeHost(bothFamilies())
			runner := h.runner
			h.runner = func(f v1.IPFamily) (xtables.Runner, error) { runners++; return runner(f) }
			h.node = &nodeSettings{sysctl: sys, moduleParams: params, numCPU: 2, oomScoreAdj: func(int) error { oom++; return nil }}
			code, out, errOut := runOnHost(t, h, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if diff := cmp.Diff(tc.wantLogs, logLines(errOut)); diff != "" {
				t.Errorf("operator lines (-want +got):\n%s", diff)
			}
			if printed := strings.Contains(out, "# iptables-restore input (IPv4)"); printed == tc.touched {
				t.Errorf("rules printed = %v, want %v:\n%s", printed, !tc.touched, out)
			}
			got, _ := sys.Get("net/netfilter/nf_conntrack_tcp_timeout_established")
			hs, _ := params.Get("hashsize")
			touched := []bool{runners > 0, oom > 0, got != "432000", hs != "256"}
			if diff := cmp.Diff([]bool{tc.touched, tc.touched, tc.touched, tc.touched}, touched); diff != "" {
				t.Errorf("touched [iptables, OOM score, conntrack timeout, hash size] (-want +got):\n%s", diff)
			}
		})
	}
}

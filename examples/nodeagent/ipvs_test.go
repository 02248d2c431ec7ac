package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// fakeIPVSHost is a machine whose IPVS, netlink and iptables are fakes
// per family; with noIPVS its kernel has no ip_vs module.
type fakeIPVSHost struct {
	ipvs    map[v1.IPFamily]*ipvstest.FakeIPVS
	nl      map[v1.IPFamily]*ipvstest.FakeNetlink
	runners map[v1.IPFamily]*xtables.FakeRunner
	noIPVS  bool
}

func newFakeIPVSHost(noIPVS bool) *fakeIPVSHost {
	h := &fakeIPVSHost{ipvs: map[v1.IPFamily]*ipvstest.FakeIPVS{}, nl: map[v1.IPFamily]*ipvstest.FakeNetlink{}, runners: bothFamilies(), noIPVS: noIPVS}
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		h.ipvs[f], h.nl[f] = ipvstest.NewFakeIPVS(), ipvstest.NewFakeNetlink()
		// The demo node's addresses, as its kernel holds them: node
		// ports are served there.
		h.nl[f].SetLinkAddrs("eth0", netip.MustParseAddr("192.168.49.2"), netip.MustParseAddr("fd00:192:168:49::2"))
	}
	return h
}

func (h *fakeIPVSHost) host() host {
	hh := fakeHost(h.runners)
	hh.ipvs = func(f v1.IPFamily) (ipvs.Kernel, error) {
		if h.noIPVS {
			return nil, fmt.Errorf("%w: the generic netlink family IPVS is not registered (no such file or directory); load it with modprobe ip_vs, or use another proxy mode", ipvs.ErrNoIPVS)
		}
		return &ipvstest.Kernel{IPVS: h.ipvs[f], Netlink: h.nl[f]}, nil
	}
	return hh
}

func TestIPVSMissing(t *testing.T) {
	h := newFakeIPVSHost(true)
	code, out, errOut := runOnHost(t, h.host(), "--demo", "--proxy-mode", "ipvs", "--once")
	want := "nodeagent: --proxy-mode ipvs: this kernel has no ip_vs module: the generic netlink family IPVS is not registered (no such file or directory); load it with modprobe ip_vs, or use another proxy mode\n"
	if code != exitFailure || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and stderr %q", code, out, errOut, exitFailure, want)
	}
	for f, r := range h.runners {
		if n := len(r.Restores()); n != 0 {
			t.Errorf("%s: %d iptables restores on a kernel without IPVS", f, n)
		}
	}
}

func TestIPVSDryRun(t *testing.T) {
	code, out, errOut := runAgent(t, "--proxy-mode", "ipvs", "--dry-run", "--once")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"# iptables-restore input (IPv4)\n*nat\n:PKV-SERVICES - [0:0]",
		"# IPVS table (IPv4)\n",
		"\nTCP 10.96.10.10:80 rr\n",
		// Node ports on the Node object's addresses, which a dry run
		// takes for the kernel's.
		"\nTCP 192.168.49.2:30080 rr\n",
		"# IPVS table (IPv6)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run lacks %q:\n%s", want, out)
		}
	}
}

func TestIPVSOnceAndCleanup(t *testing.T) {
	h := newFakeIPVSHost(false)
	code, _, errOut := runOnHost(t, h.host(), "--demo", "--proxy-mode", "ipvs", "--ipvs-scheduler", "lc", "--ipvs-tcp-timeout", "15m", "--once")
	if code != exitOK {
		t.Fatalf("--once: exit %d, stderr:\n%s", code, errOut)
	}
	if dump := h.ipvs[v1.IPv4Protocol].Dump(); !strings.Contains(dump, "TCP 10.96.10.10:80 lc\n") {
		t.Errorf("--once did not program the web service with lc:\n%s", dump)
	}
	if got := h.ipvs[v1.IPv4Protocol].Config().TimeoutTCP.String(); got != "15m0s" {
		t.Errorf("IPVS TCP timeout = %s, want 15m0s", got)
	}
	for i, want := range [][]string{
		{
			`I "Removed the agent's rules" ipFamily="IPv4" virtualServers=`,
			`I "Removed the agent's rules" ipFamily="IPv6" virtualServers=`,
		},
		{`I "Nothing to clean up: no PKV virtual servers, addresses, sets, chains or link found"`},
	} {
		code, out, errOut := runOnHost(t, h.host(), "--proxy-mode", "ipvs", "--cleanup")
		if code != exitOK || out != "" {
			t.Fatalf("--cleanup: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
		}
		got := logLines(errOut)
		if i == 0 {
			for j := range got {
				got[j], _, _ = strings.Cut(got[j], "virtualServers=")
				got[j] += "virtualServers="
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("operator lines (-want +got):\n%s", diff)
		}
	}
	for f, fi := range h.ipvs {
		if dump := fi.Dump(); dump != "" {
			t.Errorf("%s: virtual servers after --cleanup:\n%s", f, dump)
		}
		if sets := h.nl[f].Sets(); len(sets) != 0 {
			t.Errorf("%s: ipsets after --cleanup: %v", f, sets)
		}
	}
}

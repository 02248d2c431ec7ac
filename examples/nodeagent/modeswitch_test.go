package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/userspace"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// fakeNode is a machine with every mode's door faked: iptables, IPVS
// (probeErr its probe's answer), nft and policy routing, per family.
type fakeNode struct {
	*fakeIPVSHost
	nft      map[v1.IPFamily]*knftables.Fake
	probeErr error
	// opened counts the IPVS kernels opened.
	opened int
}

func newFakeNode() *fakeNode {
	return &fakeNode{fakeIPVSHost: newFakeIPVSHost(false), nft: map[v1.IPFamily]*knftables.Fake{
		v1.IPv4Protocol: knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable),
		v1.IPv6Protocol: knftables.NewFake(knftables.IPv6Family, nftables.DefaultTable),
	}}
}

func (n *fakeNode) host() host {
	h := n.fakeIPVSHost.host()
	openIPVS := h.ipvs
	h.ipvs = func(f v1.IPFamily) (ipvs.Kernel, error) {
		n.opened++
		return openIPVS(f)
	}
	h.nft = fakeNFTHost(n.nft).nft
	h.probeIPVS = func() error { return n.probeErr }
	h.routing = func() (userspace.PolicyRouting, error) { return &userspace.FakePolicyRouting{}, nil }
	return h
}

// modes says which modes' objects the fakes hold, per family.
func (n *fakeNode) modes(t *testing.T) map[v1.IPFamily][]string {
	t.Helper()
	got := map[v1.IPFamily][]string{}
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		nat, err := n.runners[f].Save(context.Background(), "nat")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(nat), ":PK-") {
			got[f] = append(got[f], "iptables")
		}
		if n.nft[f].Table != nil {
			got[f] = append(got[f], "nftables")
		}
		if n.ipvs[f].Dump() != "" || len(n.nl[f].Sets()) > 0 || strings.Contains(string(nat), ":PKV-") {
			got[f] = append(got[f], "ipvs")
		}
	}
	return got
}

// TestModeSwitchRemovesThePreviousMode: the agent started in another mode
// removes what the previous one left, says what, and leaves the mode
// it runs; a node without IPVS is not asked to load it.
func TestModeSwitchRemovesThePreviousMode(t *testing.T) {
	n := newFakeNode()
	for _, step := range []struct {
		mode        string
		wantRemoved []string
	}{
		{"iptables", nil},
		{"nftables", []string{
			`I "Removed another proxy mode's objects" mode="iptables" ipFamily="IPv4" filterChains=7 natChains=28`,
			`I "Removed another proxy mode's objects" mode="iptables" ipFamily="IPv6" filterChains=7 natChains=9`,
		}},
		{"ipvs", []string{
			`I "Removed another proxy mode's objects" mode="nftables" ipFamily="IPv4" table="ip proxykit" chains=27`,
			`I "Removed another proxy mode's objects" mode="nftables" ipFamily="IPv6" table="ip6 proxykit" chains=16`,
		}},
		{"iptables", []string{
			`I "Removed another proxy mode's objects" mode="ipvs" ipFamily="IPv4" virtualServers=X`,
			`I "Removed another proxy mode's objects" mode="ipvs" ipFamily="IPv6" virtualServers=X`,
		}},
		{"iptables", nil},
	} {
		code, _, errOut := runOnHost(t, n.host(), "--demo", "--proxy-mode", step.mode, "--once")
		if code != exitOK {
			t.Fatalf("%s --once: exit %d, stderr:\n%s", step.mode, code, errOut)
		}
		var got []string
		for _, l := range logLines(errOut) {
			if strings.Contains(l, "another proxy mode") {
				// IPVS's counts depend on the fakes' addresses.
				if before, _, ok := strings.Cut(l, "virtualServers="); ok {
					l = before + "virtualServers=X"
				}
				got = append(got, l)
			}
		}
		if diff := cmp.Diff(step.wantRemoved, got); diff != "" {
			t.Errorf("%s after the previous mode: removed (-want +got):\n%s\nstderr:\n%s", step.mode, diff, errOut)
		}
		want := map[v1.IPFamily][]string{v1.IPv4Protocol: {step.mode}, v1.IPv6Protocol: {step.mode}}
		if diff := cmp.Diff(want, n.modes(t)); diff != "" {
			t.Errorf("%s after the previous mode: modes the kernel holds (-want +got):\n%s", step.mode, diff)
		}
	}

	n.probeErr = ipvs.ErrNoIPVS
	n.opened = 0
	code, _, errOut := runOnHost(t, n.host(), "--demo", "--proxy-mode", "nftables", "--once")
	if code != exitOK {
		t.Fatalf("without IPVS: exit %d, stderr:\n%s", code, errOut)
	}
	if want := `"Not looking for another proxy mode's objects: the node cannot hold them" mode="ipvs" reason="this kernel has no ip_vs module"`; !strings.Contains(errOut, want) {
		t.Errorf("without IPVS, stderr lacks %s:\n%s", want, errOut)
	}
	if n.opened != 0 {
		t.Errorf("without IPVS, %d IPVS kernels were opened", n.opened)
	}
}

// TestCleanupRemovesEveryMode: --cleanup removes every mode's objects, as
// kube-proxy's does, whichever --proxy-mode it is given.
func TestCleanupRemovesEveryMode(t *testing.T) {
	n := newFakeNode()
	if code, _, errOut := runOnHost(t, n.host(), "--demo", "--proxy-mode", "ipvs", "--once"); code != exitOK {
		t.Fatalf("ipvs --once: exit %d, stderr:\n%s", code, errOut)
	}
	code, _, errOut := runOnHost(t, n.host(), "--cleanup")
	if code != exitOK || strings.Contains(errOut, "Nothing to clean up") {
		t.Fatalf("--cleanup: exit %d, stderr:\n%s", code, errOut)
	}
	if diff := cmp.Diff(map[v1.IPFamily][]string{}, n.modes(t)); diff != "" {
		t.Errorf("modes the kernel holds after --cleanup (-want +got):\n%s", diff)
	}
}

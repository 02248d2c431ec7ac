package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/nftables"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// fakeNFTHost is a machine whose nft is a knftables.Fake per family (a
// family without one has no usable nft).
func fakeNFTHost(fakes map[v1.IPFamily]*knftables.Fake) host {
	return host{nft: func(f v1.IPFamily) (knftables.Interface, error) {
		if fake, ok := fakes[f]; ok {
			return fake, nil
		}
		return nil, errors.New("nftnl: netlink socket: protocol not supported")
	}}
}

func TestNFTablesDryRun(t *testing.T) {
	var outs []string
	for range 2 {
		code, out, errOut := runAgent(t, "--proxy-mode", "nftables", "--dry-run", "--once")
		if code != exitOK {
			t.Fatalf("exit %d, stderr:\n%s", code, errOut)
		}
		outs = append(outs, out)
	}
	if outs[0] != outs[1] {
		t.Errorf("two dry runs printed different scripts")
	}
	for _, want := range []string{
		"# nft -f input (IPv4)\nadd table ip proxykit",
		"# nft -f input (IPv6)\nadd table ip6 proxykit",
		// Node ports on the primary IP only, as kube-proxy's nftables mode.
		"add element ip proxykit nodeport-ips { 192.168.49.2 }\n",
		// A ClusterIP port through the chain shared by the ports of three
		// endpoints in its endpoint map.
		"add element ip proxykit service-ips { 10.96.10.10 . tcp . 80 comment \"default/web/tcp/http\" : goto cluster-dnat-tcp-33-3 }\n",
	} {
		if !strings.Contains(outs[0], want) {
			t.Errorf("the dry run lacks %q:\n%s", want, outs[0])
		}
	}
}

func TestNFTablesOnceAndCleanup(t *testing.T) {
	fakes := map[v1.IPFamily]*knftables.Fake{
		v1.IPv4Protocol: knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable),
		v1.IPv6Protocol: knftables.NewFake(knftables.IPv6Family, nftables.DefaultTable),
	}
	h := fakeNFTHost(fakes)
	code, _, errOut := runOnHost(t, h, "--demo", "--proxy-mode", "nftables", "--once")
	if code != exitOK {
		t.Fatalf("--once: exit %d, stderr:\n%s", code, errOut)
	}
	if fakes[v1.IPv4Protocol].Table.Maps["service-ips"].FindElement("10.96.10.10 . tcp . 80") == nil {
		t.Errorf("--once did not program the web service:\n%s", fakes[v1.IPv4Protocol].Dump())
	}
	for _, want := range [][]string{
		{
			`I "Removed the agent's rules" ipFamily="IPv4" table="ip proxykit" chains=27`,
			`I "Removed the agent's rules" ipFamily="IPv6" table="ip6 proxykit" chains=16`,
		},
		{`I "Nothing to clean up: no proxykit table found"`},
	} {
		code, out, errOut := runOnHost(t, h, "--proxy-mode", "nftables", "--cleanup")
		if code != exitOK || out != "" {
			t.Fatalf("--cleanup: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
		}
		if diff := cmp.Diff(want, logLines(errOut)); diff != "" {
			t.Errorf("operator lines (-want +got):\n%s", diff)
		}
	}
}

func TestNFTablesMissing(t *testing.T) {
	code, out, errOut := runOnHost(t, fakeNFTHost(nil), "--demo", "--proxy-mode", "nftables", "--once")
	want := "nodeagent: nftables: this host cannot run the nftables dataplane (it needs a kernel with nf_tables and CAP_NET_ADMIN): nftnl: netlink socket: protocol not supported\n"
	if code != exitFailure || out != "" || !strings.HasSuffix(errOut, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and stderr ending in %q", code, out, errOut, exitFailure, want)
	}
}

func TestNFTablesExplain(t *testing.T) {
	// A cluster IP on a port it does not serve: nftables rejects it,
	// iptables lets it through.
	for mode, action := range map[string]string{"nftables": "reject", "iptables": "not a service"} {
		code, out, errOut := runAgent(t, "--proxy-mode", mode, "explain", "10.244.0.5", "10.96.10.10:81/TCP")
		if code != exitOK {
			t.Fatalf("%s: exit %d, stderr:\n%s", mode, code, errOut)
		}
		if got := verdict(out)["action"]; got != action || verdict(out)["service"] != "-" {
			t.Errorf("%s: action %q, want %q:\n%s", mode, got, action, out)
		}
	}
}

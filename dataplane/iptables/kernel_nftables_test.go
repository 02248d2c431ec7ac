package iptables

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestKernelCleanupNFTables programs through iptables-nft and cleans up:
// the nftables tables and hooked base chains the dataplane made exist are
// gone, and what others put there (a rule, a drop policy, a chain, a table
// of their own) stays.
func TestKernelCleanupNFTables(t *testing.T) {
	netns.Require(t, "iptables-nft", "iptables-nft-restore", "iptables-nft-save",
		"ip6tables-nft", "ip6tables-nft-restore", "ip6tables-nft-save", "nft")
	tests := []struct {
		name   string
		family v1.IPFamily
		// before runs in the namespace before the dataplane programs.
		before [][]string
		// noNFT hides nft from Cleanup.
		noNFT bool
		want  []string
	}{
		{name: "IPv4: nothing was there, nothing is left", family: v1.IPv4Protocol},
		{name: "IPv6: nothing was there, nothing is left", family: v1.IPv6Protocol},
		{
			name:   "a rule of someone else keeps its chain and table",
			family: v1.IPv4Protocol,
			before: [][]string{{"iptables-nft", "-A", "INPUT", "-s", "192.0.2.1", "-j", "DROP"}},
			want:   []string{"ip filter", "ip filter INPUT hook=input policy=accept rules=1"},
		},
		{
			name:   "an empty chain that drops is a rule in itself",
			family: v1.IPv6Protocol,
			before: [][]string{{"ip6tables-nft", "-P", "FORWARD", "DROP"}},
			want:   []string{"ip6 filter", "ip6 filter FORWARD hook=forward policy=drop rules=0"},
		},
		{
			name:   "a chain of someone else keeps the table, not the hooks",
			family: v1.IPv4Protocol,
			before: [][]string{{"iptables-nft", "-t", "nat", "-N", "OTHER"}},
			want:   []string{"ip nat", "ip nat OTHER rules=0"},
		},
		{
			// Removing an empty, accepting base chain changes nothing for
			// anyone, so one that was there before goes too.
			name:   "an empty accepting chain that was there before goes",
			family: v1.IPv4Protocol,
			before: [][]string{
				{"iptables-nft", "-A", "OUTPUT", "-j", "ACCEPT"},
				{"iptables-nft", "-D", "OUTPUT", "-j", "ACCEPT"},
			},
		},
		{
			name:   "without nft the hooks stay, and Cleanup still succeeds",
			family: v1.IPv4Protocol,
			noNFT:  true,
			want: []string{
				"ip filter", "ip filter FORWARD hook=forward policy=accept rules=0",
				"ip filter INPUT hook=input policy=accept rules=0", "ip filter OUTPUT hook=output policy=accept rules=0",
				"ip nat", "ip nat OUTPUT hook=output policy=accept rules=0",
				"ip nat POSTROUTING hook=postrouting policy=accept rules=0", "ip nat PREROUTING hook=prerouting policy=accept rules=0",
			},
		},
		{
			name:   "a table iptables does not use is left alone",
			family: v1.IPv4Protocol,
			before: [][]string{{"nft", "add table ip mine; add chain ip mine INPUT { type filter hook input priority 0; }"}},
			want:   []string{"ip mine", "ip mine INPUT hook=input policy=accept rules=0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := netns.New(t, "nftclean")
			for _, cmd := range tt.before {
				ns.MustRun(cmd[0], cmd[1:]...)
			}
			var r *xtables.ExecRunner
			if err := ns.Do(func() (err error) {
				r, err = xtables.NewExecRunner(xtables.ExecConfig{Family: tt.family, Variant: "nft"})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			dp := newNSDataplane(t, ns, Config{Family: tt.family, Runner: r, Logger: testr.New(t)})
			if err := dp.Sync(t.Context(), nftState(tt.family)); err != nil {
				t.Fatal(err)
			}
			if programmed := nftRuleset(t, ns); len(programmed) <= len(tt.want) {
				t.Fatalf("nothing programmed through nf_tables: %q", programmed)
			}
			// The runner found its binaries already; knftables looks nft
			// up on PATH when Cleanup opens a table.
			path := os.Getenv("PATH")
			if tt.noNFT {
				t.Setenv("PATH", t.TempDir())
			}
			// A second Cleanup finds nothing left to do.
			for range 2 {
				if err := dp.Cleanup(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", path)
			if diff := cmp.Diff(tt.want, nftRuleset(t, ns)); diff != "" {
				t.Errorf("nftables after Cleanup (-want +got):\n%s", diff)
			}
		})
	}
}

// nftState is one UDP NodePort service with one endpoint, in family.
func nftState(family v1.IPFamily) *dataplane.State {
	node, cip, ep := "192.168.0.2", "172.30.0.10", "10.0.1.1"
	if family == v1.IPv6Protocol {
		node, cip, ep = "fd00:192::2", "fd00:172::10", "fd00:10::1"
	}
	pn := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: "udp", Protocol: v1.ProtocolUDP}
	return &dataplane.State{
		Family: family,
		Node:   dataplane.Node{Name: "node", IPs: []netip.Addr{netip.MustParseAddr(node)}},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: pn, ClusterIP: netip.MustParseAddr(cip), Port: 80, Protocol: v1.ProtocolUDP, NodePort: 30080,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{pn: {{
			Addr:         netip.AddrPortFrom(netip.MustParseAddr(ep), 8080),
			EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true},
		}}}),
	}
}

// nftRuleset lists ns's nftables tables and chains, one line each, as nft
// itself reports them (not through knftables, which Cleanup uses).
func nftRuleset(t *testing.T, ns *netns.NS) []string {
	t.Helper()
	var doc struct {
		Nftables []struct {
			Table *struct{ Family, Name string }
			Chain *struct{ Family, Table, Name, Hook, Policy string }
			Rule  *struct{ Family, Table, Chain string }
		}
	}
	if err := json.Unmarshal([]byte(ns.MustRun("nft", "-j", "list", "ruleset")), &doc); err != nil {
		t.Fatal(err)
	}
	rules := map[string]int{}
	for _, o := range doc.Nftables {
		if o.Rule != nil {
			rules[o.Rule.Family+" "+o.Rule.Table+" "+o.Rule.Chain]++
		}
	}
	var out []string
	for _, o := range doc.Nftables {
		switch {
		case o.Table != nil:
			out = append(out, o.Table.Family+" "+o.Table.Name)
		case o.Chain != nil:
			c := o.Chain
			key := c.Family + " " + c.Table + " " + c.Name
			line := key
			if c.Hook != "" {
				line += fmt.Sprintf(" hook=%s policy=%s", c.Hook, c.Policy)
			}
			out = append(out, fmt.Sprintf("%s rules=%d", line, rules[key]))
		}
	}
	slices.Sort(out)
	return out
}

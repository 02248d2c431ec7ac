package nftables

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// kubeProxyTable is kube-proxy's nftables table as nft lists it, left
// behind with one service.
const kubeProxyTable = `table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = { 172.30.0.10 }
	}
	set nodeport-ips {
		type ipv4_addr
		elements = { 192.168.0.2 }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 172.30.0.10 . tcp . 80 : goto service-ULMVA6XW-default/web/tcp/http,
			     172.30.0.11 . udp . 53 : goto service-AAAA-default/dns/udp/dns }
	}
	map service-nodeports {
		type inet_proto . inet_service : verdict
		elements = { tcp . 30080 : goto external-ULMVA6XW-default/web/tcp/http }
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
	}
	chain external-ULMVA6XW-default/web/tcp/http {
		jump mark-for-masquerade
		goto service-ULMVA6XW-default/web/tcp/http
	}
	chain service-ULMVA6XW-default/web/tcp/http {
		ip daddr 172.30.0.10 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
		numgen random mod 2 vmap { 0 : goto endpoint-5OJB2KTY-default/web/tcp/http__10.180.0.1/80, 1 : goto endpoint-XGQ4AYDG-default/web/tcp/http__10.180.0.2/80 }
	}
	chain endpoint-5OJB2KTY-default/web/tcp/http__10.180.0.1/80 {
		ip saddr 10.180.0.1 jump mark-for-masquerade
		meta l4proto tcp dnat to 10.180.0.1:80
	}
	chain endpoint-XGQ4AYDG-default/web/tcp/http__10.180.0.2/80 {
		ip saddr 10.180.0.2 jump mark-for-masquerade
		meta l4proto tcp dnat to 10.180.0.2:80
	}
	chain service-AAAA-default/dns/udp/dns {
		meta mark 0x1 drop
	}
	chain mark-for-masquerade {
		mark set mark or 0x4000
	}
}
`

// firewalldTable is a firewall's table: its prerouting chain runs before
// the proxy's and decides nothing for service traffic.
const firewalldTable = `table inet firewalld {
	chain mangle_PREROUTING {
		type filter hook prerouting priority mangle + 10; policy accept;
		jump mangle_PREROUTING_ZONES
	}
	chain mangle_PREROUTING_ZONES {
		iifname "eth0" goto mangle_PRE_public
		goto mangle_PRE_public
	}
	chain mangle_PRE_public {
		jump mangle_PRE_public_pre
		counter packets 12 bytes 840 comment "counted"
	}
	chain mangle_PRE_public_pre {
	}
	chain filter_INPUT {
		type filter hook input priority filter + 10; policy accept;
		ct state { established, related } accept
		reject with icmpx admin-prohibited
	}
	flowtable ft {
		hook ingress priority filter
		devices = { eth0 }
	}
}
`

const ownTable = `table ip proxykit {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 172.30.0.10 tcp dport 80 drop
	}
}
table ip6 kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		drop
	}
}
`

// firewalldSteps are the steps of a packet from outside through
// firewalldTable, which enters by an interface it does not know.
var firewalldSteps = []string{
	"inet firewalld mangle_PREROUTING: jump mangle_PREROUTING_ZONES",
	`not followed: inet firewalld mangle_PREROUTING_ZONES: iifname "eth0" goto mangle_PRE_public`,
	"inet firewalld mangle_PREROUTING_ZONES: goto mangle_PRE_public",
	"inet firewalld mangle_PRE_public: jump mangle_PRE_public_pre",
}

const guardTable = `table inet guard {
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		ip daddr { 172.30.0.10, 172.30.0.12 } tcp dport != 22 drop
	}
	chain strict {
		type filter hook prerouting priority -200; policy drop;
		iifname "lo*" accept
	}
}
`

func TestOthersTrace(t *testing.T) {
	nodeIPs := []netip.Addr{netip.MustParseAddr("192.168.0.2")}
	cases := []struct {
		name    string
		ruleset string
		p       dataplane.Packet
		want    dataplane.Verdict
		decided bool
		steps   []string
	}{{
		name:    "kube-proxy's table left behind takes the cluster IP",
		ruleset: ownTable + firewalldTable + kubeProxyTable,
		p:       dpt.MakePacket(dataplane.FromOutside, "203.0.113.9", "172.30.0.10:80", v1.ProtocolTCP),
		want:    dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dpt.AddrPorts("10.180.0.1:80", "10.180.0.2:80")},
		decided: true,
		steps: append(slices.Clone(firewalldSteps),
			"ip kube-proxy nat-prerouting: jump services",
			"ip kube-proxy services: ip daddr . meta l4proto . th dport vmap @service-ips  [172.30.0.10 . tcp . 80 : goto service-ULMVA6XW-default/web/tcp/http]",
			"ip kube-proxy service-ULMVA6XW-default/web/tcp/http: ip daddr 172.30.0.10 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
			"ip kube-proxy service-ULMVA6XW-default/web/tcp/http: numgen random mod 2 vmap { 0 : goto endpoint-5OJB2KTY-default/web/tcp/http__10.180.0.1/80, 1 : goto endpoint-XGQ4AYDG-default/web/tcp/http__10.180.0.2/80 }",
			"ip kube-proxy endpoint-5OJB2KTY-default/web/tcp/http__10.180.0.1/80: meta l4proto tcp dnat to 10.180.0.1:80",
			"ip kube-proxy endpoint-XGQ4AYDG-default/web/tcp/http__10.180.0.2/80: meta l4proto tcp dnat to 10.180.0.2:80",
		),
	}, {
		name:    "and the node port, from the node too",
		ruleset: kubeProxyTable,
		p:       dpt.MakePacket(dataplane.FromNode, "192.168.0.2", "192.168.0.2:30080", v1.ProtocolTCP),
		want:    dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dpt.AddrPorts("10.180.0.1:80", "10.180.0.2:80")},
		decided: true,
	}, {
		name:    "another address is left to the proxy",
		ruleset: ownTable + firewalldTable + kubeProxyTable,
		p:       dpt.MakePacket(dataplane.FromOutside, "203.0.113.9", "172.30.0.99:80", v1.ProtocolTCP),
		steps:   append(slices.Clone(firewalldSteps), "ip kube-proxy nat-prerouting: jump services"),
	}, {
		name:    "a rule on a mark is not followed",
		ruleset: kubeProxyTable,
		p:       dpt.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.11:53", v1.ProtocolUDP),
		steps: []string{
			"ip kube-proxy nat-prerouting: jump services",
			"ip kube-proxy services: ip daddr . meta l4proto . th dport vmap @service-ips  [172.30.0.11 . udp . 53 : goto service-AAAA-default/dns/udp/dns]",
			"not followed: ip kube-proxy service-AAAA-default/dns/udp/dns: meta mark 0x1 drop",
		},
	}, {
		name:    "a raw drop",
		ruleset: guardTable,
		p:       dpt.MakePacket(dataplane.FromOutside, "203.0.113.9", "172.30.0.12:80", v1.ProtocolTCP),
		want:    dataplane.Verdict{Action: dataplane.Drop},
		decided: true,
		steps:   []string{"inet guard pre: ip daddr { 172.30.0.10, 172.30.0.12 } tcp dport != 22 drop"},
	}, {
		name:    "a policy drop",
		ruleset: guardTable,
		p:       dataplane.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: netip.MustParseAddrPort("172.30.0.13:80"), Protocol: v1.ProtocolTCP, From: dataplane.FromOutside, Interface: "eth0"},
		want:    dataplane.Verdict{Action: dataplane.Drop},
		decided: true,
		steps:   []string{"inet guard strict: policy drop"},
	}, {
		name:    "no policy drop after a rule not followed",
		ruleset: guardTable,
		p:       dpt.MakePacket(dataplane.FromOutside, "203.0.113.9", "172.30.0.13:80", v1.ProtocolTCP),
		steps:   []string{`not followed: inet guard strict: iifname "lo*" accept`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOthers([]byte(tc.ruleset), v1.IPv4Protocol, "ip proxykit")
			if err != nil {
				t.Fatal(err)
			}
			v, decided, steps := o.Trace(tc.p, nodeIPs)
			if decided != tc.decided {
				t.Errorf("decided %v, want %v (steps:\n%s)", decided, tc.decided, strings.Join(steps, "\n"))
			}
			if diff := dpt.DiffVerdict(tc.want, v); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.steps != nil {
				if diff := cmp.Diff(tc.steps, steps); diff != "" {
					t.Errorf("steps (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParseOthers(t *testing.T) {
	o, err := ParseOthers([]byte(ownTable+firewalldTable+kubeProxyTable), v1.IPv4Protocol, "ip proxykit")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"inet firewalld", "ip kube-proxy"}, o.Tables()); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}
	var got []string
	for _, b := range o.hooks["prerouting"] {
		got = append(got, b.t.name+" "+b.c.name)
	}
	if diff := cmp.Diff([]string{"inet firewalld mangle_PREROUTING", "ip kube-proxy nat-prerouting"}, got); diff != "" {
		t.Errorf("prerouting chains (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"table ip x\n", "table ip x {\n chain c {\n type nat hook prerouting priority sideways;\n }\n}\n",
		"table ip x {\n set s {\n elements = { 1.2.3.4,\n"} {
		if _, err := ParseOthers([]byte(bad), v1.IPv4Protocol, "ip proxykit"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzOthers: no listing makes ParseOthers or Trace panic or loop.
func FuzzOthers(f *testing.F) {
	for _, s := range []string{kubeProxyTable, firewalldTable, ownTable, guardTable} {
		f.Add(s, "172.30.0.10:80", false)
	}
	f.Fuzz(func(t *testing.T, ruleset, dst string, fromNode bool) {
		o, err := ParseOthers([]byte(ruleset), v1.IPv4Protocol, "ip proxykit")
		if err != nil {
			return
		}
		d, err := netip.ParseAddrPort(dst)
		if err != nil {
			return
		}
		from := dataplane.FromOutside
		if fromNode {
			from = dataplane.FromNode
		}
		v, decided, _ := o.Trace(dataplane.Packet{Src: netip.MustParseAddr("203.0.113.9"), Dst: d, Protocol: v1.ProtocolTCP, From: from}, nil)
		if !decided && v.Action != (dataplane.Verdict{}).Action {
			t.Fatalf("undecided verdict %+v", v)
		}
	})
}

package nftables

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// listing is part of what nft listed of a table the dataplane programmed.
const listing = `table ip proxykit {
	comment "rules for proxykit"
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 10.96.10.10 . tcp . 80 : goto service-SUSTUHLJ-default/web/tcp/http,
			     10.96.20.20 . tcp . 80 : goto service-E2IH552V-default/shop/tcp/http,
			     10.96.30.30 . tcp . 443 comment "default/api/tcp/https" : goto cluster-dnat-tcp-0b-2 }
	}

	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "vmap to drop or reject packets to services with no endpoints"
		elements = { 10.96.40.40 . tcp . 80 comment "default/reports/tcp/http" : goto reject-chain }
	}

	map dnat-tcp-0a1 {
		typeof numgen random mod 1 : ip daddr . tcp dport
		comment "service endpoints by numgen value"
		elements = { 65536 : 10.244.0.11 . 8080, 65537 : 10.244.1.12 . 8080,
			     3 : 10.244.9.9 . 8080 }
	}

	map cluster-endpoints-tcp-0b {
		typeof ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport
		comment "ClusterIP endpoints by destination and numgen value"
		elements = { 10.96.30.30 . 443 . 0 : 10.244.2.5 . 8443, 10.96.30.30 . 443 . 1 : 10.244.3.6 . 8443,
			     10.96.31.31 . 443 . 0 : 10.244.9.9 . 8443 }
	}

	set hairpin-connections {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		elements = { 10.244.0.11 . 10.244.0.11 . tcp . 8080 }
	}

	chain filter-input {
		type filter hook input priority filter; policy accept;
		ct state new jump service-endpoints-check
	}

	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state new jump service-endpoints-check
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain masquerading {
		meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random
		ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
	}

	chain reject-chain {
		reject
	}

	chain service-endpoints-check {
		ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}

	chain service-SUSTUHLJ-default/web/tcp/http {
		meta l4proto tcp dnat ip to numgen random mod 2 offset 65536 map @dnat-tcp-0a1 comment "pk:3uen4ll0etcg4@1"
	}

	chain cluster-dnat-tcp-0b-2 {
		dnat ip to ip daddr . tcp dport . numgen random mod 2 map @cluster-endpoints-tcp-0b comment "pk:fh3aeuz9hdkb"
	}

	chain external-E2IH552V-default/shop/tcp/http {
		meta mark set meta mark | 0x00004000 comment "pk:wgeatvkdibkt"
		goto service-E2IH552V-default/shop/tcp/http
	}

	chain service-E2IH552V-default/shop/tcp/http {
		meta l4proto tcp dnat to 10.244.1.20:8080
	}
}
`

func TestParseListing(t *testing.T) {
	rs, err := ParseListing([]byte(listing), v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	nodeIPs := []netip.Addr{netip.MustParseAddr("192.168.49.2")}
	web := dataplanetest.PortName("default", "web", "http", v1.ProtocolTCP)
	cases := []struct {
		p         dataplane.Packet
		want      dataplane.Verdict
		wantSteps []string
	}{{
		p:    dataplanetest.MakePacket(dataplane.FromLocalPod, "10.244.0.9", "10.96.10.10:80", v1.ProtocolTCP),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: web, Endpoints: dataplanetest.AddrPorts("10.244.0.11:8080", "10.244.1.12:8080")},
		wantSteps: []string{"chain nat-prerouting", "chain services",
			"map service-ips: 10.96.10.10 . tcp . 80 : goto service-SUSTUHLJ-default/web/tcp/http",
			"chain service-SUSTUHLJ-default/web/tcp/http",
			"map dnat-tcp-0a1: 65536 : 10.244.0.11 . 8080", "map dnat-tcp-0a1: 65537 : 10.244.1.12 . 8080",
			"chain masquerading", "chain masquerading"},
	}, {
		p: dataplanetest.MakePacket(dataplane.FromLocalPod, "10.244.0.11", "10.96.10.10:80", v1.ProtocolTCP),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: web, Endpoints: dataplanetest.AddrPorts("10.244.0.11:8080", "10.244.1.12:8080"),
			Hairpin: dataplanetest.AddrPorts("10.244.0.11:8080")},
	}, {
		p: dataplanetest.MakePacket(dataplane.FromLocalPod, "10.244.0.9", "10.96.30.30:443", v1.ProtocolTCP),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: dataplanetest.PortName("default", "api", "https", v1.ProtocolTCP),
			Endpoints: dataplanetest.AddrPorts("10.244.2.5:8443", "10.244.3.6:8443")},
		wantSteps: []string{"chain nat-prerouting", "chain services",
			"map service-ips: 10.96.30.30 . tcp . 443 : goto cluster-dnat-tcp-0b-2",
			"chain cluster-dnat-tcp-0b-2",
			"map cluster-endpoints-tcp-0b: 10.96.30.30 . 443 . 0 : 10.244.2.5 . 8443", "map cluster-endpoints-tcp-0b: 10.96.30.30 . 443 . 1 : 10.244.3.6 . 8443",
			"chain masquerading", "chain masquerading"},
	}, {
		p:    dataplanetest.MakePacket(dataplane.FromOutside, "203.0.113.9", "10.96.40.40:80", v1.ProtocolTCP),
		want: dataplane.Verdict{Action: dataplane.Reject, Service: dataplanetest.PortName("default", "reports", "http", v1.ProtocolTCP)},
	}, {
		p:    dataplanetest.MakePacket(dataplane.FromOutside, "203.0.113.9", "10.96.99.99:80", v1.ProtocolTCP),
		want: dataplane.Verdict{Action: dataplane.NotAService},
	}}
	for _, tc := range cases {
		got, steps, err := rs.Trace(tc.p, nodeIPs)
		if err != nil {
			t.Fatalf("%v: %v", tc.p, err)
		}
		if diff := dataplanetest.DiffVerdict(tc.want, got); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tc.p.Dst, diff)
		}
		if tc.wantSteps != nil {
			if diff := cmp.Diff(tc.wantSteps, steps); diff != "" {
				t.Errorf("%v steps (-want +got):\n%s", tc.p.Dst, diff)
			}
		}
	}
	want := []servicemodel.PortName{dataplanetest.PortName("default", "api", "https", v1.ProtocolTCP), dataplanetest.PortName("default", "reports", "http", v1.ProtocolTCP), dataplanetest.PortName("default", "shop", "http", v1.ProtocolTCP), web}
	if diff := cmp.Diff(want, rs.Services()); diff != "" {
		t.Errorf("Services (-want +got):\n%s", diff)
	}
	if _, _, err := (&Ruleset{t: mustParse(t, "table ip proxykit {\n\tchain nat-prerouting {\n\t\tjump services\n\t}\n\tchain services {\n\t\tip daddr 10.96.10.10 counter queue num 3\n\t}\n}\n").t}).Trace(cases[0].p, nodeIPs); err == nil {
		t.Error("a rule of an unknown form traced without an error")
	}
}

func mustParse(t *testing.T, s string) *Ruleset {
	t.Helper()
	rs, err := ParseListing([]byte(s), v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

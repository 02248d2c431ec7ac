package dataplane_test

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// TestLookupScenarios checks Lookup against every case of the conformance
// tables, and that it always explains itself.
func TestLookupScenarios(t *testing.T) {
	for _, sc := range dpt.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			_, st := sc.Build(t)
			for _, c := range sc.Packets {
				got := st.Lookup(c.Packet)
				if d := dpt.DiffVerdict(c.Want, got); d != "" {
					t.Errorf("%s: Lookup (-want +got):\n%s", c.Name, d)
				}
				if got.Reason == "" {
					t.Errorf("%s: Lookup gave no reason for %v", c.Name, got.Action)
				}
			}
		})
	}
}

// TestLookupModeScenarios checks LookupMode against every case of the
// conformance tables in each mode, and that both modes agree wherever a
// case does not say they differ.
func TestLookupModeScenarios(t *testing.T) {
	for _, sc := range dpt.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			_, st := sc.Build(t)
			for _, c := range sc.Packets {
				for _, m := range []dataplane.Mode{dataplane.ModeIPTables, dataplane.ModeNFTables, dataplane.ModeIPVS, dataplane.ModeUserspace} {
					got := st.LookupMode(m, c.Packet)
					if d := dpt.DiffVerdict(c.WantIn(m), got); d != "" {
						t.Errorf("%s: LookupMode(%s) (-want +got):\n%s", c.Name, m, d)
					}
					if got.Reason == "" {
						t.Errorf("%s: LookupMode(%s) gave no reason for %v", c.Name, m, got.Action)
					}
				}
			}
		})
	}
}

var (
	svc1 = dpt.PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	both = []string{"10.180.0.1:80", "10.180.1.1:80"}
)

// nodePortService is ns1/svc1, a NodePort service (3001) on 172.30.0.41:80
// with one local and one remote endpoint.
func nodePortService(mutate func(*v1.Service)) ([]*v1.Service, []*discovery.EndpointSlice) {
	svc := dpt.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
		if mutate != nil {
			mutate(s)
		}
	})
	slice := dpt.MakeSlice("ns1", "svc1", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 80)}
		s.Endpoints = []discovery.Endpoint{dpt.ReadyEndpoint("10.180.0.1", dpt.NodeName), dpt.ReadyEndpoint("10.180.1.1", "remote")}
	})
	return []*v1.Service{svc}, []*discovery.EndpointSlice{slice}
}

func buildState(t *testing.T, family v1.IPFamily, settings dataplane.Settings, node *v1.Node, svcs []*v1.Service, sl []*discovery.EndpointSlice) *dataplane.State {
	t.Helper()
	_, st := dpt.Scenario{Name: t.Name(), Family: family, Services: svcs, Slices: sl, Node: node, Settings: settings}.Build(t)
	return st
}

func dnatTo(svc servicemodel.PortName, masq bool, eps ...string) dataplane.Verdict {
	return dataplane.Verdict{Action: dataplane.DNAT, Service: svc, Endpoints: dpt.AddrPorts(eps...), Masquerade: masq}
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

func TestLookupEdgeCases(t *testing.T) {
	pkt := dpt.MakePacket
	notAService := dataplane.Verdict{}
	defaults := dpt.DefaultSettings()
	with := func(f func(*dataplane.Settings)) dataplane.Settings {
		s := dpt.DefaultSettings()
		f(&s)
		return s
	}
	v6pkt := dataplane.Packet{Src: netip.MustParseAddr("fd00:10::2"), Dst: netip.MustParseAddrPort("[fd00:172:30::41]:80"), Protocol: v1.ProtocolTCP}

	tests := []struct {
		name     string
		settings dataplane.Settings
		node     *v1.Node // nil: dpt.TestNode
		mutate   func(*v1.Service)
		packet   dataplane.Packet
		want     dataplane.Verdict
	}{
		// Invalid packets.
		{name: "no source", settings: defaults, packet: dataplane.Packet{Dst: netip.MustParseAddrPort("172.30.0.41:80"), Protocol: v1.ProtocolTCP}, want: notAService},
		{name: "no destination", settings: defaults, packet: dataplane.Packet{Src: netip.MustParseAddr("10.0.0.2"), Protocol: v1.ProtocolTCP}, want: notAService},
		{name: "IPv6 packet in an IPv4 state", settings: defaults, packet: v6pkt, want: notAService},
		{name: "IPv6 source to an IPv4 destination", settings: defaults, packet: pkt(dataplane.FromLocalPod, "fd00:10::2", "172.30.0.41:80", v1.ProtocolTCP), want: notAService},
		{name: "IPv4 source to an IPv6 destination", settings: defaults, packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "[fd00:172:30::41]:80", v1.ProtocolTCP), want: notAService},
		{name: "IPv4-mapped IPv6 source", settings: defaults, packet: pkt(dataplane.FromLocalPod, "::ffff:10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), want: notAService},
		{name: "no protocol", settings: defaults, packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", ""), want: notAService},
		{name: "ICMP", settings: defaults, packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", "ICMP"), want: notAService},
		{name: "lower-case protocol", settings: defaults, packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", "tcp"), want: notAService},
		{name: "port 0", settings: defaults, packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:0", v1.ProtocolTCP), want: notAService},

		// Node port addresses and localhost.
		{name: "localhost node port on all of 127/8", settings: defaults,
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.2:3001", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "localhost node ports off", settings: with(func(s *dataplane.Settings) { s.LocalhostNodePorts = false }),
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:3001", v1.ProtocolTCP), want: notAService},
		{name: "explicit loopback serves 127.0.0.1", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("127.0.0.0/8") }),
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:3001", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "explicit loopback does not serve 127.0.0.2", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("127.0.0.0/8") }),
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.2:3001", v1.ProtocolTCP), want: notAService},
		{name: "explicit loopback does not serve the node IP", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("127.0.0.0/8") }),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolTCP), want: notAService},
		{name: "a /0 serves every address", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("192.168.0.0/24", "0.0.0.0/0") }),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIPAlt+":3001", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "only other-family CIDRs serve every address", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("2001:db8::/64") }),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIPAlt+":3001", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "selected node IP", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("192.168.1.0/24") }),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIPAlt+":3001", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "unselected node IP", settings: with(func(s *dataplane.Settings) { s.NodePortAddresses = prefixes("192.168.1.0/24") }),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolTCP), want: notAService},
		{name: "node port on an address the node does not have", settings: defaults,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, "192.168.0.3:3001", v1.ProtocolTCP), want: notAService},
		{name: "node port of another protocol", settings: defaults,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolUDP), want: notAService},
		{name: "no node IPs, no node ports", settings: defaults, node: dpt.MakeNode(dpt.NodeName, nil),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolTCP), want: notAService},

		// Hairpin and affinity.
		{name: "hairpin through one of two endpoints", settings: defaults,
			packet: pkt(dataplane.FromLocalPod, "10.180.0.1", "172.30.0.41:80", v1.ProtocolTCP),
			want:   dataplane.Verdict{Action: dataplane.DNAT, Service: svc1, Endpoints: dpt.AddrPorts(both...), Hairpin: dpt.AddrPorts("10.180.0.1:80")}},
		{name: "hairpin through a node port", settings: defaults,
			packet: pkt(dataplane.FromOutside, "10.180.1.1", dpt.NodeIP+":3001", v1.ProtocolTCP),
			want:   dataplane.Verdict{Action: dataplane.DNAT, Service: svc1, Endpoints: dpt.AddrPorts(both...), Hairpin: dpt.AddrPorts("10.180.1.1:80"), Masquerade: true}},
		{name: "ClientIP affinity", settings: defaults,
			mutate: func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP },
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP),
			want:   dataplane.Verdict{Action: dataplane.DNAT, Service: svc1, Endpoints: dpt.AddrPorts(both...), Affinity: true}},

		// Local-traffic detectors.
		{name: "ClusterCIDR without CIDRs detects nothing",
			settings: with(func(s *dataplane.Settings) { s.LocalDetector.CIDRs = nil }),
			packet:   pkt(dataplane.FromOutside, dpt.ExternalClient, "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "several ClusterCIDR CIDRs: the first is local",
			settings: with(func(s *dataplane.Settings) { s.LocalDetector.CIDRs = prefixes("10.0.0.0/16", "10.200.0.0/16") }),
			packet:   pkt(dataplane.FromLocalPod, "10.0.0.5", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "several ClusterCIDR CIDRs: the others are not, as kube-proxy takes one per family",
			settings: with(func(s *dataplane.Settings) { s.LocalDetector.CIDRs = prefixes("10.0.0.0/16", "10.200.0.0/16") }),
			packet:   pkt(dataplane.FromLocalPod, "10.200.0.5", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "ClusterCIDR: an invalid or other-family first CIDR is passed over",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector.CIDRs = []netip.Prefix{{}, netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("10.200.0.0/16")}
			}),
			packet: pkt(dataplane.FromLocalPod, "10.200.0.5", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "NodeCIDR: only the first pod CIDR",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}
			}),
			node:   dpt.TestNode(func(n *v1.Node) { n.Spec.PodCIDRs = []string{"10.0.0.0/24", "10.0.5.0/24"} }),
			packet: pkt(dataplane.FromLocalPod, "10.0.5.7", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "NodeCIDR matches the node's pod CIDR",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}
			}),
			packet: pkt(dataplane.FromLocalPod, "10.0.0.7", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "NodeCIDR does not match another node's pods",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}
			}),
			packet: pkt(dataplane.FromOutside, "10.0.1.7", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "NodeCIDR without pod CIDRs detects nothing",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}
			}),
			node:   dpt.TestNode(func(n *v1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "", nil }),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "BridgeInterface: a local pod packet without interface",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"}
			}),
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "BridgeInterface: another interface",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"}
			}),
			packet: withInterface(pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), "cbr1"), want: dnatTo(svc1, true, both...)},
		{name: "BridgeInterface: node traffic never matches",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"}
			}),
			packet: withInterface(pkt(dataplane.FromNode, dpt.NodeIP, "172.30.0.41:80", v1.ProtocolTCP), "cbr0"), want: dnatTo(svc1, true, both...)},
		{name: "BridgeInterface without a name detects nothing",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface}
			}),
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},
		{name: "InterfaceNamePrefix: the prefix is not the whole name",
			settings: with(func(s *dataplane.Settings) {
				s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "veth"}
			}),
			packet: withInterface(pkt(dataplane.FromOutside, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), "vet"), want: dnatTo(svc1, true, both...)},
		{name: "unknown detector mode detects nothing",
			settings: with(func(s *dataplane.Settings) { s.LocalDetector.Mode = "Bogus" }),
			packet:   pkt(dataplane.FromOutside, dpt.ExternalClient, "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},

		// Health-check node ports.
		{name: "health-check node port on a non-local address",
			settings: defaults,
			mutate: func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30000
			},
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, "192.168.0.3:30000", v1.ProtocolTCP), want: notAService},
		{name: "health-check node port on loopback",
			settings: defaults,
			mutate: func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30000
			},
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:30000", v1.ProtocolTCP), want: dataplane.Verdict{Action: dataplane.Accept, Service: svc1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := tc.node
			if node == nil {
				node = dpt.TestNode(nil)
			}
			svcs, sl := nodePortService(tc.mutate)
			st := buildState(t, v1.IPv4Protocol, tc.settings, node, svcs, sl)
			got := st.Lookup(tc.packet)
			if d := dpt.DiffVerdict(tc.want, got); d != "" {
				t.Errorf("Lookup(%+v) (-want +got):\n%s", tc.packet, d)
			}
			if got.Reason == "" {
				t.Errorf("Lookup gave no reason")
			}
		})
	}
}

func withInterface(p dataplane.Packet, iface string) dataplane.Packet {
	p.Interface = iface
	return p
}

func TestLookupIPv6(t *testing.T) {
	svc := dpt.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = "fd00:172:30::41"
		s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
	})
	slice := dpt.MakeSlice("ns1", "svc1", 1, func(s *discovery.EndpointSlice) {
		s.AddressType = discovery.AddressTypeIPv6
		s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 80)}
		s.Endpoints = []discovery.Endpoint{dpt.ReadyEndpoint("fd00:10:180::1", "")}
	})
	st := buildState(t, v1.IPv6Protocol, dpt.DefaultSettings(), dpt.TestNode(nil), []*v1.Service{svc}, []*discovery.EndpointSlice{slice})
	want := dnatTo(svc1, false, "[fd00:10:180::1]:80")
	tests := []struct {
		name   string
		packet dataplane.Packet
		want   dataplane.Verdict
	}{
		{"zone is ignored", dpt.MakePacket(dataplane.FromLocalPod, "fd00:10::2%eth0", "[fd00:172:30::41]:80", v1.ProtocolTCP), want},
		{"IPv4 packet in an IPv6 state", dpt.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), dataplane.Verdict{}},
		{"no node ports on ::1", dpt.MakePacket(dataplane.FromNode, "::1", "[::1]:3001", v1.ProtocolTCP), dataplane.Verdict{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := dpt.DiffVerdict(tc.want, st.Lookup(tc.packet)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestLookupDuplicateFrontends checks that when two services claim one
// external IP and port the outcome does not depend on map order: nat rules
// win over filter rules, then the first service by name.
func TestLookupDuplicateFrontends(t *testing.T) {
	service := func(name, clusterIP string) *v1.Service {
		return dpt.MakeService("ns1", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = clusterIP
			s.Spec.ExternalIPs = []string{dpt.ExternalIP}
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
		})
	}
	slice := func(name, ip string) *discovery.EndpointSlice {
		return dpt.MakeSlice("ns1", name, 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 80)}
			s.Endpoints = []discovery.Endpoint{dpt.ReadyEndpoint(ip, "")}
		})
	}
	a, b := dpt.PortName("ns1", "a", "p80", v1.ProtocolTCP), dpt.PortName("ns1", "b", "p80", v1.ProtocolTCP)
	packet := dpt.MakePacket(dataplane.FromOutside, dpt.ExternalClient, dpt.ExternalIP+":80", v1.ProtocolTCP)
	tests := []struct {
		name   string
		slices []*discovery.EndpointSlice
		want   dataplane.Verdict
	}{
		{"both have endpoints: the first by name", []*discovery.EndpointSlice{slice("a", "10.180.0.1"), slice("b", "10.180.0.2")}, dnatTo(a, true, "10.180.0.1:80")},
		{"only the second has endpoints: it DNATs", []*discovery.EndpointSlice{slice("b", "10.180.0.2")}, dnatTo(b, true, "10.180.0.2:80")},
		{"neither has endpoints: the first rejects", nil, dataplane.Verdict{Action: dataplane.Reject, Service: a}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Add in both orders: the answer must not change.
			for _, order := range [][]*v1.Service{{service("a", "172.30.0.41"), service("b", "172.30.0.42")}, {service("b", "172.30.0.42"), service("a", "172.30.0.41")}} {
				st := buildState(t, v1.IPv4Protocol, dpt.DefaultSettings(), dpt.TestNode(nil), order, tc.slices)
				if d := dpt.DiffVerdict(tc.want, st.Lookup(packet)); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			}
		})
	}
}

// TestLookupHandMadeState checks that a State not built by a Builder works,
// with the zero Family meaning IPv4.
func TestLookupHandMadeState(t *testing.T) {
	sp := &servicemodel.ServicePort{Name: svc1, ClusterIP: netip.MustParseAddr("172.30.0.41"), Port: 80, Protocol: v1.ProtocolTCP}
	ep := &endpoints.Endpoint{Addr: netip.MustParseAddrPort("10.180.0.1:80"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}
	st := &dataplane.State{
		Services:  servicemodel.NewMap(sp),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{svc1: {ep}}),
	}
	got := st.Lookup(dpt.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP))
	if d := dpt.DiffVerdict(dnatTo(svc1, false, "10.180.0.1:80"), got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, ok := st.ChangedSince(0); ok {
		t.Error("a hand-made State claims to know what changed")
	}
}

func TestVerdictMasqueraded(t *testing.T) {
	eps := dpt.AddrPorts("10.180.0.1:80", "10.180.0.2:80")
	tests := []struct {
		name string
		v    dataplane.Verdict
		want []bool
	}{
		{"none", dataplane.Verdict{Endpoints: eps}, []bool{false, false}},
		{"all", dataplane.Verdict{Endpoints: eps, Masquerade: true}, []bool{true, true}},
		{"hairpin", dataplane.Verdict{Endpoints: eps, Hairpin: eps[1:]}, []bool{false, true}},
	}
	for _, tc := range tests {
		var got []bool
		for _, ep := range eps {
			got = append(got, tc.v.Masqueraded(ep))
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: (-want +got):\n%s", tc.name, d)
		}
	}
}

func TestActionAndOriginString(t *testing.T) {
	got := []string{
		dataplane.NotAService.String(), dataplane.Accept.String(), dataplane.Reject.String(),
		dataplane.Drop.String(), dataplane.DNAT.String(), dataplane.Action(9).String(),
		dataplane.FromOutside.String(), dataplane.FromLocalPod.String(), dataplane.FromNode.String(), dataplane.Origin(7).String(),
	}
	want := []string{"NotAService", "Accept", "Reject", "Drop", "DNAT", "Action(9)", "outside", "local-pod", "node", "Origin(7)"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestLookupConcurrent races first Lookups, which build the index.
func TestLookupConcurrent(t *testing.T) {
	svcs, sl := nodePortService(nil)
	st := buildState(t, v1.IPv4Protocol, dpt.DefaultSettings(), dpt.TestNode(nil), svcs, sl)
	p := dpt.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP)
	want := st.Lookup(p)
	st = buildState(t, v1.IPv4Protocol, dpt.DefaultSettings(), dpt.TestNode(nil), svcs, sl)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if d := dpt.DiffVerdict(want, st.Lookup(p)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	wg.Wait()
}

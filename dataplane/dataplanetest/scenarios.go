package dataplanetest

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"
)

// Scenarios returns the built-in scenarios: the packet-flow cases of
// upstream kube-proxy's iptables proxier tests (TestNoEndpointsReject,
// TestClusterIPGeneral, TestLoadBalancer, TestNodePorts,
// TestHealthCheckNodePort, TestExternalTrafficPolicyLocal and Cluster,
// TestInternalTrafficPolicy, TestTerminatingEndpointsTrafficPolicyLocal
// and Cluster, TestInternalExternalMasquerade in its four configurations),
// with upstream's names and expectations, plus cases of ours for hairpins,
// session affinity, each local-traffic detector, externalTrafficPolicy
// Local without local endpoints, both traffic policies Local, IPv6,
// names as long as the API server accepts, and the shape of upstream's e2e
// test of a named targetPort that resolves to different ports.
// Each call returns new values, so callers may modify them.
//
// Where upstream's own case is mistaken the table corrects it:
// TestInternalExternalMasquerade's "node to NodePort with eTP:Local" sends
// to the Cluster-policy service's node port upstream; here it uses the
// eTP:Local service's.
func Scenarios() []Scenario {
	var all []Scenario
	for _, group := range [][]Scenario{
		noEndpointsReject(),
		clusterIPGeneral(),
		loadBalancer(),
		loadBalancerSourceRangesNoEndpoints(),
		nodePorts(),
		healthCheckNodePort(),
		externalTrafficPolicy(),
		internalTrafficPolicy(),
		bothTrafficPoliciesLocal(),
		terminatingEndpoints(),
		internalExternalMasquerade(),
		localDetectors(),
		sessionAffinity(),
		ipv6LoadBalancer(),
		longNames(),
		namedTargetPort(),
	} {
		all = append(all, group...)
	}
	for i := range all {
		s := &all[i]
		if s.Family == v1.IPv6Protocol && !slices.Contains(s.Tags, TagIPv6) {
			s.Tags = append(s.Tags, TagIPv6)
		}
		for j := range s.Packets {
			tagCase(&s.Packets[j])
			nftablesCase(&s.Packets[j])
			ipvsCase(&s.Packets[j])
			userspaceCase(&s.Packets[j])
		}
	}
	return all
}

// tagCase adds the tags that follow from a case's packet and verdict.
func tagCase(c *PacketCase) {
	add := func(tag string) {
		if !slices.Contains(c.Tags, tag) {
			c.Tags = append(c.Tags, tag)
		}
	}
	if c.Packet.Src.IsLoopback() || c.Packet.Dst.Addr().IsLoopback() {
		add(TagLocalhost)
	}
	if c.Want.Action == dataplane.Accept {
		add(TagHealthCheck)
	}
	if c.Want.Action != dataplane.Accept && !slices.Contains(c.Tags, TagSpoofedSource) {
		add(TagKernelSafe)
	}
}

// nftablesCase adds the nftables verdicts of the two kinds of case kube-proxy's
// nftables mode answers wholesale differently: it writes no health-check
// accept rules and neither serves nor rejects node ports on loopback.
// Cases that differ otherwise say so themselves (inMode).
func nftablesCase(c *PacketCase) {
	if _, ok := c.ByMode[dataplane.ModeNFTables]; ok {
		return
	}
	if c.Want.Action == dataplane.Accept || c.Packet.Dst.Addr().IsLoopback() {
		*c = inMode(*c, nft, none())
	}
}

// ipvsCase adds the IPVS verdict of the kind of case kube-proxy's IPVS mode
// answers wholesale differently: it neither serves nor rejects node ports
// on loopback (its health-check accept rule covers loopback). Cases that
// differ otherwise say so themselves (inMode).
func ipvsCase(c *PacketCase) {
	if _, ok := c.ByMode[ipvsMode]; ok {
		return
	}
	if c.Want.Action != dataplane.Accept && c.Packet.Dst.Addr().IsLoopback() {
		*c = inMode(*c, ipvsMode, none())
	}
}

// userspaceCase adds the userspace verdict, which differs wholesale: the
// proxy connects to every endpoint from its own address (every DNAT is
// masqueraded), it has no firewall to open for health-check node ports and
// it serves no SCTP.
func userspaceCase(c *PacketCase) {
	if _, ok := c.ByMode[dataplane.ModeUserspace]; ok {
		return
	}
	v := c.Want
	switch {
	case c.Packet.Protocol == v1.ProtocolSCTP || v.Action == dataplane.Accept:
		v = none()
	case v.Action == dataplane.DNAT:
		v.Masquerade = true
	default:
		return
	}
	*c = inMode(*c, dataplane.ModeUserspace, v)
}

// inMode sets the case's verdict under mode m.
func inMode(c PacketCase, m dataplane.Mode, v dataplane.Verdict) PacketCase {
	if c.ByMode == nil {
		c.ByMode = map[dataplane.Mode]dataplane.Verdict{}
	}
	c.ByMode[m] = v
	return c
}

const (
	nft      = dataplane.ModeNFTables
	ipvsMode = dataplane.ModeIPVS
)

const (
	pod     = dataplane.FromLocalPod
	node    = dataplane.FromNode
	outside = dataplane.FromOutside
)

// pkt is one case; dst is "ip:port", optionally followed by "/UDP" or
// "/SCTP" (TCP otherwise).
func pkt(name string, from dataplane.Origin, src, dst string, want dataplane.Verdict, tags ...string) PacketCase {
	proto := v1.ProtocolTCP
	if i := strings.LastIndexByte(dst, '/'); i >= 0 {
		dst, proto = dst[:i], v1.Protocol(dst[i+1:])
	}
	return PacketCase{Name: name, Packet: MakePacket(from, src, dst, proto), Want: want, Tags: tags}
}

func dnat(svc servicemodel.PortName, masq bool, eps ...string) dataplane.Verdict {
	return dataplane.Verdict{Action: dataplane.DNAT, Service: svc, Endpoints: AddrPorts(eps...), Masquerade: masq}
}

func withHairpin(v dataplane.Verdict, eps ...string) dataplane.Verdict {
	v.Hairpin = AddrPorts(eps...)
	return v
}

func withAffinity(v dataplane.Verdict) dataplane.Verdict {
	v.Affinity = true
	return v
}

func reject(svc servicemodel.PortName) dataplane.Verdict {
	return dataplane.Verdict{Action: dataplane.Reject, Service: svc}
}

func drop(svc servicemodel.PortName) dataplane.Verdict {
	return dataplane.Verdict{Action: dataplane.Drop, Service: svc}
}

func accept(svc servicemodel.PortName) dataplane.Verdict {
	return dataplane.Verdict{Action: dataplane.Accept, Service: svc}
}

func none() dataplane.Verdict { return dataplane.Verdict{} }

func lbIngress(ips ...string) []v1.LoadBalancerIngress {
	out := make([]v1.LoadBalancerIngress, len(ips))
	for i, ip := range ips {
		out[i].IP = ip
	}
	return out
}

// oneSlice is the usual single slice of a service: one port, endpoints.
func oneSlice(ns, svc string, port discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return MakeSlice(ns, svc, 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{port}
		s.Endpoints = eps
	})
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func noEndpointsReject() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	return []Scenario{{
		Name: "NoEndpointsReject",
		Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.ExternalIPs = []string{ExternalIP}
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			s.Status.LoadBalancer.Ingress = lbIngress("1.2.3.4")
		})},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP with no endpoints", pod, "10.0.0.2", "172.30.0.41:80", reject(svc)),
			pkt("external to external IP with no endpoints", outside, ExternalClient, ExternalIP+":80", reject(svc)),
			pkt("pod to NodePort with no endpoints", pod, "10.0.0.2", NodeIP+":3001", reject(svc)),
			pkt("external to NodePort with no endpoints", outside, ExternalClient, NodeIP+":3001", reject(svc)),
			pkt("pod to LoadBalancer IP with no endpoints", pod, "10.0.0.2", "1.2.3.4:80", reject(svc)),
			pkt("external to LoadBalancer IP with no endpoints", outside, ExternalClient, "1.2.3.4:80", reject(svc)),
		},
	}}
}

func clusterIPGeneral() []Scenario {
	svc1 := PortName("ns1", "svc1", "http", v1.ProtocolTCP)
	svc2 := func(port string, proto v1.Protocol) servicemodel.PortName {
		return PortName("ns2", "svc2", port, proto)
	}
	return []Scenario{{
		Name: "ClusterIPGeneral",
		Services: []*v1.Service{
			MakeService("ns1", "svc1", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = "172.30.0.41"
				s.Spec.Ports = []v1.ServicePort{ServicePort("http", v1.ProtocolTCP, 80, 0, 0)}
			}),
			MakeService("ns2", "svc2", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = "172.30.0.42"
				s.Spec.Ports = []v1.ServicePort{
					ServicePort("http", v1.ProtocolTCP, 80, 0, 0),
					ServicePort("https", v1.ProtocolTCP, 443, 0, 8443),
					ServicePort("dns-udp", v1.ProtocolUDP, 53, 0, 0),
					ServicePort("dns-tcp", v1.ProtocolTCP, 53, 0, 5353),
					ServicePort("dns-sctp", v1.ProtocolSCTP, 53, 0, 0),
				}
			}),
		},
		Slices: []*discovery.EndpointSlice{
			oneSlice("ns1", "svc1", SlicePort("http", v1.ProtocolTCP, 80), ReadyEndpoint("10.180.0.1", NodeName)),
			MakeSlice("ns2", "svc2", 1, func(s *discovery.EndpointSlice) {
				s.Endpoints = []discovery.Endpoint{ReadyEndpoint("10.180.0.1", NodeName), ReadyEndpoint("10.180.2.1", "node2")}
				s.Ports = []discovery.EndpointPort{
					SlicePort("http", v1.ProtocolTCP, 80),
					SlicePort("https", v1.ProtocolTCP, 8443),
					SlicePort("dns-udp", v1.ProtocolUDP, 53),
					SlicePort("dns-tcp", v1.ProtocolTCP, 5353),
					SlicePort("dns-sctp", v1.ProtocolSCTP, 53),
				}
			}),
		},
		Node: TestNode(nil),
		// As upstream's test proxier.
		ServiceCIDRs: []*networking.ServiceCIDR{MakeServiceCIDR("kubernetes", "172.30.0.0/16", "fd00:10:96::/112")},
		Settings:     DefaultSettings(),
		Packets: []PacketCase{
			pkt("simple clusterIP", pod, "10.180.0.2", "172.30.0.41:80", dnat(svc1, false, "10.180.0.1:80")),
			pkt("hairpin to cluster IP", pod, "10.180.0.1", "172.30.0.41:80",
				withHairpin(dnat(svc1, true, "10.180.0.1:80"), "10.180.0.1:80")),
			pkt("clusterIP with multiple endpoints", pod, "10.180.0.2", "172.30.0.42:80",
				dnat(svc2("http", v1.ProtocolTCP), false, "10.180.0.1:80", "10.180.2.1:80")),
			pkt("clusterIP with TargetPort", pod, "10.180.0.2", "172.30.0.42:443",
				dnat(svc2("https", v1.ProtocolTCP), false, "10.180.0.1:8443", "10.180.2.1:8443")),
			pkt("clusterIP with TCP, UDP, and SCTP on same port (TCP)", pod, "10.180.0.2", "172.30.0.42:53/TCP",
				dnat(svc2("dns-tcp", v1.ProtocolTCP), false, "10.180.0.1:5353", "10.180.2.1:5353")),
			pkt("clusterIP with TCP, UDP, and SCTP on same port (UDP)", pod, "10.180.0.2", "172.30.0.42:53/UDP",
				dnat(svc2("dns-udp", v1.ProtocolUDP), false, "10.180.0.1:53", "10.180.2.1:53")),
			pkt("clusterIP with TCP, UDP, and SCTP on same port (SCTP)", pod, "10.180.0.2", "172.30.0.42:53/SCTP",
				dnat(svc2("dns-sctp", v1.ProtocolSCTP), false, "10.180.0.1:53", "10.180.2.1:53")),
			// nftables rejects unserved ports of cluster IPs; in IPVS mode
			// a cluster IP is the node's, whose stack refuses them.
			inMode(inMode(pkt("TCP-only port does not match UDP traffic", pod, "10.180.0.2", "172.30.0.42:80/UDP", none()),
				nft, dataplane.Verdict{Action: dataplane.Reject}), ipvsMode, dataplane.Verdict{Action: dataplane.Reject}),
			inMode(inMode(pkt("svc1 does not accept svc2's ports", pod, "10.180.0.2", "172.30.0.41:443", none()),
				nft, dataplane.Verdict{Action: dataplane.Reject}), ipvsMode, dataplane.Verdict{Action: dataplane.Reject}),
			// nftables drops new connections to unallocated addresses of the
			// service CIDRs; iptables ignores them.
			inMode(pkt("unallocated cluster IP is not a service", pod, "10.180.0.2", "172.30.0.50:80", none()),
				nft, dataplane.Verdict{Action: dataplane.Drop}),
			pkt("outside the service CIDRs is not a service", pod, "10.180.0.2", "172.31.0.50:80", none()),
			// nftables masquerades hairpins of local endpoints only.
			inMode(pkt("hairpin through one of several endpoints", pod, "10.180.2.1", "172.30.0.42:80",
				withHairpin(dnat(svc2("http", v1.ProtocolTCP), false, "10.180.0.1:80", "10.180.2.1:80"), "10.180.2.1:80")),
				nft, dnat(svc2("http", v1.ProtocolTCP), false, "10.180.0.1:80", "10.180.2.1:80")),
			pkt("node to clusterIP is masqueraded", node, NodeIP, "172.30.0.41:80", dnat(svc1, true, "10.180.0.1:80")),
			pkt("external to clusterIP is masqueraded", outside, ExternalClient, "172.30.0.41:80", dnat(svc1, true, "10.180.0.1:80")),
		},
	}}
}

func loadBalancer() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	ep := "10.180.0.1:80"
	return []Scenario{{
		Name: "LoadBalancer",
		Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			s.Status.LoadBalancer.Ingress = lbIngress("1.2.3.4", "5.6.7.8")
			// The leading space is upstream's check that padding is ignored.
			s.Spec.LoadBalancerSourceRanges = []string{"192.168.0.0/24", " " + LBSourceRange}
		})},
		Slices:   []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("p80", v1.ProtocolTCP, 80), ReadyEndpoint("10.180.0.1", ""))},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP", pod, "10.0.0.2", "172.30.0.41:80", dnat(svc, false, ep)),
			pkt("external to nodePort", outside, ExternalClient, NodeIP+":3001", dnat(svc, true, ep)),
			pkt("nodePort bypasses LoadBalancerSourceRanges", outside, ExternalClientBlocked, NodeIP+":3001", dnat(svc, true, ep)),
			pkt("accepted external to LB1", outside, ExternalClient, "1.2.3.4:80", dnat(svc, true, ep)),
			pkt("accepted external to LB2", outside, ExternalClient, "5.6.7.8:80", dnat(svc, true, ep)),
			pkt("blocked external to LB1", outside, ExternalClientBlocked, "1.2.3.4:80", drop(svc)),
			pkt("blocked external to LB2", outside, ExternalClientBlocked, "5.6.7.8:80", drop(svc)),
			pkt("pod to LB1 (blocked by LoadBalancerSourceRanges)", pod, "10.0.0.2", "1.2.3.4:80", drop(svc)),
			pkt("pod to LB2 (blocked by LoadBalancerSourceRanges)", pod, "10.0.0.2", "5.6.7.8:80", drop(svc)),
			pkt("node to LB1 (allowed by LoadBalancerSourceRanges)", node, NodeIP, "1.2.3.4:80", dnat(svc, true, ep)),
			pkt("node to LB2 (allowed by LoadBalancerSourceRanges)", node, NodeIP, "5.6.7.8:80", dnat(svc, true, ep)),
			pkt("same node to LB1, SNATted to LB1 (implicitly allowed)", node, "1.2.3.4", "1.2.3.4:80", dnat(svc, true, ep), TagSpoofedSource),
			pkt("same node to LB2, SNATted to LB2 (implicitly allowed)", node, "5.6.7.8", "5.6.7.8:80", dnat(svc, true, ep), TagSpoofedSource),
			pkt("same node to LB1, SNATted to LB2 (implicitly allowed)", node, "5.6.7.8", "1.2.3.4:80", dnat(svc, true, ep), TagSpoofedSource),
		},
	}}
}

// loadBalancerSourceRangesNoEndpoints is ours: kube-proxy's nftables mode
// filters source ranges before DNAT, endpoints or not.
func loadBalancerSourceRangesNoEndpoints() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	return []Scenario{{
		Name: "LoadBalancerSourceRanges without endpoints",
		Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			s.Status.LoadBalancer.Ingress = lbIngress("1.2.3.4")
			s.Spec.LoadBalancerSourceRanges = []string{LBSourceRange}
		})},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("allowed external to LB without endpoints", outside, ExternalClient, "1.2.3.4:80", reject(svc)),
			inMode(pkt("blocked external to LB without endpoints", outside, ExternalClientBlocked, "1.2.3.4:80", reject(svc)),
				nft, drop(svc)),
			pkt("blocked external to nodePort without endpoints", outside, ExternalClientBlocked, NodeIP+":3001", reject(svc)),
		},
	}}
}

func healthCheckNodePort() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	settings := DefaultSettings()
	settings.NodePortAddresses = prefixes("127.0.0.0/8")
	return []Scenario{{
		Name: "HealthCheckNodePort",
		Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.42"
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			s.Spec.HealthCheckNodePort = 30000
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		})},
		Node:     TestNode(nil),
		Settings: settings,
		Packets: []PacketCase{
			pkt("firewall accepts HealthCheckNodePort", outside, "1.2.3.4", NodeIP+":30000", accept(svc)),
			pkt("HealthCheckNodePort on the secondary node IP", outside, ExternalClient, NodeIPAlt+":30000", accept(svc)),
			pkt("HealthCheckNodePort is TCP only", outside, ExternalClient, NodeIP+":30000/UDP", none()),
			pkt("HealthCheckNodePort only on node addresses", outside, ExternalClient, "192.168.99.22:30000", none()),
			// The filter rules for node ports without endpoints match every
			// local address, whatever nodePortAddresses says.
			// nftables and IPVS reject only where node ports are served.
			inMode(inMode(pkt("NodePort without endpoints rejected outside nodePortAddresses", outside, ExternalClient, NodeIP+":3001", reject(svc)),
				nft, none()), ipvsMode, none()),
			pkt("localhost NodePort without endpoints rejected", node, "127.0.0.1", "127.0.0.1:3001", reject(svc)),
		},
	}}
}

func externalTrafficPolicy() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	service := func(local bool) *v1.Service {
		return MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.ExternalIPs = []string{ExternalIP}
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 80)}
			s.Status.LoadBalancer.Ingress = lbIngress("1.2.3.4")
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			if local {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30000
			}
		})
	}
	sl := []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("p80", v1.ProtocolTCP, 80),
		ReadyEndpoint("10.180.0.1", ""), ReadyEndpoint("10.180.2.1", NodeName))}
	both := []string{"10.180.0.1:80", "10.180.2.1:80"}
	local := "10.180.2.1:80"
	// Without a local endpoint, internal traffic still reaches every
	// endpoint; only outside traffic has nowhere to go.
	remoteOnly := []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("p80", v1.ProtocolTCP, 80),
		ReadyEndpoint("10.180.0.1", ""), ReadyEndpoint("10.180.1.1", "remote"))}
	remote := []string{"10.180.0.1:80", "10.180.1.1:80"}
	return []Scenario{
		{
			Name:     "ExternalTrafficPolicyLocal",
			Services: []*v1.Service{service(true)},
			Slices:   sl,
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets: []PacketCase{
				pkt("pod to cluster IP hits both endpoints, unmasqueraded", pod, "10.0.0.2", "172.30.0.41:80", dnat(svc, false, both...)),
				pkt("pod to external IP hits both endpoints, unmasqueraded", pod, "10.0.0.2", ExternalIP+":80", dnat(svc, false, both...)),
				pkt("external to external IP hits only local endpoint, unmasqueraded", outside, ExternalClient, ExternalIP+":80", dnat(svc, false, local)),
				pkt("pod to LB IP hits only both endpoints, unmasqueraded", pod, "10.0.0.2", "1.2.3.4:80", dnat(svc, false, both...)),
				pkt("external to LB IP hits only local endpoint, unmasqueraded", outside, ExternalClient, "1.2.3.4:80", dnat(svc, false, local)),
				pkt("pod to NodePort hits both endpoints, unmasqueraded", pod, "10.0.0.2", NodeIP+":3001", dnat(svc, false, both...)),
				pkt("external to NodePort hits only local endpoint, unmasqueraded", outside, ExternalClient, NodeIP+":3001", dnat(svc, false, local)),
				pkt("node to LB IP hits both endpoints, masqueraded", node, NodeIP, "1.2.3.4:80", dnat(svc, true, both...)),
				pkt("node to NodePort hits both endpoints, masqueraded", node, NodeIP, NodeIP+":3001", dnat(svc, true, both...)),
				pkt("external to NodePort on the secondary node IP hits only local endpoint", outside, ExternalClient, NodeIPAlt+":3001", dnat(svc, false, local)),
				pkt("external to HealthCheckNodePort", outside, ExternalClient, NodeIP+":30000", accept(svc)),
			},
		},
		{
			Name:     "ExternalTrafficPolicyLocal without local endpoints",
			Services: []*v1.Service{service(true)},
			Slices:   remoteOnly,
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets: []PacketCase{
				pkt("pod to external IP hits every endpoint, unmasqueraded", pod, "10.0.0.2", ExternalIP+":80", dnat(svc, false, remote...)),
				pkt("pod to LB IP hits every endpoint, unmasqueraded", pod, "10.0.0.2", "1.2.3.4:80", dnat(svc, false, remote...)),
				pkt("pod to NodePort hits every endpoint, unmasqueraded", pod, "10.0.0.2", NodeIP+":3001", dnat(svc, false, remote...)),
				pkt("pod to NodePort on the secondary node IP hits every endpoint", pod, "10.0.0.2", NodeIPAlt+":3001", dnat(svc, false, remote...)),
				pkt("node to external IP hits every endpoint, masqueraded", node, NodeIP, ExternalIP+":80", dnat(svc, true, remote...)),
				pkt("node to LB IP hits every endpoint, masqueraded", node, NodeIP, "1.2.3.4:80", dnat(svc, true, remote...)),
				pkt("node to NodePort hits every endpoint, masqueraded", node, NodeIP, NodeIP+":3001", dnat(svc, true, remote...)),
				pkt("external to external IP is dropped", outside, ExternalClient, ExternalIP+":80", drop(svc)),
				pkt("external to LB IP is dropped", outside, ExternalClient, "1.2.3.4:80", drop(svc)),
				pkt("external to NodePort is dropped", outside, ExternalClient, NodeIP+":3001", drop(svc)),
				pkt("external to NodePort on the secondary node IP is dropped", outside, ExternalClient, NodeIPAlt+":3001", drop(svc)),
			},
		},
		{
			Name:     "ExternalTrafficPolicyCluster",
			Services: []*v1.Service{service(false)},
			Slices:   sl,
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets: []PacketCase{
				pkt("pod to cluster IP hits both endpoints, unmasqueraded", pod, "10.0.0.2", "172.30.0.41:80", dnat(svc, false, both...)),
				pkt("pod to external IP hits both endpoints, masqueraded", pod, "10.0.0.2", ExternalIP+":80", dnat(svc, true, both...)),
				pkt("external to external IP hits both endpoints, masqueraded", outside, ExternalClient, ExternalIP+":80", dnat(svc, true, both...)),
				pkt("pod to LB IP hits both endpoints, masqueraded", pod, "10.0.0.2", "1.2.3.4:80", dnat(svc, true, both...)),
				pkt("external to LB IP hits both endpoints, masqueraded", outside, ExternalClient, "1.2.3.4:80", dnat(svc, true, both...)),
				pkt("pod to NodePort hits both endpoints, masqueraded", pod, "10.0.0.2", NodeIP+":3001", dnat(svc, true, both...)),
				pkt("external to NodePort hits both endpoints, masqueraded", outside, ExternalClient, NodeIP+":3001", dnat(svc, true, both...)),
			},
		},
	}
}

func internalTrafficPolicy() []Scenario {
	svc := PortName("ns1", "svc1", "", v1.ProtocolTCP)
	scenario := func(name string, local bool, eps []discovery.Endpoint, cases ...PacketCase) Scenario {
		return Scenario{
			Name: "InternalTrafficPolicy: " + name,
			Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = "172.30.1.1"
				s.Spec.Selector = map[string]string{"foo": "bar"}
				s.Spec.Ports = []v1.ServicePort{ServicePort("", v1.ProtocolTCP, 80, 0, 0)}
				s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyCluster)
				if local {
					s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
				}
			})},
			Slices:   []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("", v1.ProtocolTCP, 80), eps...)},
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets:  cases,
		}
	}
	return []Scenario{
		scenario("internalTrafficPolicy is cluster", false,
			[]discovery.Endpoint{ReadyEndpoint("10.0.1.1", NodeName), ReadyEndpoint("10.0.1.2", "node1"), ReadyEndpoint("10.0.1.3", "node2")},
			pkt("pod to ClusterIP hits all endpoints", pod, "10.0.0.2", "172.30.1.1:80", dnat(svc, false, "10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"))),
		scenario("internalTrafficPolicy is local and there is one local endpoint", true,
			[]discovery.Endpoint{ReadyEndpoint("10.0.1.1", NodeName), ReadyEndpoint("10.0.1.2", "node1"), ReadyEndpoint("10.0.1.3", "node2")},
			pkt("pod to ClusterIP hits only local endpoint", pod, "10.0.0.2", "172.30.1.1:80", dnat(svc, false, "10.0.1.1:80")),
			pkt("node to ClusterIP hits only local endpoint, masqueraded", node, NodeIP, "172.30.1.1:80", dnat(svc, true, "10.0.1.1:80")),
			pkt("external to ClusterIP hits only local endpoint, masqueraded", outside, ExternalClient, "172.30.1.1:80", dnat(svc, true, "10.0.1.1:80"))),
		scenario("internalTrafficPolicy is local and there are multiple local endpoints", true,
			[]discovery.Endpoint{ReadyEndpoint("10.0.1.1", NodeName), ReadyEndpoint("10.0.1.2", NodeName), ReadyEndpoint("10.0.1.3", "node2")},
			pkt("pod to ClusterIP hits all local endpoints", pod, "10.0.0.2", "172.30.1.1:80", dnat(svc, false, "10.0.1.1:80", "10.0.1.2:80"))),
		scenario("internalTrafficPolicy is local and there are no local endpoints", true,
			[]discovery.Endpoint{ReadyEndpoint("10.0.1.1", "node0"), ReadyEndpoint("10.0.1.2", "node1"), ReadyEndpoint("10.0.1.3", "node2")},
			pkt("no endpoints", pod, "10.0.0.2", "172.30.1.1:80", drop(svc))),
	}
}

package dataplanetest

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func join(ip string, port uint16) string {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), port).String()
}

func nodePorts() []Scenario {
	type config struct {
		name              string
		family            v1.IPFamily
		localhost         bool
		nodePortAddresses []string
		allowAltNodeIP    bool
	}
	multiple := []string{"192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"}
	var out []Scenario
	for _, c := range []config{
		{"ipv4, localhost-nodeports enabled", v1.IPv4Protocol, true, nil, true},
		{"ipv4, localhost-nodeports disabled", v1.IPv4Protocol, false, nil, true},
		{"ipv4, localhost-nodeports disabled, localhost in nodeport-addresses", v1.IPv4Protocol, false, []string{"192.168.0.0/24", "127.0.0.1/32"}, false},
		// Upstream's name says enabled; its setting is disabled.
		{"ipv4, localhost-nodeports enabled, multiple nodeport-addresses", v1.IPv4Protocol, false, multiple, true},
		{"ipv6, localhost-nodeports enabled", v1.IPv6Protocol, true, nil, true},
		{"ipv6, localhost-nodeports disabled", v1.IPv6Protocol, false, nil, true},
		{"ipv6, localhost-nodeports disabled, multiple nodeport-addresses", v1.IPv6Protocol, false, multiple, false},
	} {
		svcIP, ep1, ep2 := "172.30.0.41", "10.180.0.1", "10.180.2.1"
		podIP, client, nodeIP, altIP, lo := "10.0.0.2", ExternalClient, NodeIP, NodeIPAlt, "127.0.0.1"
		addrType := discovery.AddressTypeIPv4
		if c.family == v1.IPv6Protocol {
			svcIP, ep1, ep2 = "fd00:172:30::41", "fd00:10:180::1", "fd00:10:180::2:1"
			podIP, client, nodeIP, altIP, lo = "fd00:10::2", ExternalClientV6, NodeIPv6, NodeIPv6Alt, "::1"
			addrType = discovery.AddressTypeIPv6
		}
		svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
		both := dnat(svc, true, join(ep1, 80), join(ep2, 80))
		settings := DefaultSettings()
		settings.LocalhostNodePorts = c.localhost
		if c.nodePortAddresses != nil {
			settings.NodePortAddresses = prefixes(c.nodePortAddresses...)
		}
		cases := []PacketCase{
			pkt("pod to cluster IP", pod, podIP, join(svcIP, 80), dnat(svc, false, join(ep1, 80), join(ep2, 80))),
			pkt("external to nodePort", outside, client, join(nodeIP, 3001), both),
			pkt("node to nodePort", node, nodeIP, join(nodeIP, 3001), both),
		}
		if c.family == v1.IPv4Protocol && c.localhost {
			cases = append(cases, pkt("localhost to nodePort gets masqueraded", node, lo, join(lo, 3001), both))
		} else {
			cases = append(cases, pkt("localhost to nodePort is ignored", node, lo, join(lo, 3001), none()))
		}
		if c.allowAltNodeIP {
			cases = append(cases, pkt("external to nodePort on secondary IP", outside, client, join(altIP, 3001), both))
		} else {
			cases = append(cases, pkt("secondary nodeIP ignores NodePorts", outside, client, join(altIP, 3001), none()))
		}
		out = append(out, Scenario{
			Name:   "NodePorts: " + c.name,
			Family: c.family,
			Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ClusterIP = svcIP
				s.Spec.ClusterIPs = []string{svcIP}
				s.Spec.IPFamilies = []v1.IPFamily{c.family}
				s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			})},
			Slices: []*discovery.EndpointSlice{MakeSlice("ns1", "svc1", 1, func(s *discovery.EndpointSlice) {
				s.AddressType = addrType
				s.Endpoints = []discovery.Endpoint{ReadyEndpoint(ep1, ""), ReadyEndpoint(ep2, NodeName)}
				s.Ports = []discovery.EndpointPort{SlicePort("p80", v1.ProtocolTCP, 80)}
			})},
			Node:     TestNode(nil),
			Settings: settings,
			Packets:  cases,
		})
	}
	return out
}

func terminatingEndpoints() []Scenario {
	svc := PortName("ns1", "svc1", "", v1.ProtocolTCP)
	service := func(local bool) *v1.Service {
		return MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.1.1"
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			if local {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}
			s.Spec.Ports = []v1.ServicePort{ServicePort("", v1.ProtocolTCP, 80, 0, 80)}
			s.Spec.HealthCheckNodePort = 30000
			s.Status.LoadBalancer.Ingress = lbIngress("1.2.3.4")
		})
	}
	// ready, serving, terminating.
	rst := func(ip, node string) discovery.Endpoint { return Endpoint(ip, node, true, true, false) }
	st := func(ip, node string) discovery.Endpoint { return Endpoint(ip, node, false, true, true) }
	t := func(ip, node string) discovery.Endpoint { return Endpoint(ip, node, false, false, true) }
	eps := func(s ...string) []string {
		out := make([]string, len(s))
		for i, ip := range s {
			out[i] = ip + ":80"
		}
		return out
	}
	scenario := func(policy, name string, local bool, endpoints []discovery.Endpoint, toCluster, toLB dataplane.Verdict) Scenario {
		return Scenario{
			Name:     "TerminatingEndpointsTrafficPolicy" + policy + ": " + name,
			Services: []*v1.Service{service(local)},
			Slices:   []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("", v1.ProtocolTCP, 80), endpoints...)},
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets: []PacketCase{
				pkt("pod to clusterIP", pod, "10.0.0.2", "172.30.1.1:80", toCluster),
				pkt("external to LB", outside, ExternalClient, "1.2.3.4:80", toLB),
			},
		}
	}
	other := "another-node"
	return []Scenario{
		scenario("Local", "ready endpoints exist", true,
			[]discovery.Endpoint{rst("10.0.1.1", NodeName), rst("10.0.1.2", NodeName), st("10.0.1.3", NodeName), t("10.0.1.4", NodeName), rst("10.0.1.5", "node-1")},
			dnat(svc, false, eps("10.0.1.1", "10.0.1.2", "10.0.1.5")...), dnat(svc, false, eps("10.0.1.1", "10.0.1.2")...)),
		scenario("Local", "only terminating endpoints exist", true,
			[]discovery.Endpoint{st("10.0.1.2", NodeName), st("10.0.1.3", NodeName), t("10.0.1.4", NodeName), rst("10.0.1.5", "node-1")},
			dnat(svc, false, eps("10.0.1.5")...), dnat(svc, false, eps("10.0.1.2", "10.0.1.3")...)),
		scenario("Local", "terminating endpoints on remote node", true,
			[]discovery.Endpoint{st("10.0.1.5", "node-1")},
			dnat(svc, false, eps("10.0.1.5")...), drop(svc)),
		scenario("Local", "no usable endpoints on any node", true,
			[]discovery.Endpoint{t("10.0.1.5", NodeName), t("10.0.1.5", "node-1")},
			reject(svc), reject(svc)),
		scenario("Cluster", "ready endpoints exist", false,
			[]discovery.Endpoint{rst("10.0.1.1", NodeName), rst("10.0.1.2", NodeName), st("10.0.1.3", other), t("10.0.1.4", other), rst("10.0.1.5", other)},
			dnat(svc, false, eps("10.0.1.1", "10.0.1.2", "10.0.1.5")...), dnat(svc, true, eps("10.0.1.1", "10.0.1.2", "10.0.1.5")...)),
		scenario("Cluster", "only terminating endpoints exist", false,
			[]discovery.Endpoint{st("10.0.1.2", NodeName), st("10.0.1.3", NodeName), t("10.0.1.4", other), st("10.0.1.5", other)},
			dnat(svc, false, eps("10.0.1.2", "10.0.1.3", "10.0.1.5")...), dnat(svc, true, eps("10.0.1.2", "10.0.1.3", "10.0.1.5")...)),
		scenario("Cluster", "terminating endpoints on remote node", false,
			[]discovery.Endpoint{st("10.0.1.5", "node-1")},
			dnat(svc, false, eps("10.0.1.5")...), dnat(svc, true, eps("10.0.1.5")...)),
		scenario("Cluster", "no usable endpoints on any node", false,
			[]discovery.Endpoint{t("10.0.1.5", NodeName), t("10.0.1.5", "node-1")},
			reject(svc), reject(svc)),
	}
}

// internalExternalMasquerade is upstream's TestInternalExternalMasquerade:
// svc1 is plain, svc2 has externalTrafficPolicy Local, svc3
// internalTrafficPolicy Local, each with one local and one remote endpoint;
// a base table is run under four configurations with per-case overrides.
func internalExternalMasquerade() []Scenario {
	services, sl := internalExternalMasqueradeObjects()
	base := internalExternalMasqueradeCases()

	unmasq := func(v *dataplane.Verdict) { v.Masquerade = false }
	masq := func(v *dataplane.Verdict) { v.Masquerade = true }
	localOnly := func(v *dataplane.Verdict) { v.Endpoints = AddrPorts("10.180.0.2:80") }
	// Without a detector, nothing tells off-cluster clients of cluster IPs
	// apart, and pod traffic to eTP:Local destinations is not short-circuited.
	noDetector := map[string]func(*dataplane.Verdict){
		"node to ClusterIP":                    unmasq,
		"node to ClusterIP with eTP:Local":     unmasq,
		"node to ClusterIP with iTP:Local":     unmasq,
		"external to ClusterIP":                unmasq,
		"external to ClusterIP with eTP:Local": unmasq,
		"external to ClusterIP with iTP:Local": unmasq,
		"pod to NodePort with eTP:Local":       localOnly,
		"pod to LB with eTP:Local":             localOnly,
	}
	masqueradeAll := map[string]func(*dataplane.Verdict){
		"pod to ClusterIP":                masq,
		"pod to ClusterIP with eTP:Local": masq,
		"pod to ClusterIP with iTP:Local": masq,
	}
	// With masqueradeAll every cluster IP packet is masqueraded, detector
	// or not; only the missing short-circuit remains.
	both := maps.Clone(masqueradeAll)
	both["pod to NodePort with eTP:Local"] = localOnly
	both["pod to LB with eTP:Local"] = localOnly

	variant := func(name string, settings dataplane.Settings, overrides map[string]func(*dataplane.Verdict)) Scenario {
		cases := slices.Clone(base)
		for i := range cases {
			if f := overrides[cases[i].Name]; f != nil {
				f(&cases[i].Want)
			}
		}
		return Scenario{
			Name:     "InternalExternalMasquerade: " + name,
			Services: services,
			Slices:   sl,
			Node:     TestNode(nil),
			Settings: settings,
			Packets:  cases,
		}
	}
	withDetector, noDet := DefaultSettings(), DefaultSettings()
	noDet.LocalDetector = dataplane.LocalDetector{}
	allDet, allNoDet := withDetector, noDet
	allDet.MasqueradeAll, allNoDet.MasqueradeAll = true, true
	return []Scenario{
		variant("base", withDetector, nil),
		variant("no LocalTrafficDetector", noDet, noDetector),
		variant("masqueradeAll", allDet, masqueradeAll),
		variant("masqueradeAll, no LocalTrafficDetector", allNoDet, both),
	}
}

// internalExternalMasqueradeObjects are TestInternalExternalMasquerade's
// services: svc1 (Cluster policies), svc2 (eTP:Local) and svc3
// (iTP:Local), LoadBalancers with node ports 3001 to 3003, each with one
// local and one remote endpoint.
func internalExternalMasqueradeObjects() ([]*v1.Service, []*discovery.EndpointSlice) {
	service := func(ns, name, ip string, nodePort int32, vip string, mutate func(*v1.Service)) *v1.Service {
		return MakeService(ns, name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = ip
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, nodePort, 0)}
			s.Spec.HealthCheckNodePort = nodePort + 27000
			s.Status.LoadBalancer.Ingress = lbIngress(vip)
			if mutate != nil {
				mutate(s)
			}
		})
	}
	services := []*v1.Service{
		service("ns1", "svc1", "172.30.0.41", 3001, "1.2.3.4", nil),
		service("ns2", "svc2", "172.30.0.42", 3002, "5.6.7.8", func(s *v1.Service) {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}),
		service("ns3", "svc3", "172.30.0.43", 3003, "9.10.11.12", func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		}),
	}
	slice := func(ns, name, local, remote string) *discovery.EndpointSlice {
		return oneSlice(ns, name, SlicePort("p80", v1.ProtocolTCP, 80), ReadyEndpoint(local, NodeName), ReadyEndpoint(remote, "remote"))
	}
	sl := []*discovery.EndpointSlice{
		slice("ns1", "svc1", "10.180.0.1", "10.180.1.1"),
		slice("ns2", "svc2", "10.180.0.2", "10.180.1.2"),
		slice("ns3", "svc3", "10.180.0.3", "10.180.1.3"),
	}
	return services, sl
}

// internalExternalMasqueradeCases are the packet cases of the base
// configuration (a ClusterCIDR detector, no masqueradeAll).
func internalExternalMasqueradeCases() []PacketCase {
	svc1 := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	svc2 := PortName("ns2", "svc2", "p80", v1.ProtocolTCP)
	svc3 := PortName("ns3", "svc3", "p80", v1.ProtocolTCP)
	all1 := []string{"10.180.0.1:80", "10.180.1.1:80"}
	all2 := []string{"10.180.0.2:80", "10.180.1.2:80"}
	all3 := []string{"10.180.0.3:80", "10.180.1.3:80"}
	return []PacketCase{
		pkt("pod to ClusterIP", pod, "10.0.0.2", "172.30.0.41:80", dnat(svc1, false, all1...)),
		pkt("pod to NodePort", pod, "10.0.0.2", NodeIP+":3001", dnat(svc1, true, all1...)),
		pkt("pod to LB", pod, "10.0.0.2", "1.2.3.4:80", dnat(svc1, true, all1...)),
		pkt("node to ClusterIP", node, NodeIP, "172.30.0.41:80", dnat(svc1, true, all1...)),
		pkt("node to NodePort", node, NodeIP, NodeIP+":3001", dnat(svc1, true, all1...)),
		pkt("localhost to NodePort", node, "127.0.0.1", "127.0.0.1:3001", dnat(svc1, true, all1...)),
		pkt("node to LB", node, NodeIP, "1.2.3.4:80", dnat(svc1, true, all1...)),
		pkt("external to ClusterIP", outside, ExternalClient, "172.30.0.41:80", dnat(svc1, true, all1...)),
		pkt("external to NodePort", outside, ExternalClient, NodeIP+":3001", dnat(svc1, true, all1...)),
		pkt("external to LB", outside, ExternalClient, "1.2.3.4:80", dnat(svc1, true, all1...)),

		pkt("pod to ClusterIP with eTP:Local", pod, "10.0.0.2", "172.30.0.42:80", dnat(svc2, false, all2...)),
		pkt("pod to NodePort with eTP:Local", pod, "10.0.0.2", NodeIP+":3002", dnat(svc2, false, all2...)),
		pkt("pod to LB with eTP:Local", pod, "10.0.0.2", "5.6.7.8:80", dnat(svc2, false, all2...)),
		pkt("node to ClusterIP with eTP:Local", node, NodeIP, "172.30.0.42:80", dnat(svc2, true, all2...)),
		pkt("node to NodePort with eTP:Local", node, NodeIP, NodeIP+":3002", dnat(svc2, true, all2...)),
		pkt("localhost to NodePort with eTP:Local", node, "127.0.0.1", "127.0.0.1:3002", dnat(svc2, true, all2...)),
		pkt("node to LB with eTP:Local", node, NodeIP, "5.6.7.8:80", dnat(svc2, true, all2...)),
		pkt("external to ClusterIP with eTP:Local", outside, ExternalClient, "172.30.0.42:80", dnat(svc2, true, all2...)),
		pkt("external to NodePort with eTP:Local", outside, ExternalClient, NodeIP+":3002", dnat(svc2, false, "10.180.0.2:80")),
		pkt("external to LB with eTP:Local", outside, ExternalClient, "5.6.7.8:80", dnat(svc2, false, "10.180.0.2:80")),

		pkt("pod to ClusterIP with iTP:Local", pod, "10.0.0.2", "172.30.0.43:80", dnat(svc3, false, "10.180.0.3:80")),
		pkt("pod to NodePort with iTP:Local", pod, "10.0.0.2", NodeIP+":3003", dnat(svc3, true, all3...)),
		pkt("pod to LB with iTP:Local", pod, "10.0.0.2", "9.10.11.12:80", dnat(svc3, true, all3...)),
		pkt("node to ClusterIP with iTP:Local", node, NodeIP, "172.30.0.43:80", dnat(svc3, true, "10.180.0.3:80")),
		pkt("node to NodePort with iTP:Local", node, NodeIP, NodeIP+":3003", dnat(svc3, true, all3...)),
		pkt("localhost to NodePort with iTP:Local", node, "127.0.0.1", "127.0.0.1:3003", dnat(svc3, true, all3...)),
		pkt("node to LB with iTP:Local", node, NodeIP, "9.10.11.12:80", dnat(svc3, true, all3...)),
		pkt("external to ClusterIP with iTP:Local", outside, ExternalClient, "172.30.0.43:80", dnat(svc3, true, "10.180.0.3:80")),
		pkt("external to NodePort with iTP:Local", outside, ExternalClient, NodeIP+":3003", dnat(svc3, true, all3...)),
		pkt("external to LB with iTP:Local", outside, ExternalClient, "9.10.11.12:80", dnat(svc3, true, all3...)),
	}
}

// localDetectors checks each --detect-local-mode on a cluster IP (whose
// traffic is masqueraded unless it is from a local pod) and on an
// externalTrafficPolicy: Local node port (which local pods reach through
// every endpoint).
func localDetectors() []Scenario {
	svc1 := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	svc2 := PortName("ns2", "svc2", "p80", v1.ProtocolTCP)
	services := []*v1.Service{
		MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
		}),
		MakeService("ns2", "svc2", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIP = "172.30.0.42"
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3002, 0)}
		}),
	}
	sl := []*discovery.EndpointSlice{
		oneSlice("ns1", "svc1", SlicePort("p80", v1.ProtocolTCP, 80), ReadyEndpoint("10.180.0.1", NodeName)),
		oneSlice("ns2", "svc2", SlicePort("p80", v1.ProtocolTCP, 80), ReadyEndpoint("10.180.0.2", NodeName), ReadyEndpoint("10.180.1.2", "remote")),
	}
	cip := func(masq bool) dataplane.Verdict { return dnat(svc1, masq, "10.180.0.1:80") }
	npAll := dnat(svc2, false, "10.180.0.2:80", "10.180.1.2:80")
	npLocal := dnat(svc2, false, "10.180.0.2:80")
	via := func(c PacketCase, iface string) PacketCase {
		c.Packet.Interface = iface
		return c
	}
	scenario := func(name string, d dataplane.LocalDetector, cases ...PacketCase) Scenario {
		settings := DefaultSettings()
		settings.LocalDetector = d
		return Scenario{Name: "LocalDetector: " + name, Services: services, Slices: sl, Node: TestNode(nil), Settings: settings, Packets: cases}
	}
	return []Scenario{
		scenario("NodeCIDR", dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR},
			pkt("pod on this node to ClusterIP is not masqueraded", pod, "10.0.0.2", "172.30.0.41:80", cip(false)),
			pkt("pod on another node to ClusterIP is masqueraded", outside, "10.0.1.5", "172.30.0.41:80", cip(true)),
			pkt("pod on this node to eTP:Local NodePort reaches every endpoint", pod, "10.0.0.2", NodeIP+":3002", npAll),
			pkt("pod on another node to eTP:Local NodePort reaches the local endpoint", outside, "10.0.1.5", NodeIP+":3002", npLocal),
		),
		scenario("BridgeInterface", dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"},
			via(pkt("pod through the bridge to ClusterIP is not masqueraded", pod, "10.0.0.2", "172.30.0.41:80", cip(false)), "cbr0"),
			via(pkt("external through eth0 to ClusterIP is masqueraded", outside, ExternalClient, "172.30.0.41:80", cip(true)), "eth0"),
			pkt("node to ClusterIP is masqueraded", node, NodeIP, "172.30.0.41:80", cip(true)),
			via(pkt("pod through the bridge to eTP:Local NodePort reaches every endpoint", pod, "10.0.0.2", NodeIP+":3002", npAll), "cbr0"),
			via(pkt("external through eth0 to eTP:Local NodePort reaches the local endpoint", outside, ExternalClient, NodeIP+":3002", npLocal), "eth0"),
		),
		scenario("InterfaceNamePrefix", dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "veth"},
			via(pkt("pod through a veth to ClusterIP is not masqueraded", pod, "10.0.0.2", "172.30.0.41:80", cip(false)), "veth1234"),
			via(pkt("external through eth0 to ClusterIP is masqueraded", outside, ExternalClient, "172.30.0.41:80", cip(true)), "eth0"),
			pkt("node to ClusterIP is masqueraded", node, NodeIP, "172.30.0.41:80", cip(true)),
			via(pkt("pod through a veth to eTP:Local NodePort reaches every endpoint", pod, "10.0.0.2", NodeIP+":3002", npAll), "veth1234"),
		),
		scenario("None", dataplane.LocalDetector{},
			pkt("pod to ClusterIP is not masqueraded", pod, "10.0.0.2", "172.30.0.41:80", cip(false)),
			pkt("external to ClusterIP is not masqueraded", outside, ExternalClient, "172.30.0.41:80", cip(false)),
			pkt("pod to eTP:Local NodePort reaches only the local endpoint", pod, "10.0.0.2", NodeIP+":3002", npLocal),
			pkt("node to eTP:Local NodePort reaches every endpoint, masqueraded", node, NodeIP, NodeIP+":3002", dnat(svc2, true, "10.180.0.2:80", "10.180.1.2:80")),
		),
	}
}

func sessionAffinity() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	both := []string{"10.180.0.1:80", "10.180.1.1:80"}
	return []Scenario{{
		Name: "SessionAffinity",
		Services: []*v1.Service{MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10800)}}
		})},
		Slices: []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("p80", v1.ProtocolTCP, 80),
			ReadyEndpoint("10.180.0.1", NodeName), ReadyEndpoint("10.180.1.1", "remote"))},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to ClusterIP is pinned", pod, "10.0.0.2", "172.30.0.41:80", withAffinity(dnat(svc, false, both...))),
			pkt("external to NodePort is pinned", outside, ExternalClient, NodeIP+":3001", withAffinity(dnat(svc, true, both...))),
			inMode(pkt("hairpin is pinned", pod, "10.180.1.1", "172.30.0.41:80", withHairpin(withAffinity(dnat(svc, false, both...)), "10.180.1.1:80")),
				nft, withAffinity(dnat(svc, false, both...))),
			pkt("local hairpin is pinned", pod, "10.180.0.1", "172.30.0.41:80", withHairpin(withAffinity(dnat(svc, false, both...)), "10.180.0.1:80")),
		},
	}}
}

func ipv6LoadBalancer() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	const (
		clusterIP  = "fd00:172:30::41"
		externalIP = "2001:db8:99::11"
		vip        = "2001:db8:ffff::4"
		podIP      = "fd00:10::2"
	)
	both := []string{"[fd00:10:180::1]:80", "[fd00:10:180::2:1]:80"}
	local := "[fd00:10:180::2:1]:80"
	service := func(mutate func(*v1.Service)) *v1.Service {
		return MakeService("ns1", "svc1", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = clusterIP
			s.Spec.ClusterIPs = []string{clusterIP}
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
			s.Spec.ExternalIPs = []string{externalIP}
			s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
			s.Status.LoadBalancer.Ingress = lbIngress(vip)
			mutate(s)
		})
	}
	v6slice := MakeSlice("ns1", "svc1", 1, func(s *discovery.EndpointSlice) {
		s.AddressType = discovery.AddressTypeIPv6
		s.Endpoints = []discovery.Endpoint{ReadyEndpoint("fd00:10:180::1", ""), ReadyEndpoint("fd00:10:180::2:1", NodeName)}
		s.Ports = []discovery.EndpointPort{SlicePort("p80", v1.ProtocolTCP, 80)}
	})
	return []Scenario{
		{
			Name:   "IPv6 ExternalTrafficPolicyLocal",
			Family: v1.IPv6Protocol,
			Services: []*v1.Service{service(func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30000
				s.Spec.LoadBalancerSourceRanges = []string{"2600:5200::/32"}
			})},
			Slices:   []*discovery.EndpointSlice{v6slice},
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets: []PacketCase{
				pkt("pod to cluster IP hits both endpoints, unmasqueraded", pod, podIP, join(clusterIP, 80), dnat(svc, false, both...)),
				pkt("external to cluster IP is masqueraded", outside, ExternalClientV6, join(clusterIP, 80), dnat(svc, true, both...)),
				pkt("external to external IP hits only local endpoint", outside, ExternalClientV6, join(externalIP, 80), dnat(svc, false, local)),
				pkt("external to LB IP hits only local endpoint", outside, ExternalClientV6, join(vip, 80), dnat(svc, false, local)),
				pkt("blocked external to LB IP", outside, "2001:db8:5::1", join(vip, 80), drop(svc)),
				pkt("pod to LB IP is blocked by LoadBalancerSourceRanges", pod, podIP, join(vip, 80), drop(svc)),
				pkt("pod to NodePort hits both endpoints", pod, podIP, join(NodeIPv6, 3001), dnat(svc, false, both...)),
				pkt("node to NodePort hits both endpoints, masqueraded", node, NodeIPv6, join(NodeIPv6, 3001), dnat(svc, true, both...)),
				pkt("external to NodePort hits only local endpoint", outside, ExternalClientV6, join(NodeIPv6, 3001), dnat(svc, false, local)),
				pkt("external to HealthCheckNodePort", outside, ExternalClientV6, join(NodeIPv6, 30000), accept(svc)),
			},
		},
		{
			Name:     "IPv6 NoEndpointsReject",
			Family:   v1.IPv6Protocol,
			Services: []*v1.Service{service(func(*v1.Service) {})},
			Node:     TestNode(nil),
			Settings: DefaultSettings(),
			Packets: []PacketCase{
				pkt("pod to cluster IP with no endpoints", pod, podIP, join(clusterIP, 80), reject(svc)),
				pkt("external to external IP with no endpoints", outside, ExternalClientV6, join(externalIP, 80), reject(svc)),
				pkt("external to NodePort with no endpoints", outside, ExternalClientV6, join(NodeIPv6, 3001), reject(svc)),
				pkt("external to LB IP with no endpoints", outside, ExternalClientV6, join(vip, 80), reject(svc)),
			},
		},
	}
}

// bothTrafficPoliciesLocal is a service whose internal and external
// traffic policies are both Local, with and without a local endpoint.
// Internal traffic to its external destinations reaches every endpoint in
// iptables mode; kube-proxy's IPVS mode sends it to the cluster IP, whose
// local endpoints alone serve it (without any, dropped, and rejected for
// the node's own packets, which IPVS takes before the filter's drop).
func bothTrafficPoliciesLocal() []Scenario {
	svc := PortName("ns1", "svc1", "p80", v1.ProtocolTCP)
	service := MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.ExternalIPs = []string{ExternalIP}
		s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 3001, 80)}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
	})
	slice := func(eps ...discovery.Endpoint) []*discovery.EndpointSlice {
		return []*discovery.EndpointSlice{oneSlice("ns1", "svc1", SlicePort("p80", v1.ProtocolTCP, 80), eps...)}
	}
	both, local := []string{"10.180.0.1:80", "10.180.2.1:80"}, "10.180.2.1:80"
	remote := []string{"10.180.0.1:80", "10.180.1.1:80"}
	return []Scenario{{
		Name:     "BothTrafficPoliciesLocal",
		Services: []*v1.Service{service},
		Slices:   slice(ReadyEndpoint("10.180.0.1", ""), ReadyEndpoint("10.180.2.1", NodeName)),
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP hits the local endpoint", pod, "10.0.0.2", "172.30.0.41:80", dnat(svc, false, local)),
			inMode(pkt("pod to external IP", pod, "10.0.0.2", ExternalIP+":80", dnat(svc, false, both...)),
				ipvsMode, dnat(svc, false, local)),
			inMode(pkt("pod to NodePort", pod, "10.0.0.2", NodeIP+":3001", dnat(svc, false, both...)),
				ipvsMode, dnat(svc, false, local)),
			inMode(pkt("node to NodePort", node, NodeIP, NodeIP+":3001", dnat(svc, true, both...)),
				ipvsMode, dnat(svc, true, local)),
			pkt("external to NodePort hits the local endpoint", outside, ExternalClient, NodeIP+":3001", dnat(svc, false, local)),
			pkt("external to external IP hits the local endpoint", outside, ExternalClient, ExternalIP+":80", dnat(svc, false, local)),
		},
	}, {
		Name:     "BothTrafficPoliciesLocal without local endpoints",
		Services: []*v1.Service{service},
		Slices:   slice(ReadyEndpoint("10.180.0.1", ""), ReadyEndpoint("10.180.1.1", "remote")),
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP is dropped", pod, "10.0.0.2", "172.30.0.41:80", drop(svc)),
			inMode(pkt("pod to external IP", pod, "10.0.0.2", ExternalIP+":80", dnat(svc, false, remote...)),
				ipvsMode, drop(svc)),
			inMode(pkt("pod to NodePort", pod, "10.0.0.2", NodeIP+":3001", dnat(svc, false, remote...)),
				ipvsMode, drop(svc)),
			// IPVS takes the node's own packets before the filter's drop.
			inMode(pkt("node to NodePort", node, NodeIP, NodeIP+":3001", dnat(svc, true, remote...)),
				ipvsMode, reject(svc)),
			pkt("external to NodePort is dropped", outside, ExternalClient, NodeIP+":3001", drop(svc)),
		},
	}}
}

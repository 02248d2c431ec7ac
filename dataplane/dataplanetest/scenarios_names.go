package dataplanetest

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// longLabel is a DNS label of the API server's longest, 63 characters:
// word, then x's, then a digit, so that two labels of different words
// differ early and each ends as a label must.
func longLabel(word string, digit byte) string {
	return word + strings.Repeat("x", 62-len(word)) + string(digit)
}

// longNames are services whose namespace, name and port name are as long
// as the API server accepts (63 characters each): a port name is a DNS
// label, not a container port's 15-character IANA name, and every mode
// serves them, whatever a rule's comment or object name can hold. The
// names fill every shape of rule: a ClusterIP port with endpoints, one
// without (rejected at its cluster IP and node port), a node port, a
// Local policy and session affinity over IPv6 endpoints (the longest
// endpoint chain and affinity set names).
func longNames() []Scenario {
	ns := longLabel("namespace", '1')
	svc1, svc2 := longLabel("service", '1'), longLabel("service", '2')
	portA, portB := longLabel("port-a", '1'), longLabel("port-b", '2')
	served, unserved := PortName(ns, svc1, portA, v1.ProtocolTCP), PortName(ns, svc1, portB, v1.ProtocolTCP)
	nodePort := PortName(ns, svc2, portA, v1.ProtocolTCP)
	v6 := PortName(ns, svc2, portB, v1.ProtocolTCP)
	v6eps := []string{"[fd00:10:180::1]:65535", "[fd00:10:180:ffff:ffff:ffff:ffff:fff2]:65535"}
	return []Scenario{{
		Name: "LongNames",
		Services: []*v1.Service{
			MakeService(ns, svc1, func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ClusterIP = "172.30.0.41"
				s.Spec.Ports = []v1.ServicePort{
					ServicePort(portA, v1.ProtocolTCP, 80, 0, 8080),
					ServicePort(portB, v1.ProtocolTCP, 81, 3001, 0),
				}
			}),
			MakeService(ns, svc2, func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ClusterIP = "172.30.0.42"
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.Ports = []v1.ServicePort{ServicePort(portA, v1.ProtocolTCP, 80, 3002, 0)}
			}),
		},
		Slices: []*discovery.EndpointSlice{
			oneSlice(ns, svc1, SlicePort(portA, v1.ProtocolTCP, 8080), ReadyEndpoint("10.180.0.1", "remote")),
			oneSlice(ns, svc2, SlicePort(portA, v1.ProtocolTCP, 80), ReadyEndpoint("10.180.0.2", NodeName), ReadyEndpoint("10.180.2.1", "remote")),
		},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP", pod, "10.0.0.2", "172.30.0.41:80", dnat(served, false, "10.180.0.1:8080")),
			pkt("pod to cluster IP without endpoints", pod, "10.0.0.2", "172.30.0.41:81", reject(unserved)),
			pkt("external to node port without endpoints", outside, ExternalClient, NodeIP+":3001", reject(unserved)),
			pkt("pod to cluster IP of a Local policy", pod, "10.0.0.2", "172.30.0.42:80", dnat(nodePort, false, "10.180.0.2:80", "10.180.2.1:80")),
			pkt("external to node port of a Local policy", outside, ExternalClient, NodeIP+":3002", dnat(nodePort, false, "10.180.0.2:80")),
		},
	}, {
		Name:   "LongNames IPv6 SessionAffinity",
		Family: v1.IPv6Protocol,
		Services: []*v1.Service{MakeService(ns, svc2, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIP = "fd00:172:30::42"
			s.Spec.ClusterIPs = []string{"fd00:172:30::42"}
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
			s.Spec.Ports = []v1.ServicePort{ServicePort(portB, v1.ProtocolTCP, 80, 3003, 65535)}
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86400)}}
		})},
		Slices: []*discovery.EndpointSlice{MakeSlice(ns, svc2, 1, func(s *discovery.EndpointSlice) {
			s.AddressType = discovery.AddressTypeIPv6
			s.Ports = []discovery.EndpointPort{SlicePort(portB, v1.ProtocolTCP, 65535)}
			s.Endpoints = []discovery.Endpoint{ReadyEndpoint("fd00:10:180::1", NodeName), ReadyEndpoint("fd00:10:180:ffff:ffff:ffff:ffff:fff2", "remote")}
		})},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP is pinned", pod, "fd00:10::2", "[fd00:172:30::42]:80", withAffinity(dnat(v6, false, v6eps...))),
			pkt("external to node port is pinned", outside, ExternalClientV6, "["+NodeIPv6+"]:3003", withAffinity(dnat(v6, true, v6eps...))),
		},
	}}
}

// namedTargetPort is the shape of upstream's e2e test "should support
// named targetPorts that resolve to different ports on different
// endpoints": the service port (named as the service, 18 characters) has
// a named targetPort, and the pods behind it number that container port
// differently, so the EndpointSlice controller gives each port number a
// slice of its own, both under the service port's name.
func namedTargetPort() []Scenario {
	const name = "mutable-named-port"
	svc := PortName("services-1234", name, name, v1.ProtocolTCP)
	return []Scenario{{
		Name: "NamedTargetPortDifferentPorts",
		Services: []*v1.Service{MakeService("services-1234", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []v1.ServicePort{{Name: name, Protocol: v1.ProtocolTCP, Port: 8001, TargetPort: intstr.FromString("mutable-port")}}
		})},
		Slices: []*discovery.EndpointSlice{
			MakeSlice("services-1234", name, 1, func(s *discovery.EndpointSlice) {
				s.Ports = []discovery.EndpointPort{SlicePort(name, v1.ProtocolTCP, 8080)}
				s.Endpoints = []discovery.Endpoint{ReadyEndpoint("10.180.0.1", NodeName)}
			}),
			MakeSlice("services-1234", name, 2, func(s *discovery.EndpointSlice) {
				s.Ports = []discovery.EndpointPort{SlicePort(name, v1.ProtocolTCP, 8000)}
				s.Endpoints = []discovery.Endpoint{ReadyEndpoint("10.180.2.1", "remote")}
			}),
		},
		Node:     TestNode(nil),
		Settings: DefaultSettings(),
		Packets: []PacketCase{
			pkt("pod to cluster IP reaches both ports", pod, "10.0.0.2", "172.30.0.41:8001", dnat(svc, false, "10.180.0.1:8080", "10.180.2.1:8000")),
			pkt("node to cluster IP is masqueraded", node, NodeIP, "172.30.0.41:8001", dnat(svc, true, "10.180.0.1:8080", "10.180.2.1:8000")),
		},
	}}
}

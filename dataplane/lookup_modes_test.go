package dataplane_test

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// TestLookupModeIPVSAndUserspace checks where the IPVS and userspace modes
// answer otherwise than iptables mode, and a few places where they do not,
// on nodePortService (one local endpoint 10.180.0.1, one remote).
func TestLookupModeIPVSAndUserspace(t *testing.T) {
	const (
		ipvs      = dataplane.ModeIPVS
		userspace = dataplane.ModeUserspace
	)
	pkt := dpt.MakePacket
	notAService := dataplane.Verdict{}
	reject := dataplane.Verdict{Action: dataplane.Reject}
	local := "10.180.0.1:80"
	bothLocal := func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalIPs = []string{"192.168.99.11"}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		s.Spec.HealthCheckNodePort = 30000
	}
	externalLocal := func(s *v1.Service) {
		bothLocal(s)
		s.Spec.InternalTrafficPolicy = nil
	}
	noLocalEndpoint := func(sl *discovery.EndpointSlice) { sl.Endpoints = sl.Endpoints[1:] }
	noEndpoints := func(sl *discovery.EndpointSlice) { sl.Endpoints = nil }
	withHealthCheck := func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30000
	}
	sctp := func(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolSCTP }
	onlyAlt := dpt.DefaultSettings()
	onlyAlt.NodePortAddresses = prefixes("192.168.1.0/24")

	tests := []struct {
		name     string
		mode     dataplane.Mode
		settings *dataplane.Settings // nil: dpt.DefaultSettings
		mutate   func(*v1.Service)
		slice    func(*discovery.EndpointSlice)
		packet   dataplane.Packet
		want     dataplane.Verdict
	}{
		// IPVS: service addresses are the node's.
		{name: "cluster IP on an unserved port is refused", mode: ipvs,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:443", v1.ProtocolTCP), want: reject},
		{name: "cluster IP on an unserved protocol is refused", mode: ipvs,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolUDP), want: reject},
		{name: "external IP on an unserved port is refused", mode: ipvs, mutate: bothLocal,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, "192.168.99.11:443", v1.ProtocolTCP), want: reject},
		{name: "an address no service has is not a service", mode: ipvs,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.50:80", v1.ProtocolTCP), want: notAService},

		// IPVS: node ports.
		{name: "no node ports on loopback", mode: ipvs,
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:3001", v1.ProtocolTCP), want: notAService},
		{name: "no reject on loopback", mode: ipvs, slice: noEndpoints,
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:3001", v1.ProtocolTCP), want: notAService},
		{name: "no reject outside nodePortAddresses", mode: ipvs, settings: &onlyAlt, slice: noEndpoints,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolTCP), want: notAService},
		{name: "reject inside nodePortAddresses", mode: ipvs, settings: &onlyAlt, slice: noEndpoints,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIPAlt+":3001", v1.ProtocolTCP), want: dataplane.Verdict{Action: dataplane.Reject, Service: svc1}},
		{name: "health-check node port on loopback is accepted", mode: ipvs, mutate: withHealthCheck,
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:30000", v1.ProtocolTCP), want: dataplane.Verdict{Action: dataplane.Accept, Service: svc1}},

		// IPVS: internal traffic to external destinations of a service
		// with both policies Local goes to the cluster IP.
		{name: "both Local: pod to node port reaches the local endpoint", mode: ipvs, mutate: bothLocal,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", dpt.NodeIP+":3001", v1.ProtocolTCP), want: dnatTo(svc1, false, local)},
		{name: "both Local: node to external IP reaches the local endpoint, masqueraded", mode: ipvs, mutate: bothLocal,
			packet: pkt(dataplane.FromNode, dpt.NodeIP, "192.168.99.11:80", v1.ProtocolTCP), want: dnatTo(svc1, true, local)},
		{name: "both Local without local endpoints: pod to node port is dropped", mode: ipvs, mutate: bothLocal, slice: noLocalEndpoint,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", dpt.NodeIP+":3001", v1.ProtocolTCP), want: dataplane.Verdict{Action: dataplane.Drop, Service: svc1}},
		{name: "both Local: outside to node port reaches the local endpoint", mode: ipvs, mutate: bothLocal,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolTCP), want: dnatTo(svc1, false, local)},
		{name: "externalTrafficPolicy Local alone: pod to node port reaches every endpoint", mode: ipvs, mutate: externalLocal,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", dpt.NodeIP+":3001", v1.ProtocolTCP), want: dnatTo(svc1, false, both...)},

		// Userspace: the proxy connects from its own address.
		{name: "pod to cluster IP is masqueraded", mode: userspace,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
		{name: "hairpin through one of two endpoints is masqueraded either way", mode: userspace,
			packet: pkt(dataplane.FromLocalPod, "10.180.0.1", "172.30.0.41:80", v1.ProtocolTCP),
			want:   dataplane.Verdict{Action: dataplane.DNAT, Service: svc1, Endpoints: dpt.AddrPorts(both...), Hairpin: dpt.AddrPorts("10.180.0.1:80"), Masquerade: true}},
		{name: "outside to an externalTrafficPolicy Local node port is masqueraded", mode: userspace, mutate: externalLocal,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":3001", v1.ProtocolTCP), want: dnatTo(svc1, true, local)},
		{name: "health-check node port is no service", mode: userspace, mutate: withHealthCheck,
			packet: pkt(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":30000", v1.ProtocolTCP), want: notAService},
		{name: "SCTP is not served", mode: userspace, mutate: sctp,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolSCTP), want: notAService},
		{name: "SCTP without endpoints is not rejected", mode: userspace, mutate: sctp, slice: noEndpoints,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolSCTP), want: notAService},
		{name: "no endpoints: rejected", mode: userspace, slice: noEndpoints,
			packet: pkt(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP), want: dataplane.Verdict{Action: dataplane.Reject, Service: svc1}},
		{name: "localhost node port as in iptables mode", mode: userspace,
			packet: pkt(dataplane.FromNode, "127.0.0.1", "127.0.0.1:3001", v1.ProtocolTCP), want: dnatTo(svc1, true, both...)},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode)+"/"+tc.name, func(t *testing.T) {
			settings := dpt.DefaultSettings()
			if tc.settings != nil {
				settings = *tc.settings
			}
			svcs, sl := nodePortService(tc.mutate)
			if tc.slice != nil {
				tc.slice(sl[0])
			}
			st := buildState(t, v1.IPv4Protocol, settings, dpt.TestNode(nil), svcs, sl)
			got := st.LookupMode(tc.mode, tc.packet)
			if d := dpt.DiffVerdict(tc.want, got); d != "" {
				t.Errorf("LookupMode(%s, %+v) (-want +got):\n%s", tc.mode, tc.packet, d)
			}
			if got.Reason == "" {
				t.Errorf("LookupMode(%s) gave no reason", tc.mode)
			}
		})
	}
}

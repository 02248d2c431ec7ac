package userspace

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// TestClientOfNodeAddresses checks which sources are the node itself:
// loopback, Node.IPs, anything LocalAddresses holds (a second NIC's
// address, whatever its zone or IPv4-in-IPv6 form), and whatever says it
// came from the node; not an outside address, nor a second NIC's when
// nothing tells the node's addresses.
func TestClientOfNodeAddresses(t *testing.T) {
	held := &FakeLocalAddresses{}
	held.Set(netip.MustParseAddr("10.50.0.2"), netip.MustParseAddr("fd00:50::2"), netip.MustParseAddr("fe80::2"))
	node := dataplane.Node{IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}
	addr := netip.MustParseAddr
	tests := []struct {
		name  string
		local LocalAddresses
		src   netip.Addr
		from  dataplane.Origin
		want  client
	}{
		{"a Node IP", held, addr("192.168.0.2"), dataplane.FromOutside, client{src: addr("192.168.0.2"), local: true}},
		{"loopback", held, addr("127.0.0.5"), dataplane.FromOutside, client{src: addr("127.0.0.5"), local: true}},
		{"a second NIC's address", held, addr("10.50.0.2"), dataplane.FromOutside, client{src: addr("10.50.0.2"), local: true}},
		{"a second NIC's IPv6 address", held, addr("fd00:50::2"), dataplane.FromOutside, client{src: addr("fd00:50::2"), local: true}},
		{"a link-local address with its zone", held, addr("fe80::2%eth1"), dataplane.FromOutside, client{src: addr("fe80::2%eth1"), local: true}},
		{"an IPv4-mapped address", held, addr("::ffff:10.50.0.2"), dataplane.FromOutside, client{src: addr("::ffff:10.50.0.2"), local: true}},
		{"an outside client", held, addr("203.0.113.9"), dataplane.FromOutside, client{src: addr("203.0.113.9")}},
		{"an outside client said to come from the node", held, addr("203.0.113.9"), dataplane.FromNode, client{src: addr("203.0.113.9"), local: true}},
		{"a second NIC's address, addresses unknown", nil, addr("10.50.0.2"), dataplane.FromOutside, client{src: addr("10.50.0.2")}},
		{"a second NIC's address, none held", &FakeLocalAddresses{}, addr("10.50.0.2"), dataplane.FromOutside, client{src: addr("10.50.0.2")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &routes{node: node, local: tc.local}
			got := r.clientOf(tc.src, tc.from, "")
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(client{}), cmpopts.EquateComparable(netip.Addr{})); d != "" {
				t.Errorf("clientOf(%s, %v) (-want +got):\n%s", tc.src, tc.from, d)
			}
		})
	}
}

// TestNodeTrafficFromOtherAddresses: a connection to an
// externalTrafficPolicy Local service without a local endpoint, from an
// address the node holds but its Node object does not list, reaches
// every endpoint through each external frontend; from outside, and from
// that address once the node no longer holds it, it is dropped.
func TestNodeTrafficFromOtherAddresses(t *testing.T) {
	c := newCluster()
	c.b.UpdateNode(dataplanetest.MakeNode(dataplanetest.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.2"}}
	}))
	c.service("web", "10.96.0.10", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.ExternalIPs = []string{"10.60.0.1"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.70.0.1"}}
	}, "http/TCP/80")
	// Both endpoints are on node2.
	c.endpoints("web", []string{"10.0.0.1", "10.0.0.2"}, "http/TCP/8080")
	held := &FakeLocalAddresses{}
	held.Set(netip.MustParseAddr("10.50.0.2"))
	d := newDataplane(t, newBackends(t), Config{LocalAddresses: held})
	mustSync(t, d, c.build())

	web := dataplanetest.PortName("ns", "web", "http", v1.ProtocolTCP)
	served := dataplane.Verdict{Action: dataplane.DNAT, Service: web, Masquerade: true,
		Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:8080"), netip.MustParseAddrPort("10.0.0.2:8080")}}
	dropped := dataplane.Verdict{Action: dataplane.Drop, Service: web}
	frontends := []string{"10.60.0.1:80", "10.70.0.1:80", "192.168.0.2:30080"}
	steps := []struct {
		name   string
		change func()
		src    string
		want   dataplane.Verdict
	}{
		{"from a second NIC's address", func() {}, "10.50.0.2", served},
		{"from the Node IP", func() {}, "192.168.0.2", served},
		{"from outside", func() {}, "203.0.113.9", dropped},
		{"from an address the node no longer holds", func() { held.Set() }, "10.50.0.2", dropped},
	}
	for _, st := range steps {
		st.change()
		for _, fe := range frontends {
			p := dataplane.Packet{From: dataplane.FromOutside, Src: netip.MustParseAddr(st.src), Dst: netip.MustParseAddrPort(fe), Protocol: v1.ProtocolTCP}
			got, err := d.trace(p)
			if err != nil {
				t.Fatalf("%s to %s: %v", st.name, fe, err)
			}
			if diff := dataplanetest.DiffVerdict(st.want, got); diff != "" {
				t.Errorf("%s to %s (-want +got):\n%s", st.name, fe, diff)
			}
		}
	}
}

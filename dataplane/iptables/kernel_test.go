package iptables

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// lab is a node namespace with two pods behind veth pairs and an outside
// client on a third, the node routing between them.
type lab struct {
	node, client, pod1, pod2 *netns.NS
	v6                       bool
	// Addresses, in the lab's family.
	nodeIP, clientIP, blockedIP, pod1IP, pod2IP, pod1GW string
}

func newLab(t *testing.T, v6 bool) *lab {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save", "iptables", "sh", "conntrack")
	l := &lab{v6: v6, node: netns.New(t, "node"), client: netns.New(t, "client"), pod1: netns.New(t, "pod1"), pod2: netns.New(t, "pod2")}
	if v6 {
		l.nodeIP, l.clientIP, l.blockedIP = "fd00:192::2", "fd00:192::10", "fd00:192::200"
		l.pod1IP, l.pod2IP, l.pod1GW = "fd00:10:1::1", "fd00:10:2::1", "fd00:10:1::fe"
		netns.Veth(t, l.node, "eth0", []string{l.nodeIP + "/64"}, l.client, "eth0", []string{l.clientIP + "/64", l.blockedIP + "/64"})
		netns.Veth(t, l.node, "veth1", []string{l.pod1GW + "/64"}, l.pod1, "eth0", []string{l.pod1IP + "/64"})
		netns.Veth(t, l.node, "veth2", []string{"fd00:10:2::fe/64"}, l.pod2, "eth0", []string{l.pod2IP + "/64"})
		l.pod1.MustRun("ip", "-6", "route", "add", "default", "via", l.pod1GW)
		l.pod2.MustRun("ip", "-6", "route", "add", "default", "via", "fd00:10:2::fe")
		l.client.MustRun("ip", "-6", "route", "add", "fd00:172::/32", "via", l.nodeIP)
		l.node.MustRun("ip", "-6", "route", "add", "default", "via", l.clientIP)
		l.node.MustRun("sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/all/forwarding")
		return l
	}
	l.nodeIP, l.clientIP, l.blockedIP = "192.168.0.2", "192.168.0.10", "192.168.0.200"
	l.pod1IP, l.pod2IP, l.pod1GW = "10.0.1.1", "10.0.2.1", "10.0.1.254"
	netns.Veth(t, l.node, "eth0", []string{l.nodeIP + "/24"}, l.client, "eth0", []string{l.clientIP + "/24", l.blockedIP + "/24"})
	netns.Veth(t, l.node, "veth1", []string{l.pod1GW + "/24"}, l.pod1, "eth0", []string{l.pod1IP + "/24"})
	netns.Veth(t, l.node, "veth2", []string{"10.0.2.254/24"}, l.pod2, "eth0", []string{l.pod2IP + "/24"})
	l.pod1.MustRun("ip", "route", "add", "default", "via", l.pod1GW)
	l.pod2.MustRun("ip", "route", "add", "default", "via", "10.0.2.254")
	for _, dst := range []string{"1.2.3.4/32", "192.168.99.0/24", "172.30.0.0/16"} {
		l.client.MustRun("ip", "route", "add", dst, "via", l.nodeIP)
	}
	// A node has a default route; service IPs are routed by it before the
	// nat table rewrites them.
	l.node.MustRun("ip", "route", "add", "default", "via", l.clientIP)
	l.node.MustRun("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	return l
}

// hostPort joins an address and port, bracketing IPv6.
func hostPort(ip string, port int) string {
	if strings.Contains(ip, ":") {
		return fmt.Sprintf("[%s]:%d", ip, port)
	}
	return fmt.Sprintf("%s:%d", ip, port)
}

// labCluster is the Services and slices the kernel tests program.
type labCluster struct {
	b      *dataplane.Builder
	slices map[string]*discovery.EndpointSlice
}

const otherNode = "other-node"

func (l *lab) cluster(t *testing.T) *labCluster {
	fam := family(l.v6)
	cidr := "10.0.0.0/8"
	if l.v6 {
		cidr = "fd00:10::/32"
	}
	settings := dataplanetest.DefaultSettings()
	settings.LocalDetector.CIDRs = prefixes(cidr)
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{fam}, NodeName: dataplanetest.NodeName, Settings: settings,
		OnSkip: func(kind, reason string) { t.Errorf("Builder skipped a %s: %s", kind, reason) },
	})
	b.UpdateNode(dataplanetest.MakeNode(dataplanetest.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: l.nodeIP}}
	}))
	return &labCluster{b: b, slices: map[string]*discovery.EndpointSlice{}}
}

// service adds Service name with one TCP and one UDP port 80 (node ports
// np and np+1 when np is not 0), endpoints on port 8080.
func (c *labCluster) service(l *lab, name, clusterIP string, np int32, mutate func(*v1.Service), eps ...discovery.Endpoint) {
	c.b.UpdateService(nil, dataplanetest.MakeService("lab", name, func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = clusterIP, []string{clusterIP}
		s.Spec.IPFamilies = []v1.IPFamily{family(l.v6)}
		s.Spec.Type = v1.ServiceTypeClusterIP
		var np2 int32
		if np != 0 {
			s.Spec.Type, np2 = v1.ServiceTypeNodePort, np+1
		}
		s.Spec.Ports = []v1.ServicePort{
			dataplanetest.ServicePort("tcp", v1.ProtocolTCP, 80, np, 8080),
			dataplanetest.ServicePort("udp", v1.ProtocolUDP, 80, np2, 8080),
		}
		if mutate != nil {
			mutate(s)
		}
	}))
	sl := dataplanetest.MakeSlice("lab", name, 0, func(sl *discovery.EndpointSlice) {
		if l.v6 {
			sl.AddressType = discovery.AddressTypeIPv6
		}
		sl.Ports = []discovery.EndpointPort{
			dataplanetest.SlicePort("tcp", v1.ProtocolTCP, 8080),
			dataplanetest.SlicePort("udp", v1.ProtocolUDP, 8080),
		}
		sl.Endpoints = eps
	})
	c.slices[name] = sl
	c.b.UpdateEndpointSlice(nil, sl)
}

// setEndpoints replaces the endpoints of service name.
func (c *labCluster) setEndpoints(name string, eps ...discovery.Endpoint) {
	old := c.slices[name]
	upd := old.DeepCopy()
	upd.Endpoints = eps
	c.slices[name] = upd
	c.b.UpdateEndpointSlice(old, upd)
}

func (c *labCluster) build() *dataplane.State { return c.b.Build().States[0] }

func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

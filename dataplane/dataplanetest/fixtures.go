package dataplanetest

import (
	"fmt"
	"net/netip"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The fixture addresses, those of upstream kube-proxy's proxier tests.
const (
	// NodeName is this node's name: endpoints with this nodeName are local.
	NodeName = "test-node"
	// NodeIP and NodeIPAlt are this node's IPv4 addresses, NodeIPv6 and
	// NodeIPv6Alt its IPv6 ones (TestNode has all four).
	NodeIP      = "192.168.0.2"
	NodeIPAlt   = "192.168.1.2"
	NodeIPv6    = "2001:db8::1"
	NodeIPv6Alt = "2001:db8:1::2"
	// NodePodCIDR and NodePodCIDRv6 are this node's spec.podCIDRs.
	NodePodCIDR   = "10.0.0.0/24"
	NodePodCIDRv6 = "fd00:10::/96"
	// ClusterCIDR and ClusterCIDRv6 are every pod's addresses, the local
	// detector's CIDRs in DefaultSettings.
	ClusterCIDR   = "10.0.0.0/8"
	ClusterCIDRv6 = "fd00:10::/64"
	// ExternalIP is a service external IP.
	ExternalIP = "192.168.99.11"
	// ExternalClient is an off-cluster client inside LBSourceRange, a
	// loadBalancerSourceRanges entry; ExternalClientBlocked is one outside
	// it.
	ExternalClient        = "203.0.113.2"
	ExternalClientBlocked = "203.0.113.130"
	LBSourceRange         = "203.0.113.0/25"
	// ExternalClientV6 is an off-cluster IPv6 client.
	ExternalClientV6 = "2600:5200::1"
)

// MakeService returns a Service ns/name changed by mutate (when not nil).
func MakeService(ns, name string, mutate func(*v1.Service)) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if mutate != nil {
		mutate(svc)
	}
	return svc
}

// ServicePort returns a service port; targetPort 0 leaves it unset (the
// port itself).
func ServicePort(name string, proto v1.Protocol, port, nodePort, targetPort int32) v1.ServicePort {
	p := v1.ServicePort{Name: name, Protocol: proto, Port: port, NodePort: nodePort}
	if targetPort != 0 {
		p.TargetPort = intstr.FromInt32(targetPort)
	}
	return p
}

// MakeSlice returns IPv4 EndpointSlice "<svcName>-<sliceNum>" of Service
// ns/svcName, changed by mutate (when not nil).
func MakeSlice(ns, svcName string, sliceNum int, mutate func(*discovery.EndpointSlice)) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      fmt.Sprintf("%s-%d", svcName, sliceNum),
			Labels:    map[string]string{discovery.LabelServiceName: svcName},
		},
		AddressType: discovery.AddressTypeIPv4,
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

// SlicePort returns an EndpointSlice port.
func SlicePort(name string, proto v1.Protocol, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
}

// Endpoint returns an EndpointSlice endpoint at ip on node nodeName ("":
// unknown, so not local) with the given conditions.
func Endpoint(ip, nodeName string, ready, serving, terminating bool) discovery.Endpoint {
	ep := discovery.Endpoint{
		Addresses: []string{ip},
		Conditions: discovery.EndpointConditions{
			Ready:       &ready,
			Serving:     &serving,
			Terminating: &terminating,
		},
	}
	if nodeName != "" {
		ep.NodeName = &nodeName
	}
	return ep
}

// ReadyEndpoint returns a ready, serving, not terminating endpoint at ip on
// node nodeName.
func ReadyEndpoint(ip, nodeName string) discovery.Endpoint {
	return Endpoint(ip, nodeName, true, true, false)
}

// MakeNode returns Node name changed by mutate (when not nil).
func MakeNode(name string, mutate func(*v1.Node)) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mutate != nil {
		mutate(n)
	}
	return n
}

// TestNode returns this node: NodeName with InternalIPs NodeIP, NodeIPAlt,
// NodeIPv6 and NodeIPv6Alt, pod CIDRs NodePodCIDR and NodePodCIDRv6, and
// no zone; mutate (when not nil) changes it further.
func TestNode(mutate func(*v1.Node)) *v1.Node {
	return MakeNode(NodeName, func(n *v1.Node) {
		for _, ip := range []string{NodeIP, NodeIPAlt, NodeIPv6, NodeIPv6Alt} {
			n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
		}
		n.Spec.PodCIDR = NodePodCIDR
		n.Spec.PodCIDRs = []string{NodePodCIDR, NodePodCIDRv6}
		if mutate != nil {
			mutate(n)
		}
	})
}

// MakeServiceCIDR returns a ServiceCIDR object holding cidrs.
func MakeServiceCIDR(name string, cidrs ...string) *networking.ServiceCIDR {
	return &networking.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networking.ServiceCIDRSpec{CIDRs: cidrs},
	}
}

// DefaultSettings returns the settings of upstream's test proxier: local
// traffic detected by ClusterCIDR/ClusterCIDRv6, localhost NodePorts on,
// NodePorts on every node address.
func DefaultSettings() dataplane.Settings {
	return dataplane.Settings{
		LocalDetector: dataplane.LocalDetector{
			Mode:  dataplane.LocalModeClusterCIDR,
			CIDRs: []netip.Prefix{netip.MustParsePrefix(ClusterCIDR), netip.MustParsePrefix(ClusterCIDRv6)},
		},
		LocalhostNodePorts: true,
	}
}

// PortName returns the name of port port (proto) of Service ns/name.
func PortName(ns, name, port string, proto v1.Protocol) servicemodel.PortName {
	return servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

// MakePacket returns a packet from src to dst ("ip:port", IPv6 bracketed).
// It panics on a malformed address: it is for literal test tables.
func MakePacket(from dataplane.Origin, src, dst string, proto v1.Protocol) dataplane.Packet {
	return dataplane.Packet{
		Src:      netip.MustParseAddr(src),
		Dst:      netip.MustParseAddrPort(dst),
		Protocol: proto,
		From:     from,
	}
}

// AddrPorts parses "ip:port" strings. It panics on a malformed one: it is
// for literal test tables.
func AddrPorts(s ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddrPort(a)
	}
	return out
}

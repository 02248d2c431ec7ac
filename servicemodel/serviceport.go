package servicemodel

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/affinity"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PortName identifies one port of one service. Protocol is part of the
// identity (a service may expose TCP and UDP under one port name) but not of
// String.
type PortName struct {
	types.NamespacedName
	// Port is spec.ports[].name; it may be "".
	Port     string
	Protocol v1.Protocol
}

// String returns "ns/name:port", or "ns/name" for an unnamed port.
func (n PortName) String() string {
	if n.Port == "" {
		return n.NamespacedName.String()
	}
	return n.NamespacedName.String() + ":" + n.Port
}

// Compare orders port names by service (CompareNames), port name and
// protocol, the order Map.Service returns ports in; it returns -1, 0 or +1.
func (n PortName) Compare(o PortName) int {
	return cmp.Or(
		CompareNames(n.NamespacedName, o.NamespacedName),
		cmp.Compare(n.Port, o.Port),
		cmp.Compare(n.Protocol, o.Protocol),
	)
}

// CompareNames orders service names by namespace, then name, the order
// in which the dataplanes program and report services; it returns -1, 0
// or +1, for slices.SortFunc.
func CompareNames(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// ServicePort is one normalized port of a Service in one IP family. It is
// immutable once a tracker or NewMap has it: snapshots share ServicePorts, so
// never modify one that came from them.
type ServicePort struct {
	Name      PortName
	ClusterIP netip.Addr
	Port      uint16
	Protocol  v1.Protocol
	// NodePort is 0 when there is none. It is kept whatever the service
	// type, as upstream does.
	NodePort uint16
	// ExternalIPs, LoadBalancerVIPs and LoadBalancerSourceRanges are of the
	// port's family, normalized, sorted and de-duplicated. An empty
	// LoadBalancerSourceRanges allows every source.
	ExternalIPs              []netip.Addr
	LoadBalancerVIPs         []netip.Addr
	LoadBalancerSourceRanges []netip.Prefix
	InternalPolicyLocal      bool
	ExternalPolicyLocal      bool
	// HealthCheckNodePort is non-zero only for LoadBalancer services with
	// externalTrafficPolicy: Local.
	HealthCheckNodePort uint16
	SessionAffinity     affinity.SessionAffinity
	// TrafficDistribution is spec.trafficDistribution; "" when unset or when
	// the service asks for the controller's Auto topology hints (annotation
	// service.kubernetes.io/topology-mode), which override it.
	TrafficDistribution string
}

// String returns "clusterIP:port/PROTO", with IPv6 addresses bracketed.
// Upstream prints IPv6 cluster IPs unbracketed, which is ambiguous.
func (p *ServicePort) String() string {
	return netip.AddrPortFrom(p.ClusterIP, p.Port).String() + "/" + string(p.Protocol)
}

// Family returns the port's IP family, that of its ClusterIP.
func (p *ServicePort) Family() v1.IPFamily {
	return familyOf(p.ClusterIP)
}

// ExternallyAccessible reports whether the port has a node port, a
// LoadBalancer VIP or an external IP.
func (p *ServicePort) ExternallyAccessible() bool {
	return p.NodePort != 0 || len(p.LoadBalancerVIPs) != 0 || len(p.ExternalIPs) != 0
}

// Policy returns what endpoint selection needs to know about the port.
func (p *ServicePort) Policy() affinity.Policy {
	return affinity.Policy{
		InternalLocal:        p.InternalPolicyLocal,
		ExternalLocal:        p.ExternalPolicyLocal,
		ExternallyAccessible: p.ExternallyAccessible(),
		TrafficDistribution:  p.TrafficDistribution,
	}
}

// Equal reports whether p and q have the same content. Trackers use it to
// tell a real change from a metadata-only update; dataplanes can use it to
// skip ports they have already programmed. Two nil ports are equal.
func (p *ServicePort) Equal(q *ServicePort) bool {
	if p == nil || q == nil {
		return p == q
	}
	return p.Name == q.Name &&
		p.ClusterIP == q.ClusterIP &&
		p.Port == q.Port &&
		p.Protocol == q.Protocol &&
		p.NodePort == q.NodePort &&
		slices.Equal(p.ExternalIPs, q.ExternalIPs) &&
		slices.Equal(p.LoadBalancerVIPs, q.LoadBalancerVIPs) &&
		slices.Equal(p.LoadBalancerSourceRanges, q.LoadBalancerSourceRanges) &&
		p.InternalPolicyLocal == q.InternalPolicyLocal &&
		p.ExternalPolicyLocal == q.ExternalPolicyLocal &&
		p.HealthCheckNodePort == q.HealthCheckNodePort &&
		p.SessionAffinity == q.SessionAffinity &&
		p.TrafficDistribution == q.TrafficDistribution
}

// frontends appends every address p is reached at: its cluster IP, external
// IPs and LoadBalancer VIPs, and its node port (with an invalid IP).
func (p *ServicePort) frontends(dst []Frontend) []Frontend {
	dst = append(dst, Frontend{IP: p.ClusterIP, Port: p.Port, Protocol: p.Protocol})
	for _, ip := range p.ExternalIPs {
		dst = append(dst, Frontend{IP: ip, Port: p.Port, Protocol: p.Protocol})
	}
	for _, ip := range p.LoadBalancerVIPs {
		dst = append(dst, Frontend{IP: ip, Port: p.Port, Protocol: p.Protocol})
	}
	if p.NodePort != 0 {
		dst = append(dst, Frontend{Port: p.NodePort, Protocol: p.Protocol})
	}
	return dst
}

func familyOf(ip netip.Addr) v1.IPFamily {
	switch {
	case ip.Is4():
		return v1.IPv4Protocol
	case ip.Is6():
		return v1.IPv6Protocol
	}
	return v1.IPFamilyUnknown
}

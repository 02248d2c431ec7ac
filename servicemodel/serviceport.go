package servicemodel

import (
	"net/netip"

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
	panic("unimplemented")
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
	// TrafficDistribution is spec.trafficDistribution, "" when unset.
	TrafficDistribution string
}

// String returns "clusterIP:port/PROTO", with IPv6 addresses bracketed.
func (p *ServicePort) String() string {
	panic("unimplemented")
}

// Family returns the port's IP family, that of its ClusterIP.
func (p *ServicePort) Family() v1.IPFamily {
	panic("unimplemented")
}

// ExternallyAccessible reports whether the port has a node port, a
// LoadBalancer VIP or an external IP.
func (p *ServicePort) ExternallyAccessible() bool {
	panic("unimplemented")
}

// Policy returns what endpoint selection needs to know about the port.
func (p *ServicePort) Policy() affinity.Policy {
	panic("unimplemented")
}

package dataplane

import (
	"net/netip"

	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Origin is where a packet enters the node's netfilter path.
type Origin int

const (
	// FromOutside is a packet arriving from another host.
	FromOutside Origin = iota
	// FromLocalPod is a packet from a pod on this node.
	FromLocalPod
	// FromNode is a packet sent by a process in the node's own network
	// namespace.
	FromNode
)

// Packet is the first packet of a connection.
type Packet struct {
	Src      netip.Addr
	Dst      netip.AddrPort
	Protocol v1.Protocol
	From     Origin
	// Interface is the interface the packet entered through, for the
	// interface-based local-traffic detectors; "" for FromNode.
	Interface string
}

// Action is what the proxy does to a packet.
type Action int

const (
	// NotAService: the packet is not addressed to a service the proxy
	// handles and passes untouched.
	NotAService Action = iota
	// Accept: the packet is let through a local firewall (health-check
	// node ports) without being rewritten.
	Accept
	// Reject: the service has no endpoints; TCP gets a reset, UDP an ICMP
	// port unreachable.
	Reject
	// Drop: the service has no endpoint for this traffic (traffic policy
	// Local with none on this node, or a source range excluding it).
	Drop
	// DNAT: the packet is rewritten to one of Verdict.Endpoints.
	DNAT
)

// Verdict is what Kubernetes semantics say happens to a packet.
type Verdict struct {
	Action Action
	// Service is the service port the packet matched; zero for
	// NotAService.
	Service servicemodel.PortName
	// Endpoints is the set one endpoint is picked from, sorted by address;
	// set only for DNAT.
	Endpoints []netip.AddrPort
	// Masquerade reports that the packet's source is rewritten to the
	// node's address.
	Masquerade bool
	// Affinity reports that the client is pinned to the endpoint it first
	// reached (ClientIP session affinity).
	Affinity bool
	// Reason explains the verdict for people; it is not part of the
	// contract and tests should not compare it.
	Reason string
}

// Lookup answers where p goes under s. It is the executable specification
// every dataplane is tested against.
func (s *State) Lookup(p Packet) Verdict {
	panic("unimplemented")
}

package dataplane

import (
	"fmt"
	"net/netip"
	"slices"

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

// String returns "outside", "local-pod" or "node".
func (o Origin) String() string {
	switch o {
	case FromOutside:
		return "outside"
	case FromLocalPod:
		return "local-pod"
	case FromNode:
		return "node"
	}
	return fmt.Sprintf("Origin(%d)", int(o))
}

// Packet is the first packet of a connection.
type Packet struct {
	Src netip.Addr
	Dst netip.AddrPort
	// Protocol is TCP, UDP or SCTP.
	Protocol v1.Protocol
	// From is where the packet comes from. FromNode makes the source
	// local (iptables' "--src-type LOCAL") whatever its address; a source
	// that is a node IP or loopback is local anyway. Whether the packet
	// counts as local pod traffic is up to the state's LocalDetector.
	From Origin
	// Interface is the interface the packet entered through, for the
	// interface-based local-traffic detectors; "" for FromNode. A
	// FromLocalPod packet without one is taken to have entered through a
	// pod interface.
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

// String returns the action's name, as its constant is spelled.
func (a Action) String() string {
	switch a {
	case NotAService:
		return "NotAService"
	case Accept:
		return "Accept"
	case Reject:
		return "Reject"
	case Drop:
		return "Drop"
	case DNAT:
		return "DNAT"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Verdict is what Kubernetes semantics say happens to a packet.
type Verdict struct {
	Action Action
	// Service is the service port the packet matched; zero for
	// NotAService.
	Service servicemodel.PortName
	// Endpoints is the set one endpoint is picked from, sorted by address;
	// set only for DNAT.
	Endpoints []netip.AddrPort
	// Masquerade reports that the connection's source is rewritten to the
	// node's address whichever endpoint is picked: the rules before
	// endpoint selection masquerade it, or every candidate is a hairpin.
	Masquerade bool
	// Hairpin is the candidates whose IP is the packet's source, sorted by
	// address; nil when there are none. A connection DNATed to one of them
	// would reach its own sender, so it is masqueraded (kube-proxy's
	// per-endpoint "-s <endpoint IP> -j KUBE-MARK-MASQ" rule). Masqueraded
	// combines the two fields for one chosen endpoint.
	Hairpin []netip.AddrPort
	// Affinity reports that the client is pinned to the endpoint it first
	// reached (ClientIP session affinity).
	Affinity bool
	// Reason explains the verdict for people; it is not part of the
	// contract and tests should not compare it.
	Reason string
}

// Masqueraded reports whether a connection that v sends to endpoint ep has
// its source rewritten.
func (v Verdict) Masqueraded(ep netip.AddrPort) bool {
	return v.Masquerade || slices.Contains(v.Hairpin, ep)
}

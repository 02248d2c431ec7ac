package customdataplane

import (
	"net/netip"
	"strconv"

	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Table is everything the dataplane programs for one IP family: the maps a
// datapath (an eBPF program, an OVS pipeline) reads for each new
// connection. It is served as JSON.
type Table struct {
	Family     v1.IPFamily
	Generation uint64
	// NodeIPs are the node's own addresses: a packet from one of them
	// comes from the node, a packet to one of them (or to loopback) is
	// addressed to the node.
	NodeIPs []netip.Addr
	// NodePortAddrs are the destinations that serve node ports.
	NodePortAddrs []netip.Prefix
	// Pods tells packets from this node's pods apart.
	Pods Detector
	// Frontends holds, per "addr:port/PROTO" (FrontendKey), the service
	// ports at that destination, sorted by name: cluster IPs, external IPs
	// and load-balancer VIPs.
	Frontends map[string][]Entry
	// NodePorts holds, per "port/PROTO" (NodePortKey), the service ports
	// with that node port, sorted by name.
	NodePorts map[string][]Entry
	// HealthChecks maps a health-check node port (TCP) to the service ports
	// that own it, sorted by name.
	HealthChecks map[uint16][]servicemodel.PortName
}

// Detector recognizes traffic from this node's pods: by source CIDR when
// CIDR is valid, else by input interface when Interface is set (a prefix
// of the interface name when Prefix is set). The zero value recognizes
// none.
type Detector struct {
	CIDR      netip.Prefix `json:",omitzero"`
	Interface string       `json:",omitempty"`
	Prefix    bool         `json:",omitempty"`
}

// Entry is one service port at one destination: what a connection of each
// class of client gets, decided by the control plane so that the datapath
// only classifies the packet and reads the answer.
type Entry struct {
	Service servicemodel.PortName
	// FromPod is the action for traffic from this node's pods (Table.Pods),
	// FromNode for traffic the node itself sends, Other for the rest.
	FromPod, FromNode, Other Action
	// Allowed, when not empty, are the only sources a load-balancer VIP
	// accepts (loadBalancerSourceRanges); others are dropped.
	Allowed []netip.Prefix `json:",omitempty"`
	// Affinity pins a client to the backend it first reached.
	Affinity bool `json:",omitempty"`
}

// Verb is what the datapath does with a connection.
type Verb string

// The verbs. A datapath looks for a DNAT among the entries at a
// destination before it rejects or drops.
const (
	Pass   Verb = "pass"   // leave the packet alone
	DNAT   Verb = "dnat"   // rewrite the destination to one of Action.Backends
	Reject Verb = "reject" // the service port has no endpoints at all
	Drop   Verb = "drop"   // the traffic policy leaves no endpoint for it
)

// Action is one verdict of an Entry.
type Action struct {
	Verb     Verb
	Backends []netip.AddrPort `json:",omitempty"`
	// Masquerade rewrites the source to the node's address.
	Masquerade bool `json:",omitempty"`
}

// FrontendKey is the key of Table.Frontends.
func FrontendKey(dst netip.AddrPort, proto v1.Protocol) string {
	return dst.String() + "/" + string(proto)
}

// NodePortKey is the key of Table.NodePorts.
func NodePortKey(port uint16, proto v1.Protocol) string {
	return strconv.Itoa(int(port)) + "/" + string(proto)
}

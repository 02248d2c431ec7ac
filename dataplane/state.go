package dataplane

import (
	"net/netip"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Node is what the proxy knows about the node it runs on.
type Node struct {
	Name string
	// Zone is the node's topology.kubernetes.io/zone label.
	Zone string
	// IPs are the node's addresses of the state's family; NodePorts are
	// served on those that NodePortAddresses selects.
	IPs []netip.Addr
	// PodCIDRs is spec.podCIDRs of the state's family.
	PodCIDRs []netip.Prefix
}

// LocalMode is how traffic from pods on this node is told apart from other
// traffic.
type LocalMode string

// The local-traffic detection modes of kube-proxy's --detect-local-mode.
const (
	// LocalModeNone detects nothing: no traffic counts as from a pod.
	LocalModeNone LocalMode = ""
	// LocalModeClusterCIDR matches sources in Settings.LocalDetector.CIDRs.
	LocalModeClusterCIDR LocalMode = "ClusterCIDR"
	// LocalModeNodeCIDR matches sources in the node's pod CIDRs.
	LocalModeNodeCIDR LocalMode = "NodeCIDR"
	// LocalModeBridgeInterface matches packets entering through
	// Settings.LocalDetector.Interface.
	LocalModeBridgeInterface LocalMode = "BridgeInterface"
	// LocalModeInterfaceNamePrefix matches packets entering through an
	// interface whose name starts with Settings.LocalDetector.Interface.
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// LocalDetector configures local-traffic detection.
type LocalDetector struct {
	Mode LocalMode
	// CIDRs is the cluster CIDR of the state's family (ClusterCIDR mode).
	CIDRs []netip.Prefix
	// Interface is the bridge name or interface name prefix.
	Interface string
}

// Settings is the proxy configuration that changes where packets go. The
// zero value is kube-proxy's defaults with no local-traffic detector.
type Settings struct {
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
	LocalDetector LocalDetector
	// NodePortAddresses selects the node addresses that serve NodePorts;
	// nil serves them on every node address.
	NodePortAddresses []netip.Prefix
	// LocalhostNodePorts serves IPv4 NodePorts on 127.0.0.0/8 too, when
	// NodePortAddresses includes loopback (kube-proxy's
	// --iptables-localhost-nodeports).
	LocalhostNodePorts bool
	// Topology tunes endpoint selection.
	Topology affinity.Options
}

// State is one consistent, immutable view of everything a dataplane
// programs for one IP family. Never modify a State or anything reachable
// from it; build a new one.
type State struct {
	Family    v1.IPFamily
	Node      Node
	Settings  Settings
	Services  servicemodel.Map
	Endpoints endpoints.Map

	// Generation identifies this State among those of one Builder; it
	// grows by one per State built.
	Generation uint64
	// changed is the set of services that differ from the State with
	// generation changedSince.
	changed      sets.Set[types.NamespacedName]
	changedSince uint64
	hasChanges   bool
}

// ChangedSince returns the services whose ports or endpoints differ between
// the State of generation gen and s. ok is false when s cannot tell (gen is
// not its direct predecessor, or s was not built by a Builder): the caller
// must then compare everything.
func (s *State) ChangedSince(gen uint64) (changed sets.Set[types.NamespacedName], ok bool) {
	if !s.hasChanges || gen != s.changedSince {
		return nil, false
	}
	return s.changed, true
}

// Select returns the endpoint selection for port p.
func (s *State) Select(p *servicemodel.ServicePort) affinity.Selection[*endpoints.Endpoint] {
	panic("unimplemented")
}

package dataplane

import (
	"net/netip"
	"sync"

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
	// served on those that NodePortAddresses selects. Lookup takes them
	// (and loopback) as the node's local addresses.
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
	// CIDRs is the cluster CIDR of the state's family (ClusterCIDR mode):
	// a source in the first valid one is local pod traffic, as kube-proxy
	// takes one per family (State.DetectionCIDR). Without one the mode
	// detects nothing, as kube-proxy's no-op detector; NewBuilder warns
	// once about each family without one, and in NodeCIDR mode the
	// Builder warns whenever the node's pod CIDRs change to none of a
	// family.
	CIDRs []netip.Prefix
	// Interface is the bridge name or interface name prefix; "" detects
	// nothing.
	Interface string
}

// Settings is the proxy configuration that changes where packets go. The
// zero value is kube-proxy's defaults with no local-traffic detector.
type Settings struct {
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
	LocalDetector LocalDetector
	// NodePortAddresses selects the node addresses that serve NodePorts.
	// Empty, or holding a /0, serves them on every node address; only the
	// CIDRs of the state's family count, and with none of them every
	// address serves, as in kube-proxy.
	NodePortAddresses []netip.Prefix
	// NodePortPrimary adds the node's primary IP of each family (the first
	// of its addresses, InternalIP before ExternalIP) to NodePortAddresses
	// as a host prefix: kube-proxy's --nodeport-addresses primary. The
	// Builder expands it into each State's NodePortAddresses, which is all
	// dataplanes and Lookup read; a family without a node IP gains nothing,
	// so without other CIDRs of it every address serves, as in kube-proxy.
	NodePortPrimary bool
	// LocalhostNodePorts serves IPv4 NodePorts on loopback too (kube-proxy's
	// --iptables-localhost-nodeports): on all of 127.0.0.0/8 when every
	// address serves, on 127.0.0.1 when NodePortAddresses selects it.
	// IPv6 NodePorts are never served on ::1.
	LocalhostNodePorts bool
	// Topology tunes endpoint selection.
	Topology affinity.Options
}

// State is one consistent, immutable view of everything a dataplane
// programs for one IP family. Never modify a State or anything reachable
// from it; build a new one. States are shared by pointer (a State must not
// be copied once used, as it caches its Lookup index) and are safe for
// concurrent use.
type State struct {
	Family    v1.IPFamily
	Node      Node
	Settings  Settings
	Services  servicemodel.Map
	Endpoints endpoints.Map
	// ServiceCIDRs are the cluster's service CIDRs of this family, from its
	// ServiceCIDR objects (Builder.UpdateServiceCIDR), sorted. In the
	// nftables mode traffic to an address in them that is no service's
	// cluster IP is dropped; the iptables mode ignores them, as
	// kube-proxy's does.
	ServiceCIDRs []netip.Prefix

	// Generation identifies this State among those of one Builder: the
	// States of one Build share it, and it grows by one per Build.
	Generation uint64
	// changed is the set of services that differ from the State with
	// generation changedSince.
	changed      sets.Set[types.NamespacedName]
	changedSince uint64
	hasChanges   bool
	// builder identifies the Builder that built the State; nil when none.
	builder *byte

	// index is what Lookup finds frontends with; it is built on first use
	// because many States are never looked up.
	indexOnce sync.Once
	index     *lookupIndex
}

// ChangedSince returns the services whose ports or endpoints differ between
// the State of generation gen and s; the set must not be modified. ok is
// false when s cannot tell: gen is not the generation of its direct
// predecessor, s is its Builder's first State or follows a node change
// that affects every service, or s was not built by a Builder. The caller
// must then compare everything.
func (s *State) ChangedSince(gen uint64) (changed sets.Set[types.NamespacedName], ok bool) {
	if !s.hasChanges || gen != s.changedSince {
		return nil, false
	}
	return s.changed, true
}

// ChangedFrom is ChangedSince(prev.Generation) that also tells Builders
// apart: ok is false when prev is nil or was built by another Builder,
// whose generations count on their own. A dataplane that keeps the State
// it programmed last asks this, and a program that replaces its Builder
// gets a full comparison once instead of a wrong partial one.
func (s *State) ChangedFrom(prev *State) (changed sets.Set[types.NamespacedName], ok bool) {
	if prev == nil || s.builder == nil || prev.builder != s.builder {
		return nil, false
	}
	return s.ChangedSince(prev.Generation)
}

// DetectionCIDR returns the CIDR that ClusterCIDR and NodeCIDR local-traffic
// detection match sources against: the first valid CIDR of the state's
// family in Settings.LocalDetector.CIDRs or Node.PodCIDRs, the one
// kube-proxy takes of each family. ok is false in the other modes, and
// when there is none, so that nothing is detected.
func (s *State) DetectionCIDR() (cidr netip.Prefix, ok bool) {
	var list []netip.Prefix
	switch s.Settings.LocalDetector.Mode {
	case LocalModeClusterCIDR:
		list = s.Settings.LocalDetector.CIDRs
	case LocalModeNodeCIDR:
		list = s.Node.PodCIDRs
	}
	return detectionCIDR(list, s.family())
}

// detectionCIDR returns the first CIDR of list that detects local traffic
// of family f.
func detectionCIDR(list []netip.Prefix, f v1.IPFamily) (netip.Prefix, bool) {
	for _, p := range list {
		if a := p.Addr(); p.IsValid() && familyOf(a) == f && !a.Is4In6() && a.Zone() == "" {
			return p.Masked(), true
		}
	}
	return netip.Prefix{}, false
}

// Select returns the endpoint selection for port p: which of its endpoints
// serve Cluster- and Local-policy traffic on this node.
func (s *State) Select(p *servicemodel.ServicePort) affinity.Selection[*endpoints.Endpoint] {
	return s.SelectFrom(p, s.Endpoints.Get(p.Name))
}

// SelectFrom is Select for a caller that has looked p's endpoints up
// already: eps must be s.Endpoints.Get(p.Name). A dataplane rendering
// every port spares itself the second lookup.
func (s *State) SelectFrom(p *servicemodel.ServicePort, eps []*endpoints.Endpoint) affinity.Selection[*endpoints.Endpoint] {
	return affinity.Categorize(eps, p.Policy(),
		affinity.Node{Name: s.Node.Name, Zone: s.Node.Zone}, s.Settings.Topology)
}

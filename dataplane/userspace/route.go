package userspace

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// destKey is a destination: a service address and port, or, with an
// invalid addr, a node port.
type destKey struct {
	addr  netip.Addr
	port  uint16
	proto v1.Protocol
}

func (k destKey) nodePort() bool { return !k.addr.IsValid() }

// portView is what routing needs of one service port under one State: its
// endpoint selection (asked of State.Select) and what follows from it. It
// is immutable; a change of the port or its endpoints makes a new one.
type portView struct {
	sp *servicemodel.ServicePort
	// eps is the endpoint list the selection was made from, to tell
	// whether a later State changed it.
	eps []*endpoints.Endpoint
	pol affinity.Policy
	// cluster and local are the candidates of Cluster- and Local-policy
	// traffic, sorted by address.
	cluster, local []netip.AddrPort
	// hasEndpoints: some endpoint can serve the port (else traffic is
	// rejected); hasInternal and hasExternal: cluster IP and external
	// traffic have endpoints under their policy (else it is dropped).
	hasEndpoints, hasInternal, hasExternal bool
	// usesFirewall: loadBalancerSourceRanges filter traffic to the VIPs.
	usesFirewall bool
	state        *portState
}

func newPortView(s *dataplane.State, sp *servicemodel.ServicePort, ps *portState) *portView {
	sel := s.Select(sp)
	v := &portView{sp: sp, eps: s.Endpoints.Get(sp.Name), pol: sp.Policy(), state: ps}
	v.cluster, v.local = addrsOf(sel.Cluster), addrsOf(sel.Local)
	v.hasEndpoints = sel.HasAny
	v.hasInternal = v.hasEndpoints && (!v.pol.InternalLocal || len(v.local) > 0)
	v.hasExternal = v.hasEndpoints && (!v.pol.ExternalLocal || len(v.local) > 0)
	v.usesFirewall = v.hasEndpoints && len(sp.LoadBalancerVIPs) > 0 && len(sp.LoadBalancerSourceRanges) > 0
	return v
}

func addrsOf(eps []*endpoints.Endpoint) []netip.AddrPort {
	if len(eps) == 0 {
		return nil
	}
	out := make([]netip.AddrPort, len(eps))
	for i, e := range eps {
		out[i] = e.Addr
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// reaches reports whether some traffic may still be sent to ep.
func (v *portView) reaches(ep netip.AddrPort) bool {
	_, inCluster := slices.BinarySearchFunc(v.cluster, ep, netip.AddrPort.Compare)
	_, inLocal := slices.BinarySearchFunc(v.local, ep, netip.AddrPort.Compare)
	return inCluster || inLocal
}

// claim is one service port claiming a destination.
type claim struct {
	view *portView
	kind FrontendKind
}

func compareClaims(a, b claim) int {
	return cmp.Or(a.view.sp.Name.Compare(b.view.sp.Name), cmp.Compare(a.kind, b.kind))
}

// routes is the routing table connections read: every destination with
// the ports claiming it, in State.Lookup's order. The slices are replaced,
// never modified, so a reader may keep one after the lock is released.
type routes struct {
	dests map[destKey][]claim
	node  dataplane.Node
	set   dataplane.Settings
	// detect is the source CIDR of local pod traffic, if any.
	detect    netip.Prefix
	hasDetect bool
	// local tells the node's addresses beyond node.IPs; nil when none.
	local LocalAddresses
}

// client is what the forwarder knows of a connection's source.
type client struct {
	src netip.Addr
	// local: the node itself sent it ("--src-type LOCAL").
	local bool
	// fromPod: the local-traffic detector matches it.
	fromPod bool
	// detector: a local-traffic detector is configured.
	detector bool
}

// clientOf classifies a connection's source. iface is the interface it
// came through, "" when unknown: a forwarder never knows it for TCP, so
// the interface detectors match only what a packet says of itself.
func (r *routes) clientOf(src netip.Addr, from dataplane.Origin, iface string) client {
	c := client{src: src, local: r.fromNode(src, from)}
	d := &r.set.LocalDetector
	switch d.Mode {
	case dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR:
		c.detector = r.hasDetect
		c.fromPod = r.hasDetect && r.detect.Contains(src)
	case dataplane.LocalModeBridgeInterface, dataplane.LocalModeInterfaceNamePrefix:
		c.detector = d.Interface != ""
		switch {
		case !c.detector || from == dataplane.FromNode:
		case iface == "":
			c.fromPod = from == dataplane.FromLocalPod
		case d.Mode == dataplane.LocalModeBridgeInterface:
			c.fromPod = iface == d.Interface
		default:
			c.fromPod = strings.HasPrefix(iface, d.Interface)
		}
	}
	return c
}

// fromNode reports whether the node itself sent from src. The socket a
// connection reached seldom tells its path (a node port's, or any in
// unprivileged mode, is the same for the node's own traffic and for
// traffic entering the node), so the source does: any address the node
// holds, as kube-proxy's "--src-type LOCAL" matches, where State.Lookup
// knows only Node.IPs and loopback.
func (r *routes) fromNode(src netip.Addr, from dataplane.Origin) bool {
	return from == dataplane.FromNode || src.IsLoopback() || slices.Contains(r.node.IPs, src) ||
		r.local != nil && r.local.Local(src)
}

// decision is where one connection goes.
type decision struct {
	action dataplane.Action
	view   *portView
	// candidates are the endpoints one is picked from, for DNAT.
	candidates []netip.AddrPort
}

// route decides, as State.Lookup specifies (see there), what happens to a
// connection from c to dst. A dst with an invalid address stands for a
// node address that serves node ports.
func (r *routes) route(dst netip.AddrPort, proto v1.Protocol, c client) decision {
	addr := dst.Addr()
	fronts := r.dests[destKey{addr, dst.Port(), proto}]
	for _, cl := range fronts {
		if d, ok := r.frontend(cl, c); ok {
			return d
		}
	}
	dstLocal := !addr.IsValid() || addr.IsLoopback() || slices.Contains(r.node.IPs, addr)
	nodePorts := r.dests[destKey{port: dst.Port(), proto: proto}]
	if r.servesNodePorts(addr) {
		for _, cl := range nodePorts {
			if cl.view.hasEndpoints {
				if d, ok := external(cl.view, c); ok {
					return d
				}
			}
		}
	}
	for _, cl := range fronts {
		if v := cl.view; cl.kind == ClusterIP && !v.hasInternal {
			return noEndpoints(v)
		}
	}
	for _, cl := range fronts {
		if v := cl.view; cl.kind != ClusterIP && !v.hasExternal {
			return noEndpoints(v)
		}
	}
	if dstLocal {
		for _, cl := range nodePorts {
			if !cl.view.hasExternal {
				return noEndpoints(cl.view)
			}
		}
	}
	for _, cl := range fronts {
		if cl.kind == LoadBalancerIP && cl.view.usesFirewall {
			return decision{action: dataplane.Drop, view: cl.view}
		}
	}
	return decision{action: dataplane.NotAService}
}

func (r *routes) frontend(cl claim, c client) (decision, bool) {
	v := cl.view
	if !v.hasEndpoints {
		return decision{}, false
	}
	switch cl.kind {
	case ClusterIP:
		if !v.hasInternal {
			return decision{}, false
		}
		eps := v.cluster
		if v.pol.InternalLocal {
			eps = v.local
		}
		return dnat(v, eps)
	case LoadBalancerIP:
		if v.usesFirewall && !r.allowedBySourceRanges(v.sp, c.src) {
			return decision{}, false
		}
	}
	return external(v, c)
}

func external(v *portView, c client) (decision, bool) {
	switch {
	case !v.pol.ExternalLocal, c.detector && c.fromPod, c.local:
		return dnat(v, v.cluster)
	case v.hasExternal:
		return dnat(v, v.local)
	}
	return decision{}, false
}

func dnat(v *portView, eps []netip.AddrPort) (decision, bool) {
	if len(eps) == 0 {
		return decision{}, false
	}
	return decision{action: dataplane.DNAT, view: v, candidates: eps}, true
}

func noEndpoints(v *portView) decision {
	if !v.hasEndpoints {
		return decision{action: dataplane.Reject, view: v}
	}
	return decision{action: dataplane.Drop, view: v}
}

// allowedBySourceRanges admits the VIPs themselves as sources when the
// ranges hold a node IP, as a node reaching a VIP it owns sends from it.
func (r *routes) allowedBySourceRanges(sp *servicemodel.ServicePort, src netip.Addr) bool {
	if prefixesContain(sp.LoadBalancerSourceRanges, src) {
		return true
	}
	return slices.Contains(sp.LoadBalancerVIPs, src) &&
		slices.ContainsFunc(r.node.IPs, func(ip netip.Addr) bool {
			return prefixesContain(sp.LoadBalancerSourceRanges, ip)
		})
}

func prefixesContain(list []netip.Prefix, ip netip.Addr) bool {
	return slices.ContainsFunc(list, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// servesNodePorts reports whether NodePortAddresses and LocalhostNodePorts
// make dst a node port address; an invalid dst is one.
func (r *routes) servesNodePorts(dst netip.Addr) bool {
	if !dst.IsValid() {
		return true
	}
	st := &r.set
	v4 := dst.Is4()
	loopbackOK := v4 && st.LocalhostNodePorts
	var cidrs []netip.Prefix
	matchAll := false
	for _, p := range st.NodePortAddresses {
		if p.Addr().Is4() != v4 {
			continue
		}
		matchAll = matchAll || p.Bits() == 0
		cidrs = append(cidrs, p)
	}
	if matchAll || len(cidrs) == 0 {
		if dst.IsLoopback() {
			return loopbackOK
		}
		return slices.Contains(r.node.IPs, dst)
	}
	if dst.IsLoopback() {
		return loopbackOK && dst == netip.AddrFrom4([4]byte{127, 0, 0, 1}) && prefixesContain(cidrs, dst)
	}
	return slices.Contains(r.node.IPs, dst) && prefixesContain(cidrs, dst)
}

package conntrack

import (
	"net"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// protoAddr is an IP:port of one transport protocol, as conntrack keys it.
type protoAddr struct {
	proto uint8
	addr  netip.AddrPort
}

// protoPort is a node port of one transport protocol.
type protoPort struct {
	proto uint8
	port  uint16
}

// targets are the frontends of one service port, for narrowing a stale
// endpoint to that port's flows.
type targets struct {
	frontends map[netip.AddrPort]struct{}
	nodePort  uint16
}

// serving is the set of endpoints serving one service port; a flow sent to
// the port whose replies come from elsewhere is stale.
type serving map[netip.AddrPort]struct{}

// staleFilter is the stale predicate, evaluated by netlink on every dumped
// flow; lookups only, so a dump of a large table stays cheap.
type staleFilter struct {
	log       logr.Logger
	frontends map[protoAddr]struct{}
	nodePorts map[protoPort]struct{}
	// endpoints holds stale endpoints whose every DNATed flow goes.
	endpoints map[protoAddr]struct{}
	// narrowed holds stale endpoints whose flows go only when sent to one
	// of the port's frontends. One endpoint may have left several ports.
	narrowed map[protoAddr][]targets
	// reconciled maps the frontends and node ports of Stale.Ports to their
	// serving endpoints.
	reconciled         map[protoAddr]serving
	reconciledNodePort map[protoPort]serving
}

var _ netlink.CustomConntrackFilter = (*staleFilter)(nil)

func (f *staleFilter) empty() bool {
	return len(f.frontends) == 0 && len(f.nodePorts) == 0 && len(f.endpoints) == 0 &&
		len(f.narrowed) == 0 && len(f.reconciled) == 0 && len(f.reconciledNodePort) == 0
}

// protoNumber maps the protocols conntrack cleanup handles; TCP is not one.
func protoNumber(p v1.Protocol) (uint8, bool) {
	switch p {
	case v1.ProtocolUDP:
		return unix.IPPROTO_UDP, true
	case v1.ProtocolSCTP:
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

func ofFamily(a netip.Addr, family v1.IPFamily) bool {
	return a.Unmap().Is4() == (family == v1.IPv4Protocol)
}

// portFrontends returns the addresses sp is reached at in family.
func portFrontends(sp *servicemodel.ServicePort, family v1.IPFamily) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ip := range append(append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...), sp.LoadBalancerVIPs...) {
		if ip.IsValid() && ofFamily(ip, family) {
			out = append(out, netip.AddrPortFrom(ip.Unmap(), sp.Port))
		}
	}
	return out
}

func (c *Cleaner) newFilter(log logr.Logger, s dataplane.StaleFlows) *staleFilter {
	f := &staleFilter{
		log:                log.V(5),
		frontends:          map[protoAddr]struct{}{},
		nodePorts:          map[protoPort]struct{}{},
		endpoints:          map[protoAddr]struct{}{},
		narrowed:           map[protoAddr][]targets{},
		reconciled:         map[protoAddr]serving{},
		reconciledNodePort: map[protoPort]serving{},
	}
	for _, fe := range s.Frontends {
		proto, ok := protoNumber(fe.Protocol)
		switch {
		case !ok:
			c.skip(log, "unsupported protocol", "frontend", fe)
		case fe.Port == 0:
			c.skip(log, "invalid port", "frontend", fe)
		case !fe.IP.IsValid():
			f.nodePorts[protoPort{proto, fe.Port}] = struct{}{}
		case !ofFamily(fe.IP, s.Family):
			c.skip(log, "wrong family", "frontend", fe)
		default:
			f.frontends[protoAddr{proto, netip.AddrPortFrom(fe.IP.Unmap(), fe.Port)}] = struct{}{}
		}
	}
	for _, ep := range s.Endpoints {
		proto, ok := protoNumber(ep.Port.Protocol)
		switch {
		case !ok:
			c.skip(log, "unsupported protocol", "endpoint", ep.Addr, "port", ep.Port)
			continue
		case !ep.Addr.Addr().IsValid() || ep.Addr.Port() == 0:
			c.skip(log, "invalid address", "endpoint", ep.Addr, "port", ep.Port)
			continue
		case !ofFamily(ep.Addr.Addr(), s.Family):
			c.skip(log, "wrong family", "endpoint", ep.Addr, "port", ep.Port)
			continue
		}
		key := protoAddr{proto, netip.AddrPortFrom(ep.Addr.Addr().Unmap(), ep.Addr.Port())}
		if s.State == nil {
			f.endpoints[key] = struct{}{}
			continue
		}
		sp, ok := s.State.Services.Get(ep.Port)
		if !ok {
			continue
		}
		t := targets{frontends: map[netip.AddrPort]struct{}{}, nodePort: sp.NodePort}
		for _, fe := range portFrontends(sp, s.Family) {
			t.frontends[fe] = struct{}{}
		}
		f.narrowed[key] = append(f.narrowed[key], t)
	}
	for _, pn := range s.Ports {
		proto, ok := protoNumber(pn.Protocol)
		switch {
		case !ok:
			c.skip(log, "unsupported protocol", "port", pn)
			continue
		case s.State == nil:
			c.skip(log, "no state", "port", pn)
			continue
		}
		sp, ok := s.State.Services.Get(pn)
		if !ok {
			continue
		}
		set := serving{}
		for _, ep := range s.State.Endpoints.Get(pn) {
			if ep.Serving {
				set[netip.AddrPortFrom(ep.IP().Unmap(), ep.Addr.Port())] = struct{}{}
			}
		}
		for _, fe := range portFrontends(sp, s.Family) {
			f.reconciled[protoAddr{proto, fe}] = set
		}
		// Node ports are matched by port alone, so with nothing serving
		// every flow to that port number would go, whoever owns it.
		if sp.NodePort != 0 && len(set) > 0 {
			f.reconciledNodePort[protoPort{proto, sp.NodePort}] = set
		}
	}
	return f
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

// MatchConntrackFlow reports whether flow is stale.
func (f *staleFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if f.match(flow) {
		f.log.Info("Deleting conntrack entry", "flow", flow.String())
		return true
	}
	return false
}

func (f *staleFilter) match(flow *netlink.ConntrackFlow) bool {
	proto := flow.Forward.Protocol
	origDst := addrPort(flow.Forward.DstIP, flow.Forward.DstPort)
	if _, ok := f.frontends[protoAddr{proto, origDst}]; ok {
		return true
	}
	replySrc := addrPort(flow.Reverse.SrcIP, flow.Reverse.SrcPort)
	if set, ok := f.reconciled[protoAddr{proto, origDst}]; ok {
		if _, ok := set[replySrc]; !ok {
			return true
		}
	}
	// A node port with serving endpoints is reconciled by port alone, as
	// kube-proxy does: a flow that began while nothing DNATed the port (the
	// service did not exist yet, so the node refused it or a local process
	// answered) must go too, or the client stays off the service for as
	// long as it keeps its source port.
	if set, ok := f.reconciledNodePort[protoPort{proto, origDst.Port()}]; ok {
		if _, ok := set[replySrc]; !ok {
			return true
		}
	}
	// Past what is reconciled, a flow whose replies come from where it was
	// sent was not DNATed, so it is no stale service's flow: a client
	// talking to a pod directly, or to a process on the node that listens
	// on the number of a node port that is gone.
	if replySrc == origDst {
		return false
	}
	if _, ok := f.nodePorts[protoPort{proto, origDst.Port()}]; ok {
		return true
	}
	ep := protoAddr{proto, replySrc}
	if _, ok := f.endpoints[ep]; ok {
		return true
	}
	for _, t := range f.narrowed[ep] {
		if _, ok := t.frontends[origDst]; ok {
			return true
		}
		if t.nodePort != 0 && t.nodePort == origDst.Port() {
			return true
		}
	}
	return false
}

package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Lookup answers where p goes under s, as kube-proxy's iptables mode would
// send it; see the package documentation for the rules. It is the
// executable specification every dataplane is tested against. The first
// call builds an index of s; later calls cost a map lookup plus the
// endpoint selection of the matched port.
func (s *State) Lookup(p Packet) Verdict { return s.LookupMode(ModeIPTables, p) }

// LookupMode is Lookup following the semantics of mode m: ModeIPTables
// (also any unknown mode), or ModeNFTables, ModeIPVS or ModeUserspace,
// which differ where those dataplanes deliberately do (see the package
// documentation).
func (s *State) LookupMode(m Mode, p Packet) Verdict {
	p, bad := s.checkPacket(p)
	if bad != "" {
		return Verdict{Action: NotAService, Reason: bad}
	}
	if m == ModeUserspace && p.Protocol == v1.ProtocolSCTP {
		return Verdict{Action: NotAService, Reason: "userspace mode serves no SCTP (Go has no SCTP sockets): nothing catches the packet"}
	}
	t := &trace{s: s, p: p, idx: s.lookupIndex(), mode: m, nft: m == ModeNFTables}
	t.classify()
	return t.run()
}

// checkPacket returns p with zones stripped, or why it cannot be looked up.
func (s *State) checkPacket(p Packet) (Packet, string) {
	src, dst := p.Src.WithZone(""), p.Dst.Addr().WithZone("")
	family := s.family()
	switch {
	case !src.IsValid():
		return p, "invalid packet: no valid source address"
	case !dst.IsValid():
		return p, "invalid packet: no valid destination address"
	case familyOf(src) != family:
		return p, fmt.Sprintf("invalid packet: source %s is not %s, the family of this state", src, family)
	case familyOf(dst) != family:
		return p, fmt.Sprintf("invalid packet: destination %s is not %s, the family of this state", dst, family)
	case p.Dst.Port() == 0:
		return p, "invalid packet: destination port 0"
	}
	switch p.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		return p, fmt.Sprintf("invalid packet: protocol %q is not TCP, UDP or SCTP", p.Protocol)
	}
	p.Src, p.Dst = src, netip.AddrPortFrom(dst, p.Dst.Port())
	return p, ""
}

func (s *State) family() v1.IPFamily {
	if s.Family == "" {
		return v1.IPv4Protocol
	}
	return s.Family
}

func familyOf(ip netip.Addr) v1.IPFamily {
	if ip.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// trace follows one packet through the rules kube-proxy's iptables mode
// writes: first the nat table (service addresses, then node ports), and
// only when nothing rewrote the packet, the filter table's reject, drop and
// accept rules.
type trace struct {
	s   *State
	p   Packet
	idx *lookupIndex
	// mode is the semantics followed; nft is mode == ModeNFTables, the
	// mode that differs the most.
	mode Mode
	nft  bool

	// detector is whether a local-traffic detector is configured, fromPod
	// whether it matches p.
	detector, fromPod bool
	// srcLocal is iptables' "--src-type LOCAL": the node itself sent p.
	srcLocal bool
	// dstLocal is "--dst-type LOCAL": p is addressed to the node.
	dstLocal bool

	views []*portView
}

// portView is the endpoint selection of one service port and what
// kube-proxy derives from it.
type portView struct {
	sp  *servicemodel.ServicePort
	pol affinity.Policy
	sel affinity.Selection[*endpoints.Endpoint]
	// hasEndpoints: some endpoint anywhere can serve the port; without one,
	// traffic is rejected. hasInternal and hasExternal: internal
	// (cluster IP) and external traffic have endpoints under their
	// traffic policy; without, traffic is dropped.
	hasEndpoints, hasInternal, hasExternal bool
	// usesFirewall: loadBalancerSourceRanges filter traffic to the VIPs.
	usesFirewall bool
}

func (v *portView) internalEndpoints() []*endpoints.Endpoint {
	if v.pol.InternalLocal {
		return v.sel.Local
	}
	return v.sel.Cluster
}

func (t *trace) view(sp *servicemodel.ServicePort) *portView {
	for _, v := range t.views {
		if v.sp == sp {
			return v
		}
	}
	v := &portView{sp: sp, pol: sp.Policy(), sel: t.s.Select(sp)}
	v.hasEndpoints = v.sel.HasAny
	v.hasInternal = v.hasEndpoints && (!v.pol.InternalLocal || len(v.sel.Local) > 0)
	v.hasExternal = v.hasEndpoints && (!v.pol.ExternalLocal || len(v.sel.Local) > 0)
	// nftables filters source ranges before DNAT, endpoints or not.
	v.usesFirewall = (t.nft || v.hasEndpoints) && len(sp.LoadBalancerVIPs) > 0 && len(sp.LoadBalancerSourceRanges) > 0
	t.views = append(t.views, v)
	return v
}

func (t *trace) classify() {
	n, d := &t.s.Node, &t.s.Settings.LocalDetector
	src, dst := t.p.Src, t.p.Dst.Addr()
	t.srcLocal = t.p.From == FromNode || src.IsLoopback() || slices.Contains(n.IPs, src) || t.ipvsBound(src)
	t.dstLocal = dst.IsLoopback() || slices.Contains(n.IPs, dst)
	switch d.Mode {
	case LocalModeClusterCIDR, LocalModeNodeCIDR:
		var cidr netip.Prefix
		cidr, t.detector = t.s.DetectionCIDR()
		t.fromPod = t.detector && cidr.Contains(src)
	case LocalModeBridgeInterface, LocalModeInterfaceNamePrefix:
		t.detector = d.Interface != ""
		// Locally generated packets have no input interface, so "-i" never
		// matches them.
		switch {
		case !t.detector || t.p.From == FromNode:
		case t.p.Interface == "":
			t.fromPod = t.p.From == FromLocalPod
		case d.Mode == LocalModeBridgeInterface:
			t.fromPod = t.p.Interface == d.Interface
		default:
			t.fromPod = strings.HasPrefix(t.p.Interface, d.Interface)
		}
	}
}

func prefixesContain(list []netip.Prefix, ip netip.Addr) bool {
	return slices.ContainsFunc(list, func(p netip.Prefix) bool { return p.Contains(ip) })
}

func (t *trace) run() Verdict {
	dst := t.p.Dst
	fronts := t.idx.frontends[frontendKey{dst.Addr(), dst.Port(), t.p.Protocol}]
	if t.nft {
		// The source-range firewall runs before DNAT.
		for _, fe := range fronts {
			if v := t.view(fe.port); fe.kind == kindLoadBalancer && v.usesFirewall && !t.allowedBySourceRanges(fe.port) {
				return t.firewallDrop(fe)
			}
		}
	}
	for _, fe := range fronts {
		if v, ok := t.natFrontend(fe); ok {
			return v
		}
	}
	nodePorts := t.idx.nodePorts[nodePortKey{dst.Port(), t.p.Protocol}]
	servesNodePorts := t.servesNodePorts()
	if servesNodePorts {
		for _, sp := range nodePorts {
			if v := t.view(sp); v.hasEndpoints {
				if v, ok := t.external(v, "node port "+t.dest()); ok {
					return v
				}
			}
		}
	}

	// Nothing rewrote the packet: the filter table's rules see it as sent.
	for _, fe := range fronts {
		if v := t.view(fe.port); fe.kind == kindClusterIP && !v.hasInternal {
			return t.noEndpoints(v, fe.kind.String()+" "+t.dest(), v.pol.InternalLocal, "internalTrafficPolicy")
		}
	}
	for _, fe := range fronts {
		if v := t.view(fe.port); fe.kind != kindClusterIP && !v.hasExternal {
			return t.noEndpoints(v, fe.kind.String()+" "+t.dest(), v.pol.ExternalLocal, "externalTrafficPolicy")
		}
	}
	if t.filtersNodePortsEverywhere() && t.dstLocal || !t.filtersNodePortsEverywhere() && servesNodePorts {
		for _, sp := range nodePorts {
			if v := t.view(sp); !v.hasExternal {
				return t.noEndpoints(v, "node port "+t.dest(), v.pol.ExternalLocal, "externalTrafficPolicy")
			}
		}
	}
	if t.dstLocal && t.acceptsHealthChecks() {
		if sp, ok := t.idx.healthChecks[dst.Port()]; ok && t.p.Protocol == v1.ProtocolTCP {
			return Verdict{Action: Accept, Service: sp.Name,
				Reason: fmt.Sprintf("health-check node port %d of %s: accepted through the local firewall", dst.Port(), serviceOf(sp))}
		}
	}
	for _, fe := range fronts {
		if v := t.view(fe.port); fe.kind == kindLoadBalancer && v.usesFirewall && !t.nft {
			return t.firewallDrop(fe)
		}
	}
	if sp, ok := t.idx.clusterIPs[dst.Addr()]; ok && t.nft {
		return Verdict{Action: Reject,
			Reason: fmt.Sprintf("cluster IP %s of %s has no port %d/%s: rejected", dst.Addr(), serviceOf(sp), dst.Port(), t.p.Protocol)}
	}
	if v, ok := t.refusedByNode(); ok {
		return v
	}
	if t.nft {
		for _, c := range t.s.ServiceCIDRs {
			if c.Contains(dst.Addr()) {
				return Verdict{Action: Drop,
					Reason: fmt.Sprintf("%s is in service CIDR %s but is no service's cluster IP: dropped", dst.Addr(), c)}
			}
		}
	}
	return Verdict{Action: NotAService, Reason: t.whyNotAService(nodePorts, servesNodePorts)}
}

func (t *trace) firewallDrop(fe frontend) Verdict {
	return Verdict{Action: Drop, Service: fe.port.Name,
		Reason: fmt.Sprintf("%s load balancer IP %s: source %s is not in loadBalancerSourceRanges %v", fe.port.Name, t.p.Dst, t.p.Src, fe.port.LoadBalancerSourceRanges)}
}

// natFrontend follows the nat rule for one service address matching the
// destination; ok is false when the packet falls through it.
func (t *trace) natFrontend(fe frontend) (Verdict, bool) {
	v := t.view(fe.port)
	if !v.hasEndpoints {
		return Verdict{}, false
	}
	via := fe.kind.String() + " " + t.dest()
	switch fe.kind {
	case kindClusterIP:
		if !v.hasInternal {
			return Verdict{}, false
		}
		masq, why := t.internalMasquerade()
		return t.dnat(v, v.internalEndpoints(), masq, via, why)
	case kindLoadBalancer:
		if v.usesFirewall && !t.allowedBySourceRanges(fe.port) {
			return Verdict{}, false
		}
	}
	return t.external(v, via)
}

// dest is the destination as the reasons show it.
func (t *trace) dest() string {
	return t.p.Dst.String() + "/" + string(t.p.Protocol)
}

func (t *trace) internalMasquerade() (bool, string) {
	switch {
	case t.s.Settings.MasqueradeAll:
		return true, "masqueraded: masqueradeAll"
	case t.detector && !t.fromPod:
		return true, fmt.Sprintf("masqueraded: not local pod traffic (detect-local-mode %s)", t.s.Settings.LocalDetector.Mode)
	}
	return false, ""
}

// allowedBySourceRanges is the service's firewall chain. A node that owns
// a VIP reaches it with the VIP as source, so the VIPs are allowed sources
// whenever the ranges admit one of the node's IPs.
func (t *trace) allowedBySourceRanges(sp *servicemodel.ServicePort) bool {
	src := t.p.Src
	if prefixesContain(sp.LoadBalancerSourceRanges, src) {
		return true
	}
	return slices.Contains(sp.LoadBalancerVIPs, src) &&
		slices.ContainsFunc(t.s.Node.IPs, func(ip netip.Addr) bool {
			return prefixesContain(sp.LoadBalancerSourceRanges, ip)
		})
}

// external is the service's chain for external destinations (external IPs,
// VIPs, node ports); ok is false when the packet falls through it.
func (t *trace) external(v *portView, via string) (Verdict, bool) {
	switch {
	case t.ipvsInternalLocal(v):
		return t.ipvsToClusterIP(v, via)
	case !v.pol.ExternalLocal:
		return t.dnat(v, v.sel.Cluster, true, via, "masqueraded: externalTrafficPolicy Cluster")
	case t.detector && t.fromPod:
		return t.dnat(v, v.sel.Cluster, false, via, "pod traffic to an external destination ignores externalTrafficPolicy Local")
	case t.srcLocal:
		return t.dnat(v, v.sel.Cluster, true, via, "masqueraded: traffic from the node ignores externalTrafficPolicy Local")
	case v.hasExternal:
		return t.dnat(v, v.sel.Local, false, via, "externalTrafficPolicy Local: local endpoints, source kept")
	}
	return Verdict{}, false
}

func (t *trace) dnat(v *portView, eps []*endpoints.Endpoint, masq bool, via, why string) (Verdict, bool) {
	if len(eps) == 0 {
		return Verdict{}, false
	}
	addrs := make([]netip.AddrPort, len(eps))
	var hairpin []netip.AddrPort
	for i, e := range eps {
		addrs[i] = e.Addr
		// nftables masquerades hairpins through a set of local endpoints.
		if e.Addr.Addr() == t.p.Src && (e.Local || !t.nft) {
			hairpin = append(hairpin, e.Addr)
		}
	}
	slices.SortFunc(addrs, netip.AddrPort.Compare)
	slices.SortFunc(hairpin, netip.AddrPort.Compare)
	if t.mode == ModeUserspace {
		// The proxy connects to the endpoint from its own address.
		masq = true
		why = strings.TrimSuffix("masqueraded: the userspace proxy connects from its own address; "+strings.TrimPrefix(why, "masqueraded: "), "; ")
	}
	verdict := Verdict{
		Action:     DNAT,
		Service:    v.sp.Name,
		Endpoints:  addrs,
		Masquerade: masq || len(hairpin) == len(addrs),
		Hairpin:    hairpin,
		Affinity:   v.sp.SessionAffinity.ClientIP,
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: DNAT to %s", v.sp.Name, via, plural(len(addrs), "endpoint"))
	for _, s := range []string{why, hairpinNote(len(hairpin), len(addrs)), affinityNote(v.sp)} {
		if s != "" {
			b.WriteString("; " + s)
		}
	}
	verdict.Reason = b.String()
	return verdict, true
}

func hairpinNote(hairpins, candidates int) string {
	switch {
	case hairpins == 0:
		return ""
	case hairpins == candidates:
		return "masqueraded: hairpin (the source is the endpoint)"
	}
	return fmt.Sprintf("masqueraded if DNATed back to the source (%d of %d endpoints)", hairpins, candidates)
}

func affinityNote(sp *servicemodel.ServicePort) string {
	if !sp.SessionAffinity.ClientIP {
		return ""
	}
	return fmt.Sprintf("ClientIP affinity for %s", sp.SessionAffinity.Timeout)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// noEndpoints is the filter verdict for traffic that has no endpoint:
// rejected when the port has none at all, dropped when the traffic policy
// (policyLocal, named policy) leaves none on this node.
func (t *trace) noEndpoints(v *portView, via string, policyLocal bool, policy string) Verdict {
	if v.hasEndpoints && t.mode == ModeIPVS && t.p.From == FromNode {
		return Verdict{Action: Reject, Service: v.sp.Name,
			Reason: fmt.Sprintf("%s %s: rejected, IPVS takes the node's own packets before the filter's drop, and the virtual server has no real server (%s Local and no local endpoints)", v.sp.Name, via, policy)}
	}
	if !v.hasEndpoints {
		return Verdict{Action: Reject, Service: v.sp.Name,
			Reason: fmt.Sprintf("%s %s: rejected, the service port has no endpoints", v.sp.Name, via)}
	}
	why := "no local endpoints"
	if policyLocal {
		why = fmt.Sprintf("%s Local and no local endpoints", policy)
	}
	return Verdict{Action: Drop, Service: v.sp.Name, Reason: fmt.Sprintf("%s %s: dropped, %s", v.sp.Name, via, why)}
}

// servesNodePorts reports whether nodePortAddresses and the localhost
// setting make the destination a node port address.
func (t *trace) servesNodePorts() bool {
	st := &t.s.Settings
	dst := t.p.Dst.Addr()
	family := t.s.family()
	// nftables and IPVS modes never serve node ports on loopback.
	loopbackOK := family == v1.IPv4Protocol && st.LocalhostNodePorts && !t.nft && t.mode != ModeIPVS

	var cidrs []netip.Prefix
	matchAll := false
	for _, p := range st.NodePortAddresses {
		if familyOf(p.Addr()) != family {
			continue
		}
		if p.Bits() == 0 {
			matchAll = true
		}
		cidrs = append(cidrs, p)
	}
	if matchAll || len(cidrs) == 0 {
		// Every local address, as "--dst-type LOCAL" matches it.
		if dst.IsLoopback() {
			return loopbackOK
		}
		return slices.Contains(t.s.Node.IPs, dst)
	}
	// Only the selected addresses of the node's interfaces; the loopback
	// interface's is 127.0.0.1 (or ::1).
	if dst.IsLoopback() {
		return loopbackOK && dst == netip.AddrFrom4([4]byte{127, 0, 0, 1}) && prefixesContain(cidrs, dst)
	}
	return slices.Contains(t.s.Node.IPs, dst) && prefixesContain(cidrs, dst)
}

func (t *trace) whyNotAService(nodePorts []*servicemodel.ServicePort, servesNodePorts bool) string {
	dst, proto := t.p.Dst, t.p.Protocol
	if sp, ok := t.idx.clusterIPs[dst.Addr()]; ok {
		return fmt.Sprintf("cluster IP %s of %s has no port %d/%s: %s mode lets the packet through untouched (nftables mode would reject it)",
			dst.Addr(), serviceOf(sp), dst.Port(), proto, t.modeName())
	}
	if len(nodePorts) > 0 && t.dstLocal && !servesNodePorts {
		return fmt.Sprintf("node port %d/%s of %s is not served on %s (nodePortAddresses, localhost node ports)",
			dst.Port(), proto, nodePorts[0].Name, dst.Addr())
	}
	return fmt.Sprintf("no service at %s/%s", dst, proto)
}

func serviceOf(sp *servicemodel.ServicePort) string {
	return sp.Name.Namespace + "/" + sp.Name.Name
}

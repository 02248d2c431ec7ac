package ipvs

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// vsKey identifies a virtual server.
type vsKey struct {
	addr  netip.Addr
	proto uint16
	port  uint16
}

func (k vsKey) String() string {
	return protoName(k.proto) + " " + netip.AddrPortFrom(k.addr, k.port).String()
}

func compareKeys(a, b vsKey) int {
	if c := a.addr.Compare(b.addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.port, b.port); c != 0 {
		return c
	}
	return cmp.Compare(a.proto, b.proto)
}

// virtualServer is one virtual server as a service port wants it.
type virtualServer struct {
	key     vsKey
	port    servicemodel.PortName
	flags   uint32
	timeout uint32
	// dests are the real servers, sorted.
	dests []netip.AddrPort
}

// program is everything the dataplane writes for one service.
type program struct {
	vss   []virtualServer
	sets  []setEntry
	binds []netip.Addr
}

func protoNumber(p string) uint16 {
	switch strings.ToUpper(p) {
	case "TCP":
		return unix.IPPROTO_TCP
	case "UDP":
		return unix.IPPROTO_UDP
	case "SCTP":
		return unix.IPPROTO_SCTP
	}
	return 0
}

func protoName(p uint16) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "TCP"
	case unix.IPPROTO_UDP:
		return "UDP"
	case unix.IPPROTO_SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto-%d", p)
}

func sortEntries(es []entry) {
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.String(), b.String()) })
}

// nodePortIPs returns the node addresses that serve node ports: those
// NodePortAddresses selects (every one when it selects all), never
// loopback, which IPVS cannot serve.
func nodePortIPs(s *dataplane.State, ipv6 bool) []netip.Addr {
	var cidrs []netip.Prefix
	all := false
	for _, p := range s.Settings.NodePortAddresses {
		if !p.IsValid() || p.Addr().Is6() != ipv6 {
			continue
		}
		all = all || p.Bits() == 0
		cidrs = append(cidrs, p)
	}
	var out []netip.Addr
	for _, ip := range s.Node.IPs {
		if !ruleport.OfFamily(ip, ipv6) || ip.IsLoopback() {
			continue
		}
		if all || len(cidrs) == 0 || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// programOf returns what service nn of s needs; nil when it has no usable
// port.
func (d *Dataplane) programOf(s *dataplane.State, nn types.NamespacedName, npIPs []netip.Addr) *program {
	ports := s.Services.Service(nn)
	if len(ports) == 0 {
		return nil
	}
	pr := &program{}
	for _, sp := range ports {
		d.addPort(pr, s, sp, npIPs)
	}
	if len(pr.vss) == 0 {
		return nil
	}
	slices.SortFunc(pr.vss, func(a, b virtualServer) int { return compareKeys(a.key, b.key) })
	pr.vss = slices.CompactFunc(pr.vss, func(a, b virtualServer) bool { return a.key == b.key })
	slices.SortFunc(pr.binds, netip.Addr.Compare)
	pr.binds = slices.Compact(pr.binds)
	slices.SortFunc(pr.sets, func(a, b setEntry) int {
		if c := cmp.Compare(a.set, b.set); c != 0 {
			return c
		}
		return strings.Compare(a.e.String(), b.e.String())
	})
	pr.sets = slices.Compact(pr.sets)
	return pr
}

func (d *Dataplane) addPort(pr *program, s *dataplane.State, sp *servicemodel.ServicePort, npIPs []netip.Addr) {
	rp, reason := ruleport.Check(sp, d.ipv6, d.skip)
	if reason != "" {
		d.skip(reason)
		return
	}
	proto := protoNumber(rp.Proto)
	sel := s.Select(sp)
	pol := sp.Policy()
	usable := func(eps []*endpoints.Endpoint) []netip.AddrPort {
		var out []netip.AddrPort
		for _, e := range eps {
			if ruleport.UsableEndpoint(e, d.ipv6) {
				out = append(out, e.Addr)
			}
		}
		slices.SortFunc(out, netip.AddrPort.Compare)
		return slices.Compact(out)
	}
	internal, external := usable(sel.Cluster), usable(sel.Cluster)
	if pol.InternalLocal {
		internal = usable(sel.Local)
	}
	if pol.ExternalLocal {
		external = usable(sel.Local)
	}
	hasAny := sel.HasAny
	flags := d.cfg.flags()
	var timeout uint32
	if rp.AffinitySeconds > 0 {
		flags |= flagPersistent
		timeout = uint32(rp.AffinitySeconds)
	}
	vs := func(addr netip.Addr, port uint16, dests []netip.AddrPort) {
		pr.vss = append(pr.vss, virtualServer{key: vsKey{addr, proto, port}, port: sp.Name, flags: flags, timeout: timeout, dests: dests})
		for _, ep := range dests {
			pr.sets = append(pr.sets, setEntry{setLoopBack, entry{ip: ep.Addr(), proto: uint8(proto), port: ep.Port(), ip2: ep.Addr()}})
		}
	}
	ipPort := func(set setID, a netip.Addr, port uint16) {
		pr.sets = append(pr.sets, setEntry{set, entry{ip: a, proto: uint8(proto), port: port}})
	}

	// Cluster IP.
	pr.binds = append(pr.binds, sp.ClusterIP)
	switch {
	case hasAny && len(internal) > 0:
		vs(sp.ClusterIP, sp.Port, internal)
		ipPort(setClusterIP, sp.ClusterIP, sp.Port)
	case hasAny:
		vs(sp.ClusterIP, sp.Port, nil)
		ipPort(setDrop, sp.ClusterIP, sp.Port)
	default:
		vs(sp.ClusterIP, sp.Port, nil)
	}

	// External destinations share the external endpoints.
	extSet, npSet := setExternal, setNodePort
	if pol.ExternalLocal {
		extSet, npSet = setExternalLocal, setNodePortLocal
	}
	hasExternal := hasAny && len(external) > 0
	external1 := func(a netip.Addr, port uint16, set setID, bind bool) {
		if bind {
			pr.binds = append(pr.binds, a)
		}
		switch {
		case hasExternal:
			vs(a, port, external)
		case hasAny:
			vs(a, port, nil)
			ipPort(setDrop, a, port)
		default:
			vs(a, port, nil)
		}
		if hasExternal || set == setNodePort || set == setNodePortLocal {
			ipPort(set, a, port)
		}
	}
	for _, a := range rp.ExternalIPs {
		external1(a, sp.Port, extSet, true)
	}
	for _, a := range rp.LBVIPs {
		external1(a, sp.Port, extSet, true)
		if !hasAny || len(rp.SourceRanges) == 0 {
			continue
		}
		ipPort(setFirewall, a, sp.Port)
		for _, r := range rp.SourceRanges {
			pr.sets = append(pr.sets, setEntry{setSourceCIDR, entry{ip: a, proto: uint8(proto), port: sp.Port, ip2: r.Addr(), bits2: uint8(r.Bits())}})
		}
		if slices.ContainsFunc(s.Node.IPs, func(ip netip.Addr) bool {
			return slices.ContainsFunc(rp.SourceRanges, func(r netip.Prefix) bool { return r.Contains(ip) })
		}) {
			for _, vip := range rp.LBVIPs {
				pr.sets = append(pr.sets, setEntry{setSourceIP, entry{ip: a, proto: uint8(proto), port: sp.Port, ip2: vip}})
			}
		}
	}
	if sp.NodePort != 0 {
		for _, ip := range npIPs {
			external1(ip, sp.NodePort, npSet, false)
		}
	}
	if sp.HealthCheckNodePort != 0 {
		// On every local address: the node's and loopback's.
		local := []netip.Addr{netip.IPv6Loopback()}
		if !d.ipv6 {
			local[0] = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		for _, ip := range s.Node.IPs {
			if ruleport.OfFamily(ip, d.ipv6) {
				local = append(local, ip)
			}
		}
		for _, ip := range local {
			pr.sets = append(pr.sets, setEntry{setHealthCheck, entry{ip: ip, proto: unix.IPPROTO_TCP, port: sp.HealthCheckNodePort}})
		}
	}
}

func (d *Dataplane) skip(reason string) {
	d.log.V(4).Info("Skipped", "reason", reason)
	if d.cfg.OnSkip != nil {
		d.cfg.OnSkip(reason)
	}
}

package ipvs

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
)

// tracer follows a packet through what the fakes hold, as the kernel
// would: the filter INPUT chain's drops (the dataplane's sets), then IPVS
// at LOCAL_IN, whose DNAT the nat chains' marks masquerade. The service
// names come from the dataplane's memory, as the kernel has none.
type tracer struct {
	d    *Dataplane
	ipvs *FakeIPVS
	nl   *FakeNetlink
	st   *dataplane.State
	sets map[string][]string
}

func (t *tracer) in(id setID, e entry) bool {
	_, ok := slices.BinarySearch(t.sets[t.d.names.set[id]], e.String())
	return ok
}

// inNet reports whether set id has a member e,net whose net holds ip.
func (t *tracer) inNet(id setID, e entry, ip netip.Addr) bool {
	prefix := e.String() + ","
	for _, m := range t.sets[t.d.names.set[id]] {
		rest, ok := strings.CutPrefix(m, prefix)
		if !ok {
			continue
		}
		if p, err := netip.ParsePrefix(rest); err == nil && p.Contains(ip) {
			return true
		}
		if a, err := netip.ParseAddr(rest); err == nil && a == ip {
			return true
		}
	}
	return false
}

func (t *tracer) portName(k vsKey) servicemodel.PortName {
	nn, ok := t.d.owner[k]
	if !ok {
		return servicemodel.PortName{}
	}
	for _, vs := range t.d.progs[nn].vss {
		if vs.key == k {
			return vs.port
		}
	}
	return servicemodel.PortName{}
}

func (t *tracer) trace(p dataplane.Packet) dataplane.Verdict {
	t.sets = t.nl.Sets()
	src, dst := p.Src, p.Dst.Addr()
	k := vsKey{dst, protoNumber(string(p.Protocol)), p.Dst.Port()}
	e := entry{ip: dst, proto: uint8(k.proto), port: k.port}
	nodeIPs := t.st.Node.IPs
	bound := t.in(setIPs, entry{ip: dst})
	local := bound || dst.IsLoopback() || slices.Contains(nodeIPs, dst)
	srcLocal := p.From == dataplane.FromNode || src.IsLoopback() || slices.Contains(nodeIPs, src) || t.in(setIPs, entry{ip: src})
	vs, ok := t.ipvs.lookup(k)
	name := t.portName(k)

	if local {
		if t.in(setDrop, e) {
			return dataplane.Verdict{Action: dataplane.Drop, Service: name}
		}
		if t.in(setFirewall, e) && !t.inNet(setSourceCIDR, e, src) && !t.inNet(setSourceIP, e, src) {
			return dataplane.Verdict{Action: dataplane.Drop, Service: name}
		}
	}
	if !ok {
		if t.in(setHealthCheck, e) {
			for sp := range t.st.Services.All() {
				if sp.HealthCheckNodePort == k.port {
					return dataplane.Verdict{Action: dataplane.Accept, Service: sp.Name}
				}
			}
		}
		if bound {
			// The address is the node's: the local stack refuses.
			return dataplane.Verdict{Action: dataplane.Reject}
		}
		return dataplane.Verdict{Action: dataplane.NotAService}
	}
	var eps []netip.AddrPort
	for _, d := range vs.dests {
		if d.Weight > 0 {
			eps = append(eps, destAddr(d))
		}
	}
	if len(eps) == 0 {
		return dataplane.Verdict{Action: dataplane.Reject, Service: name}
	}
	slices.SortFunc(eps, netip.AddrPort.Compare)
	masq := t.in(setClusterIP, e) && t.clusterMasq(p) ||
		t.in(setExternal, e) || t.in(setNodePort, e) ||
		(t.in(setExternalLocal, e) || t.in(setNodePortLocal, e)) && srcLocal
	var hairpin []netip.AddrPort
	for _, ep := range eps {
		if ep.Addr() == src && t.in(setLoopBack, entry{ip: ep.Addr(), proto: uint8(k.proto), port: ep.Port(), ip2: src}) {
			hairpin = append(hairpin, ep)
		}
	}
	return dataplane.Verdict{
		Action: dataplane.DNAT, Service: name, Endpoints: eps,
		Masquerade: masq || len(hairpin) == len(eps), Hairpin: hairpin,
		Affinity: vs.svc.Flags&flagPersistent != 0,
	}
}

// clusterMasq evaluates the match clusterMasquerade writes.
func (t *tracer) clusterMasq(p dataplane.Packet) bool {
	match, ok := t.d.clusterMasquerade(t.st)
	switch {
	case !ok:
		return false
	case match == "":
		return true
	case strings.HasPrefix(match, " ! -s "):
		cidr := netip.MustParsePrefix(strings.TrimPrefix(match, " ! -s "))
		return !cidr.Contains(p.Src)
	}
	iface := strings.TrimPrefix(match, " ! -i ")
	var in bool
	switch {
	case p.From == dataplane.FromNode:
	case p.Interface == "":
		in = p.From == dataplane.FromLocalPod
	case strings.HasSuffix(iface, "+"):
		in = strings.HasPrefix(p.Interface, strings.TrimSuffix(iface, "+"))
	default:
		in = p.Interface == iface
	}
	return !in
}

package ipvs

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
)

// tracer follows a packet through what the fakes hold, as the kernel
// would: the filter INPUT chain's drops (the dataplane's sets), then IPVS
// at LOCAL_IN, whose DNAT the nat chains' marks masquerade. The service
// names come from the dataplane's memory, as the kernel has none.
type tracer struct {
	d      *Dataplane
	ipvs   *ipvstest.FakeIPVS
	nl     *ipvstest.FakeNetlink
	runner *xtables.FakeRunner
	st     *dataplane.State
	sets   map[string][]string
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
	o, ok := t.d.owner[k]
	if !ok {
		return servicemodel.PortName{}
	}
	for _, vs := range t.d.progs[o.nn].vss {
		if vs.key == k {
			return vs.port
		}
	}
	return servicemodel.PortName{}
}

// tracedVS is a virtual server of the fake with its real servers.
type tracedVS struct {
	svc   *mobyipvs.Service
	dests []*mobyipvs.Destination
}

// lookup finds virtual server k in the fake's table.
func (t *tracer) lookup(k vsKey) (tracedVS, bool) {
	svcs, _ := t.ipvs.GetServices()
	for _, s := range svcs {
		if keyOfService(s) == k {
			dests, _ := t.ipvs.GetDestinations(s)
			return tracedVS{s, dests}, true
		}
	}
	return tracedVS{}, false
}

func (t *tracer) trace(p dataplane.Packet) (dataplane.Verdict, error) {
	t.sets = t.nl.Sets()
	src, sent := p.Src, p.Dst.Addr()
	proto := handle.ProtoNumber(string(p.Protocol))
	// e is the destination as sent, which the masquerade rules match.
	e := entry{ip: sent, proto: uint8(proto), port: p.Dst.Port()}
	nodeIPs := t.st.Node.IPs
	srcLocal := p.From == dataplane.FromNode || src.IsLoopback() || slices.Contains(nodeIPs, src) || t.in(setIPs, entry{ip: src})
	name := t.portName(vsKey{sent, proto, p.Dst.Port()})
	// Internal traffic to a Local-policy destination may be DNATed to a
	// cluster IP first; the filter rules and IPVS see where it goes.
	k, err := t.internalDNAT(p, e, srcLocal)
	if err != nil {
		return dataplane.Verdict{}, err
	}
	de := entry{ip: k.addr, proto: uint8(k.proto), port: k.port}
	bound := t.in(setIPs, entry{ip: k.addr})
	local := bound || k.addr.IsLoopback() || slices.Contains(nodeIPs, k.addr)
	vs, ok := t.lookup(k)

	if local {
		// IPVS takes the node's own packets at LOCAL_OUT, before the
		// filter INPUT's drops: a dropped destination's virtual server
		// has no real server, so they are rejected.
		if t.in(setDrop, de) && p.From != dataplane.FromNode {
			return dataplane.Verdict{Action: dataplane.Drop, Service: name}, nil
		}
		if t.in(setFirewall, de) && !t.inNet(setSourceCIDR, de, src) && !t.inNet(setSourceIP, de, src) {
			return dataplane.Verdict{Action: dataplane.Drop, Service: name}, nil
		}
	}
	if !ok {
		if t.in(setHealthCheck, e) {
			for sp := range t.st.Services.All() {
				if sp.HealthCheckNodePort == k.port {
					return dataplane.Verdict{Action: dataplane.Accept, Service: sp.Name}, nil
				}
			}
		}
		if bound {
			// The address is the node's: the local stack refuses.
			return dataplane.Verdict{Action: dataplane.Reject}, nil
		}
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	var eps []netip.AddrPort
	for _, d := range vs.dests {
		if d.Weight > 0 {
			eps = append(eps, destAddr(d))
		}
	}
	if len(eps) == 0 {
		return dataplane.Verdict{Action: dataplane.Reject, Service: name}, nil
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
		Affinity: vs.svc.Flags&handle.FlagPersistent != 0,
	}, nil
}

// clusterMasq evaluates the match clusterMasquerade writes.
func (t *tracer) clusterMasq(p dataplane.Packet) bool {
	if t.st.Settings.MasqueradeAll {
		return true
	}
	_, detects := podMatch(t.st)
	return detects && !t.fromPod(p)
}

// fromPod evaluates the match podMatch writes.
func (t *tracer) fromPod(p dataplane.Packet) bool {
	match, ok := podMatch(t.st)
	switch {
	case !ok:
		return false
	case strings.HasPrefix(match, " -s "):
		return netip.MustParsePrefix(strings.TrimPrefix(match, " -s ")).Contains(p.Src)
	}
	iface := strings.TrimPrefix(match, " -i ")
	switch {
	case p.From == dataplane.FromNode:
		return false
	case p.Interface == "":
		return p.From == dataplane.FromLocalPod
	case strings.HasSuffix(iface, "+"):
		return strings.HasPrefix(p.Interface, strings.TrimSuffix(iface, "+"))
	}
	return p.Interface == iface
}

// internalDNAT returns the virtual server a packet to e reaches after the
// INTERNAL chain, followed through the fake's rules when the node or a
// local pod sends to a Local-policy destination.
func (t *tracer) internalDNAT(p dataplane.Packet, e entry, srcLocal bool) (vsKey, error) {
	k := vsKey{e.ip, uint16(e.proto), e.port}
	if !srcLocal && !t.fromPod(p) || !t.in(setExternalLocal, e) && !t.in(setNodePortLocal, e) {
		return k, nil
	}
	rules, _, err := t.runner.ListChain(context.Background(), "nat", t.d.names.internal)
	if err != nil {
		return k, err
	}
	r := &Reading{Sets: map[string]xtables.IPSet{}, Chains: map[string][]string{"nat " + t.d.names.internal: rules}}
	for id := range numSets {
		name := t.d.names.set[id]
		r.Sets[name] = xtables.IPSet{Type: setSpecs[id].typ, Members: t.sets[name]}
	}
	rt := &ruleTracer{r: r, p: p, proto: k.proto, src: p.Src, dst: e.ip, dport: e.port}
	res, err := rt.run("nat", t.d.names.internal, 0)
	if res == "DNAT" {
		k.addr, k.port = rt.dst, rt.dport
	}
	return k, err
}

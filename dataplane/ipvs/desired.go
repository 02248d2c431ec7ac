package ipvs

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
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
	return handle.ProtoName(k.proto) + " " + netip.AddrPortFrom(k.addr, k.port).String()
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
	// sum is its fingerprint as the kernel's table lists it (vsSum),
	// opts that of its options (optsSum).
	sum, opts uint64
}

// same reports whether a and b program the same virtual server.
func (a *virtualServer) same(b *virtualServer) bool {
	return a.key == b.key && a.flags == b.flags && a.timeout == b.timeout && slices.Equal(a.dests, b.dests)
}

// program is everything the dataplane writes for one service.
type program struct {
	vss []virtualServer
	// sets are its set members but the LOOP-BACK ones (members).
	sets  []setEntry
	binds []netip.Addr
	// internal are rules of the INTERNAL chain, as iptables -S prints
	// them, each ending in a newline.
	internal []string
}

// equal reports whether p and q write the same; nil is no program.
func (p *program) equal(q *program) bool {
	if p == nil || q == nil {
		return p == q
	}
	return slices.EqualFunc(p.vss, q.vss, func(a, b virtualServer) bool { return a.same(&b) && a.port == b.port }) &&
		slices.Equal(p.sets, q.sets) && slices.Equal(p.binds, q.binds) && slices.Equal(p.internal, q.internal)
}

// members calls fn with each set member p needs: its sets, then the
// LOOP-BACK member of each real server of its virtual servers, which are
// not kept in its sets. The virtual servers of a port share their lists
// of real servers, and a list comes once as far as the first four tell
// them apart; a member that comes more than once is counted as often
// when p goes as when it came.
func (p *program) members(fn func(setEntry)) {
	for _, se := range p.sets {
		fn(se)
	}
	var seen [4]*netip.AddrPort
	n := 0
	for i := range p.vss {
		vs := &p.vss[i]
		if len(vs.dests) == 0 || slices.Contains(seen[:n], &vs.dests[0]) {
			continue
		}
		if n < len(seen) {
			seen[n] = &vs.dests[0]
			n++
		}
		for _, ep := range vs.dests {
			fn(setEntry{setLoopBack, entry{ip: ep.Addr(), proto: uint8(vs.key.proto), port: ep.Port(), ip2: ep.Addr()}})
		}
	}
}

// vs returns p's virtual server k, nil if it has none.
func (p *program) vs(k vsKey) *virtualServer {
	if p == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(p.vss, k, func(vs virtualServer, k vsKey) int { return compareKeys(vs.key, k) })
	if !ok {
		return nil
	}
	return &p.vss[i]
}

// The desired table is what the State of the last Sync needs, kept in
// the Dataplane's fields (progs, owner, rivals and the counts) and
// brought to the next State service by service: a Sync computes only the
// programs of the services State.ChangedFrom names, whatever its kind,
// so that a forced full sync rebuilds nothing that did not change. It is
// pure computation and never fails half-way: a Sync whose calls fail
// leaves it describing the new State, which the next (full) Sync
// compares with the kernel.

// desire brings the desired table to s on a node with addrs: only the
// services names lists (every one of s when all), each of whose changes
// dl records, when dl is not nil.
func (d *Dataplane) desire(s *dataplane.State, addrs nodeAddrs, names []types.NamespacedName, all bool, dl *delta) {
	if all {
		d.rebuild(s, addrs)
		return
	}
	for _, nn := range names {
		d.desireOne(nn, d.programOf(s, nn, addrs), dl)
	}
	d.desired, d.addrs = s, addrs
}

// rebuild makes the desired table anew for s, its maps sized for what
// the programs hold.
func (d *Dataplane) rebuild(s *dataplane.State, addrs nodeAddrs) {
	var names []types.NamespacedName
	for nn := range s.Services.Services() {
		names = append(names, nn)
	}
	slices.SortFunc(names, servicemodel.CompareNames)
	progs := make([]*program, len(names))
	var size tableSize
	for i, nn := range names {
		pr := d.programOf(s, nn, addrs)
		progs[i] = pr
		if pr != nil {
			size.progs++
			size.vss += len(pr.vss)
			pr.members(func(setEntry) { size.entries++ })
			size.binds += len(pr.binds)
		}
	}
	d.resetTable(size)
	for i, nn := range names {
		d.desireOne(nn, progs[i], nil)
	}
	d.desired, d.addrs = s, addrs
}

// desireOne gives service nn the program pr (nil: none), noting the
// change in dl when it is not nil.
func (d *Dataplane) desireOne(nn types.NamespacedName, pr *program, dl *delta) {
	old := d.progs[nn]
	if old.equal(pr) {
		return
	}
	if dl != nil {
		dl.services++
		dl.note(d, old)
		dl.note(d, pr)
	}
	d.uncount(d.sumOf(old, pr))
	d.count(old, -1)
	d.count(pr, 1)
	if old != nil {
		for i := range old.vss {
			d.release(old.vss[i].key, nn)
		}
	}
	if pr == nil {
		delete(d.progs, nn)
	} else {
		d.progs[nn] = pr
		for i := range pr.vss {
			d.claim(pr.vss[i].key, nn)
		}
	}
	d.recount(d.sumOf(old, pr))
}

// vsSums are the fingerprints of some virtual servers: of their lines in
// the kernel's table and of their options.
type vsSums struct{ table, opts uint64 }

func (d *Dataplane) uncount(s vsSums) { d.expect -= s.table; d.expectOpts -= s.opts }
func (d *Dataplane) recount(s vsSums) { d.expect += s.table; d.expectOpts += s.opts }

// sumOf is the fingerprints the desired table says the virtual servers of
// old and pr (each once) have.
func (d *Dataplane) sumOf(old, pr *program) vsSums {
	var sum vsSums
	add := func(k vsKey) {
		if vs := d.vsOf(k); vs != nil {
			sum.table += vs.sum
			sum.opts += vs.opts
		}
	}
	if old != nil {
		for i := range old.vss {
			add(old.vss[i].key)
		}
	}
	if pr != nil {
		for i := range pr.vss {
			if old.vs(pr.vss[i].key) == nil {
				add(pr.vss[i].key)
			}
		}
	}
	return sum
}

// count adds pr's addresses, set members and INTERNAL rules to the
// counts, n times (-1 to remove them), and a member that comes or goes to
// its set's fingerprint (an address to the IPS set's).
func (d *Dataplane) count(pr *program, n int) {
	if pr == nil {
		return
	}
	for _, r := range pr.internal {
		d.internal[r] += n
		if d.internal[r] == 0 {
			delete(d.internal, r)
		}
	}
	for _, a := range pr.binds {
		d.countEntry(setIPs, entry{ip: a}, d.binds[a], d.binds[a]+n)
		d.binds[a] += n
		if d.binds[a] == 0 {
			delete(d.binds, a)
		}
	}
	pr.members(func(se setEntry) {
		k := se.key()
		before := d.entries[k]
		d.countEntry(se.set, se.e, int(before), int(before)+n)
		if int(before)+n == 0 {
			delete(d.entries, k)
		} else {
			d.entries[k] = before + int32(n)
		}
	})
}

// countEntry keeps the fingerprint and the size of set id as the count
// of e in it goes from before to after.
func (d *Dataplane) countEntry(id setID, e entry, before, after int) {
	switch {
	case before == 0 && after > 0:
		d.setSums[id] += entrySum(e)
		d.setLens[id]++
	case before > 0 && after == 0:
		d.setSums[id] -= entrySum(e)
		d.setLens[id]--
	}
}

// tableSize is what the desired table's maps are made for.
type tableSize struct{ progs, vss, entries, binds int }

// resetTable empties the desired table, its maps made for size.
func (d *Dataplane) resetTable(size tableSize) {
	d.desired = nil
	d.progs = make(map[types.NamespacedName]*program, size.progs)
	d.owner = make(map[vsKey]owning, size.vss)
	d.rivals = map[vsKey][]types.NamespacedName{}
	d.binds = make(map[netip.Addr]int, size.binds)
	d.entries = make(map[memberKey]int32, size.entries)
	d.internal = map[string]int{}
	d.setSums, d.setLens = [numSets]uint64{}, [numSets]int{}
	d.expect, d.expectOpts = 0, 0
	for _, ds := range d.drainSums {
		d.expect += ds.sum
	}
}

// owning is the service that owns a virtual server and its program's
// virtual server.
type owning struct {
	nn types.NamespacedName
	vs *virtualServer
}

// claim records that service nn, whose program the desired table holds,
// wants virtual server k: the first service by name that wants one gets
// it, the others wait in rivals.
func (d *Dataplane) claim(k vsKey, nn types.NamespacedName) {
	o, taken := d.owner[k]
	if !taken {
		d.owner[k] = owning{nn, d.progs[nn].vs(k)}
		return
	}
	if servicemodel.CompareNames(nn, o.nn) < 0 {
		d.owner[k], nn = owning{nn, d.progs[nn].vs(k)}, o.nn
	}
	r := d.rivals[k]
	i, _ := slices.BinarySearchFunc(r, nn, servicemodel.CompareNames)
	d.rivals[k] = slices.Insert(r, i, nn)
}

// release records that service nn no longer wants virtual server k: the
// first rival by name gets it.
func (d *Dataplane) release(k vsKey, nn types.NamespacedName) {
	r := d.rivals[k]
	if d.owner[k].nn == nn {
		if len(r) == 0 {
			delete(d.owner, k)
			return
		}
		d.owner[k], r = owning{r[0], d.progs[r[0]].vs(k)}, r[1:]
	} else if i, ok := slices.BinarySearchFunc(r, nn, servicemodel.CompareNames); ok {
		r = slices.Delete(r, i, i+1)
	}
	if len(r) == 0 {
		delete(d.rivals, k)
	} else {
		d.rivals[k] = r
	}
}

// vsOf returns virtual server k as the desired table has it (its owner's),
// nil when no service wants it.
func (d *Dataplane) vsOf(k vsKey) *virtualServer {
	return d.owner[k].vs
}

// programOf returns what service nn of s needs; nil when it has no usable
// port.
func (d *Dataplane) programOf(s *dataplane.State, nn types.NamespacedName, addrs nodeAddrs) *program {
	ports := s.Services.Service(nn)
	if len(ports) == 0 {
		return nil
	}
	pr := &program{}
	for _, sp := range ports {
		d.addPort(pr, s, sp, addrs)
	}
	if len(pr.vss) == 0 {
		return nil
	}
	slices.SortFunc(pr.vss, func(a, b virtualServer) int { return compareKeys(a.key, b.key) })
	pr.vss = slices.CompactFunc(pr.vss, func(a, b virtualServer) bool { return a.key == b.key })
	slices.SortFunc(pr.binds, netip.Addr.Compare)
	pr.binds = slices.Compact(pr.binds)
	slices.SortFunc(pr.sets, compareSetEntries)
	pr.sets = slices.Compact(pr.sets)
	slices.Sort(pr.internal)
	pr.internal = slices.Compact(pr.internal)
	for i := range pr.vss {
		vs := &pr.vss[i]
		vs.sum, vs.opts = d.vsSum(vs), d.optsSum(vs.key, d.cfg.Scheduler, vs.flags, vs.timeout)
	}
	return pr
}

func (d *Dataplane) addPort(pr *program, s *dataplane.State, sp *servicemodel.ServicePort, addrs nodeAddrs) {
	rp, reason := ruleport.Check(sp, d.ipv6, d.skip)
	if reason != "" {
		d.skip(reason)
		return
	}
	pp := &portProgram{program: pr, rp: rp, proto: handle.ProtoNumber(rp.Proto), flags: d.cfg.flags()}
	if rp.AffinitySeconds > 0 {
		pp.flags |= handle.FlagPersistent
		pp.timeout = uint32(rp.AffinitySeconds)
	}
	sel := s.Select(sp)
	pol := sp.Policy()
	usable := func(eps []*endpoints.Endpoint) []netip.AddrPort {
		out := make([]netip.AddrPort, 0, len(eps))
		for _, e := range eps {
			if ruleport.UsableEndpoint(e, d.ipv6) {
				out = append(out, e.Addr)
			}
		}
		slices.SortFunc(out, netip.AddrPort.Compare)
		return slices.Compact(out)
	}
	// Virtual servers share their lists of real servers, which nothing
	// changes once made.
	cluster := usable(sel.Cluster)
	internal, external := cluster, cluster
	if pol.InternalLocal || pol.ExternalLocal {
		local := usable(sel.Local)
		if pol.InternalLocal {
			internal = local
		}
		if pol.ExternalLocal {
			external = local
		}
	}

	// Cluster IP.
	pr.binds = append(pr.binds, sp.ClusterIP)
	switch {
	case sel.HasAny && len(internal) > 0:
		pp.vs(sp.ClusterIP, sp.Port, internal)
		pp.ipPort(setClusterIP, sp.ClusterIP, sp.Port)
	case sel.HasAny:
		pp.vs(sp.ClusterIP, sp.Port, nil)
		pp.ipPort(setDrop, sp.ClusterIP, sp.Port)
	default:
		pp.vs(sp.ClusterIP, sp.Port, nil)
	}
	d.addExternal(pp, s, sel.HasAny, external, addrs.nodePort)
	if pol.ExternalLocal && sel.HasAny {
		d.addInternal(pp)
	}
	if sp.HealthCheckNodePort != 0 {
		// On every local address: the node's and loopback's.
		lo := netip.IPv6Loopback()
		if !d.ipv6 {
			lo = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		for _, ip := range append([]netip.Addr{lo}, addrs.local...) {
			pr.sets = append(pr.sets, setEntry{setHealthCheck, entry{ip: ip, proto: unix.IPPROTO_TCP, port: sp.HealthCheckNodePort}})
		}
	}
}

// portProgram adds the virtual servers and set members of one service
// port to a program.
type portProgram struct {
	*program
	rp             *ruleport.Port
	proto          uint16
	flags, timeout uint32
}

func (pp *portProgram) vs(addr netip.Addr, port uint16, dests []netip.AddrPort) {
	// Their LOOP-BACK members are not kept: program.members makes them.
	pp.vss = append(pp.vss, virtualServer{key: vsKey{addr, pp.proto, port}, port: pp.rp.SP.Name, flags: pp.flags, timeout: pp.timeout, dests: dests})
}

func (pp *portProgram) ipPort(set setID, a netip.Addr, port uint16) {
	pp.sets = append(pp.sets, setEntry{set, entry{ip: a, proto: uint8(pp.proto), port: port}})
}

// addExternal adds the external IPs, LoadBalancer VIPs and node ports
// (on nodePort) of a port, which share its external endpoints.
func (d *Dataplane) addExternal(pp *portProgram, s *dataplane.State, hasAny bool, external []netip.AddrPort, nodePort []netip.Addr) {
	sp, rp := pp.rp.SP, pp.rp
	extSet, npSet := setExternal, setNodePort
	if sp.Policy().ExternalLocal {
		extSet, npSet = setExternalLocal, setNodePortLocal
	}
	hasExternal := hasAny && len(external) > 0
	external1 := func(a netip.Addr, port uint16, set setID, bind bool) {
		if bind {
			pp.binds = append(pp.binds, a)
		}
		switch {
		case hasExternal:
			pp.vs(a, port, external)
		case hasAny:
			pp.vs(a, port, nil)
			pp.ipPort(setDrop, a, port)
		default:
			pp.vs(a, port, nil)
		}
		// Local-policy destinations are there for internal traffic even
		// without local endpoints; node ports always, as they say which
		// virtual servers on node addresses are the dataplane's.
		if hasExternal || set == setExternalLocal && hasAny || set == setNodePort || set == setNodePortLocal {
			pp.ipPort(set, a, port)
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
		pp.ipPort(setFirewall, a, sp.Port)
		for _, r := range rp.SourceRanges {
			pp.sets = append(pp.sets, setEntry{setSourceCIDR, entry{ip: a, proto: uint8(pp.proto), port: sp.Port, ip2: r.Addr(), bits2: uint8(r.Bits())}})
		}
		if slices.ContainsFunc(s.Node.IPs, func(ip netip.Addr) bool {
			return slices.ContainsFunc(rp.SourceRanges, func(r netip.Prefix) bool { return r.Contains(ip) })
		}) {
			for _, vip := range rp.LBVIPs {
				pp.sets = append(pp.sets, setEntry{setSourceIP, entry{ip: a, proto: uint8(pp.proto), port: sp.Port, ip2: vip}})
			}
		}
	}
	if sp.NodePort != 0 {
		for _, ip := range nodePort {
			external1(ip, sp.NodePort, npSet, false)
		}
	}
}

// addInternal adds the INTERNAL chain's rules of an externalTrafficPolicy
// Local port: traffic from the node and from local pods to its external
// destinations goes to its cluster IP, whose virtual server has every
// endpoint, before IPVS sees the destination, whose virtual server has
// only the local ones. A VIP with loadBalancerSourceRanges is redirected
// only for the sources they admit (its SOURCE-CIDR or SOURCE-IP members);
// others meet its firewall as before.
func (d *Dataplane) addInternal(pp *portProgram) {
	sp, rp := pp.rp.SP, pp.rp
	to := netip.AddrPortFrom(sp.ClusterIP, sp.Port)
	dst := func(a netip.Addr) string { return "-d " + netip.PrefixFrom(a, a.BitLen()).String() + " " }
	for _, a := range rp.ExternalIPs {
		pp.internal = append(pp.internal, d.dnatRule(dst(a), rp.Proto, sp.Port, "", to))
	}
	for _, a := range rp.LBVIPs {
		if len(rp.SourceRanges) == 0 {
			pp.internal = append(pp.internal, d.dnatRule(dst(a), rp.Proto, sp.Port, "", to))
			continue
		}
		for _, id := range []setID{setSourceCIDR, setSourceIP} {
			pp.internal = append(pp.internal, d.dnatRule(dst(a), rp.Proto, sp.Port, " -m set --match-set "+d.names.set[id]+" dst,dst,src", to))
		}
	}
	if sp.NodePort != 0 {
		pp.internal = append(pp.internal, d.dnatRule("", rp.Proto, sp.NodePort, " -m set --match-set "+d.names.set[setNodePortLocal]+" dst,dst", to))
	}
}

// dnatRule is one rule of the INTERNAL chain, as iptables -S prints it:
// dst is "-d ADDR " or "", match follows the port match.
func (d *Dataplane) dnatRule(dst, proto string, port uint16, match string, to netip.AddrPort) string {
	return fmt.Sprintf("-A %s %s-p %s -m %s --dport %d%s -j DNAT --to-destination %s\n", d.names.internal, dst, proto, proto, port, match, to)
}

func (d *Dataplane) skip(reason string) {
	d.log.V(4).Info("Skipped", "reason", reason)
	if d.cfg.OnSkip != nil {
		d.cfg.OnSkip(reason)
	}
}

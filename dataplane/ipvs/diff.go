package ipvs

import (
	"fmt"
	"net/netip"
	"slices"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The difference stage: what must change in the kernel, as a plan the
// apply stage carries out. A partial Sync takes it from the desired
// table's own change (delta), without reading the kernel; a full one
// compares the whole desired table with one reading of the kernel.

// delta is what one desire changed in the desired table: of every
// virtual server, address, set member and INTERNAL rule it touched, what
// the table said before.
type delta struct {
	vss      map[vsKey]*virtualServer
	binds    map[netip.Addr]int
	entries  map[setEntry]int
	internal map[string]int
	// services counts the services whose program changed.
	services int
}

func newDelta() *delta {
	return &delta{vss: map[vsKey]*virtualServer{}, binds: map[netip.Addr]int{},
		entries: map[setEntry]int{}, internal: map[string]int{}}
}

// note records what the desired table says of everything pr touches,
// unless an earlier change of the same desire recorded it first.
func (dl *delta) note(d *Dataplane, pr *program) {
	if pr == nil {
		return
	}
	for i := range pr.vss {
		k := pr.vss[i].key
		if _, ok := dl.vss[k]; !ok {
			dl.vss[k] = d.vsOf(k)
		}
	}
	for _, a := range pr.binds {
		if _, ok := dl.binds[a]; !ok {
			dl.binds[a] = d.binds[a]
		}
	}
	pr.members(func(se setEntry) {
		if _, ok := dl.entries[se]; !ok {
			dl.entries[se] = int(d.entries[se.key()])
		}
	})
	for _, r := range pr.internal {
		if _, ok := dl.internal[r]; !ok {
			dl.internal[r] = d.internal[r]
		}
	}
}

// plan is what the apply stage changes, in its order: virtual servers
// deleted, addresses unbound, set members removed and added (or every
// wanted one, to the sets it fills), addresses bound, virtual servers
// created or brought to what is wanted, and the INTERNAL chain rewritten.
type plan struct {
	delVS            []*mobyipvs.Service
	unbind           []*netlink.Addr
	bind             []netip.Addr
	delSets, addSets []setEntry
	// fill marks the sets to which every member the desired table wants
	// is added (new sets, in a first sync), without a list of them.
	fill     [numSets]bool
	vss      []vsSync
	internal bool
}

// vsSync is one virtual server to program: kernel is what the kernel
// holds (nil when it has none), want what it must hold.
type vsSync struct {
	kernel *mobyipvs.Service
	want   *virtualServer
}

// partialPlan is the plan of a partial Sync: the kernel held what the
// desired table said before dl, so the difference is dl's own.
func (d *Dataplane) partialPlan(dl *delta) *plan {
	p := &plan{}
	for k, before := range dl.vss {
		after := d.vsOf(k)
		switch {
		case after == nil && before != nil:
			p.delVS = append(p.delVS, d.service(k, 0, 0))
		case after == nil, before != nil && before.same(after):
		case before == nil:
			p.vss = append(p.vss, vsSync{want: after})
		default:
			p.vss = append(p.vss, vsSync{kernel: d.service(k, before.flags, before.timeout), want: after})
		}
	}
	for a, n := range dl.binds {
		switch now := d.binds[a]; {
		case n > 0 && now == 0:
			p.unbind = append(p.unbind, handle.HostAddr(a))
			p.delSets = append(p.delSets, setEntry{setIPs, entry{ip: a}})
		case n == 0 && now > 0:
			p.addSets = append(p.addSets, setEntry{setIPs, entry{ip: a}})
			p.bind = append(p.bind, a)
		}
	}
	for se, n := range dl.entries {
		switch now := d.entries[se.key()]; {
		case n > 0 && now == 0:
			p.delSets = append(p.delSets, se)
		case n == 0 && now > 0:
			p.addSets = append(p.addSets, se)
		}
	}
	for r, n := range dl.internal {
		p.internal = p.internal || (n == 0) != (d.internal[r] == 0)
	}
	p.sort()
	return p
}

// sort orders what the plan changes, so that a Sync's calls come in the
// same order whatever the maps' order.
func (p *plan) sort() {
	slices.SortFunc(p.delVS, func(a, b *mobyipvs.Service) int { return compareKeys(keyOfService(a), keyOfService(b)) })
	slices.SortFunc(p.unbind, func(a, b *netlink.Addr) int { return linkAddr(a).Compare(linkAddr(b)) })
	slices.SortFunc(p.bind, netip.Addr.Compare)
	slices.SortFunc(p.delSets, compareSetEntries)
	slices.SortFunc(p.addSets, compareSetEntries)
	slices.SortFunc(p.vss, func(a, b vsSync) int { return compareKeys(a.want.key, b.want.key) })
}

// kernelPlan is the plan of a full Sync: the whole desired table against
// the kernel, as one reading of the link's addresses and the sets found
// it, and one dump of the virtual servers and one read of the table.
// Where a fingerprint of what was read matches the desired table's, there
// is nothing to compare one by one.
func (d *Dataplane) kernelPlan(k *kernelReading) (*plan, error) {
	p := &plan{}
	p.delSets, p.addSets, p.fill = k.sets.del, k.sets.add, k.sets.fill
	var linkSum uint64
	for _, a := range k.link {
		linkSum += entrySum(entry{ip: linkAddr(a)})
	}
	if len(k.link) != len(d.binds) || linkSum != d.setSums[setIPs] {
		for _, a := range k.link {
			ip := linkAddr(a)
			if k.sets.has(setIPs, entry{ip: ip}) && d.binds[ip] == 0 {
				p.unbind = append(p.unbind, a)
			}
		}
		for a := range d.binds {
			if !k.onLink(a) {
				p.bind = append(p.bind, a)
			}
		}
	}
	if err := d.planVirtualServers(p, &k.sets); err != nil {
		return nil, err
	}
	p.sort()
	return p, nil
}

// planVirtualServers adds to p what differs between the kernel's virtual
// servers and the desired ones: from the dump of the virtual servers,
// their options, one by one when their fingerprint differs; from the
// table's one read, their real servers, one by one when its fingerprint
// differs. A virtual server whose real servers may differ gets a dump of
// them.
func (d *Dataplane) planVirtualServers(p *plan, sets *setsReading) error {
	all, err := d.ipvs.GetServices()
	if err != nil {
		return fmt.Errorf("list virtual servers: %w", err)
	}
	kernel := all[:0]
	var opts uint64
	for _, ks := range all {
		if ks.FWMark == 0 && (ks.AddressFamily == unix.AF_INET6) == d.ipv6 {
			kernel = append(kernel, ks)
			opts += d.optsSum(keyOfService(ks), ks.SchedName, ks.Flags&^handle.FlagHashed, ks.Timeout)
		}
	}
	planned := map[vsKey]bool{}
	if len(kernel) != len(d.owner) || opts != d.expectOpts {
		d.planOptions(p, kernel, sets, planned)
	}
	if len(planned) == len(d.owner) {
		// Every wanted one is created or fixed (the first sync): the
		// table has nothing more to say.
		return nil
	}
	type listed struct {
		key vsKey
		sum uint64
	}
	var sum uint64
	var table []listed
	if d.table == nil || d.table(func(text []byte) {
		table = make([]listed, 0, len(d.owner))
		scanTable(text, d.ipv6, func(key vsKey, s uint64) {
			sum += s
			table = append(table, listed{key, s})
		})
	}) != nil {
		// Without a table, a dump of each one's real servers.
		for key, o := range d.owner {
			if !planned[key] {
				p.vss = append(p.vss, vsSync{kernel: d.service(key, o.vs.flags, o.vs.timeout), want: o.vs})
			}
		}
		return nil
	}
	if len(table) == len(d.owner) && sum == d.expect {
		return nil
	}
	for _, l := range table {
		if want := d.vsOf(l.key); want != nil && !planned[l.key] && l.sum != want.sum+d.drainSums[l.key].sum {
			p.vss = append(p.vss, vsSync{kernel: d.service(l.key, want.flags, want.timeout), want: want})
		}
	}
	return nil
}

// planOptions adds to p, of the kernel's virtual servers, the dataplane's
// that no service wants (deleted), the wanted ones whose options differ
// and the wanted ones missing (created), noting them in planned.
func (d *Dataplane) planOptions(p *plan, kernel []*mobyipvs.Service, sets *setsReading, planned map[vsKey]bool) {
	have := make(map[vsKey]bool, len(kernel))
	for _, ks := range kernel {
		key := keyOfService(ks)
		have[key] = true
		want := d.vsOf(key)
		switch {
		case want == nil:
			if sets.owns(key) {
				p.delVS = append(p.delVS, ks)
			}
		case ks.SchedName != d.cfg.Scheduler || ks.Flags&^handle.FlagHashed != want.flags || ks.Timeout != want.timeout:
			p.vss = append(p.vss, vsSync{kernel: ks, want: want})
			planned[key] = true
		}
	}
	for key, o := range d.owner {
		if !have[key] {
			p.vss = append(p.vss, vsSync{want: o.vs})
			planned[key] = true
		}
	}
}

// kernelReading is what a full Sync reads of the kernel before its
// virtual servers: the family's addresses on the link and the
// dataplane's sets.
type kernelReading struct {
	link []*netlink.Addr
	// linkAt indexes link by address, when there are many.
	linkAt map[netip.Addr]bool
	sets   setsReading
}

func (k *kernelReading) onLink(a netip.Addr) bool {
	if k.linkAt == nil {
		k.linkAt = make(map[netip.Addr]bool, len(k.link))
		for _, l := range k.link {
			k.linkAt[linkAddr(l)] = true
		}
	}
	return k.linkAt[a]
}

func linkAddr(a *netlink.Addr) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.IP)
	return ip.Unmap()
}

// setsReading is what a full Sync found in the dataplane's sets: the
// members to remove and to add, and the listing of the sets that say
// which virtual servers are the dataplane's (its addresses, its node
// ports), indexed when a virtual server not wanted asks.
type setsReading struct {
	del, add []setEntry
	// fill marks the empty sets that want members: all of them are added.
	fill   [numSets]bool
	listed [numSets][]netlink.IPSetEntry
	index  [numSets]map[entry]bool
}

// indexed are the sets setsReading keeps.
var indexed = [...]setID{setIPs, setNodePort, setNodePortLocal}

func (r *setsReading) has(id setID, e entry) bool {
	if r.index[id] == nil {
		r.index[id] = make(map[entry]bool, len(r.listed[id]))
		for i := range r.listed[id] {
			r.index[id][entryFromNetlink(setSpecs[id].typ, &r.listed[id][i])] = true
		}
	}
	return r.index[id][e]
}

// owns reports whether the kernel's virtual server k is the dataplane's,
// as its sets say: on an address it bound, or a node port it recorded.
func (r *setsReading) owns(k vsKey) bool {
	if r.has(setIPs, entry{ip: k.addr}) {
		return true
	}
	e := entry{ip: k.addr, proto: uint8(k.proto), port: k.port}
	return r.has(setNodePort, e) || r.has(setNodePortLocal, e)
}

// readSets lists every set (creating those that are missing: one call
// per set, plus one per missing set) and compares it with what the
// desired table wants: its fingerprint and size first, then, only for a
// set whose fingerprint differs, member by member.
func (d *Dataplane) readSets() (setsReading, error) {
	var r setsReading
	for id := range numSets {
		res, err := d.ensureSet(id)
		if err != nil {
			return r, err
		}
		var listed []netlink.IPSetEntry
		if res != nil {
			listed = res.Entries
		}
		if slices.Contains(indexed[:], id) {
			r.listed[id] = listed
		}
		var sum uint64
		for i := range listed {
			sum += entrySum(entryFromNetlink(setSpecs[id].typ, &listed[i]))
		}
		if len(listed) == d.setLens[id] && sum == d.setSums[id] {
			continue
		}
		found := 0
		for i := range listed {
			e := entryFromNetlink(setSpecs[id].typ, &listed[i])
			if d.wantsEntry(id, e) {
				found++
			} else {
				r.del = append(r.del, setEntry{id, e})
			}
		}
		switch {
		case len(listed) == 0:
			// A new set: apply adds every wanted member, listed nowhere.
			r.fill[id] = d.setLens[id] > 0
		case found < d.setLens[id]:
			r.add = d.missingEntries(r.add, id, listed)
		}
	}
	return r, nil
}

// wantsEntry reports whether the desired table wants e in set id.
func (d *Dataplane) wantsEntry(id setID, e entry) bool {
	if id == setIPs {
		return e == entry{ip: e.ip} && d.binds[e.ip] > 0
	}
	return d.entries[setEntry{id, e}.key()] > 0
}

// missingEntries appends to add the members of set id the desired table
// wants and listed lacks.
func (d *Dataplane) missingEntries(add []setEntry, id setID, listed []netlink.IPSetEntry) []setEntry {
	add = slices.Grow(add, d.setLens[id]-len(listed))
	held := make(map[entry]bool, len(listed))
	for i := range listed {
		held[entryFromNetlink(setSpecs[id].typ, &listed[i])] = true
	}
	if id == setIPs {
		for a := range d.binds {
			if !held[entry{ip: a}] {
				add = append(add, setEntry{id, entry{ip: a}})
			}
		}
		return add
	}
	for k := range d.entries {
		if setID(k.set) == id {
			if se := k.setEntry(); !held[se.e] {
				add = append(add, se)
			}
		}
	}
	return add
}

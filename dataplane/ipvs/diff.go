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
	dl.services++
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
	for _, se := range pr.sets {
		if _, ok := dl.entries[se]; !ok {
			dl.entries[se] = d.entries[se]
		}
	}
	for _, r := range pr.internal {
		if _, ok := dl.internal[r]; !ok {
			dl.internal[r] = d.internal[r]
		}
	}
}

// plan is what the apply stage changes, in its order: virtual servers
// deleted, addresses unbound, set members removed and added, addresses
// bound, virtual servers created or brought to what is wanted, and the
// INTERNAL chain rewritten.
type plan struct {
	delVS            []*mobyipvs.Service
	unbind           []*netlink.Addr
	bind             []netip.Addr
	delSets, addSets []setEntry
	vss              []vsSync
	internal         bool
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
		switch now := d.entries[se]; {
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
// the kernel, as one reading found it.
func (d *Dataplane) kernelPlan(k *kernelReading) *plan {
	p := &plan{}
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
	p.delSets, p.addSets = k.sets.del, k.sets.add
	for key, nn := range d.owner {
		want := d.progs[nn].vs(key)
		ks := k.vss[key]
		switch {
		case ks == nil:
			p.vss = append(p.vss, vsSync{want: want})
		case ks.SchedName != d.cfg.Scheduler || ks.Flags&^handle.FlagHashed != want.flags || ks.Timeout != want.timeout:
			p.vss = append(p.vss, vsSync{kernel: ks, want: want})
		case k.sums == nil:
			p.vss = append(p.vss, vsSync{kernel: ks, want: want})
		default:
			if sum, listed := k.sums[key]; !listed || sum != want.sum+d.drainSums[key].sum {
				p.vss = append(p.vss, vsSync{kernel: ks, want: want})
			}
		}
	}
	for key, ks := range k.vss {
		if _, ok := d.owner[key]; !ok && k.sets.owns(key) {
			p.delVS = append(p.delVS, ks)
		}
	}
	p.sort()
	return p
}

// kernelReading is what a full Sync reads of the kernel: the family's
// addresses on the link, the dataplane's sets, the family's virtual
// servers and, from the table's one listing, a fingerprint of each of
// the desired table's virtual servers with its real servers.
type kernelReading struct {
	link []*netlink.Addr
	// linkAt indexes link by address, when there are many.
	linkAt map[netip.Addr]bool
	sets   setsReading
	vss    map[vsKey]*mobyipvs.Service
	// sums are the fingerprints (vsSum) of the wanted virtual servers the
	// table lists; nil without a listing, when every one is dumped.
	sums map[vsKey]uint64
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

// readServers reads the family's virtual servers (one dump) and,
// when the kernel lists its table, the fingerprints of the wanted ones
// (one read), into k.
func (d *Dataplane) readServers(k *kernelReading) error {
	kernel, err := d.ipvs.GetServices()
	if err != nil {
		return fmt.Errorf("list virtual servers: %w", err)
	}
	k.vss = make(map[vsKey]*mobyipvs.Service, len(kernel))
	for _, ks := range kernel {
		if ks.FWMark == 0 && (ks.AddressFamily == unix.AF_INET6) == d.ipv6 {
			k.vss[keyOfService(ks)] = ks
		}
	}
	if d.table == nil {
		return nil
	}
	sums := make(map[vsKey]uint64, len(d.owner))
	if err := d.table(func(text []byte) {
		scanTable(text, d.ipv6, func(key vsKey, sum uint64) {
			if _, ok := d.owner[key]; ok {
				sums[key] = sum
			}
		})
	}); err != nil {
		// The dumps per virtual server answer instead.
		d.log.V(2).Info("Reading the IPVS table failed", "err", err)
		return nil
	}
	k.sums = sums
	return nil
}

func linkAddr(a *netlink.Addr) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.IP)
	return ip.Unmap()
}

// setsReading is what a full Sync found in the dataplane's sets: the
// members to remove and to add, and, for the sets that say which virtual
// servers are the dataplane's (its addresses, its node ports), an index
// of what they held.
type setsReading struct {
	del, add []setEntry
	index    [numSets]map[entry]bool
}

// indexed are the sets setsReading indexes.
var indexed = [...]setID{setIPs, setNodePort, setNodePortLocal}

func (r *setsReading) has(id setID, e entry) bool { return r.index[id][e] }

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
// per set, plus one per missing set) and compares its members with those
// the desired table wants as it reads them: one pass over the listing,
// and over the wanted members only for a set that lacks some.
func (d *Dataplane) readSets() (setsReading, error) {
	var r setsReading
	var want [numSets]int
	for se := range d.entries {
		want[se.set]++
	}
	want[setIPs] = len(d.binds)
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
			r.index[id] = make(map[entry]bool, len(listed))
		}
		found := 0
		for i := range listed {
			e := entryFromNetlink(setSpecs[id].typ, &listed[i])
			if r.index[id] != nil {
				r.index[id][e] = true
			}
			if d.wantsEntry(id, e) {
				found++
			} else {
				r.del = append(r.del, setEntry{id, e})
			}
		}
		if found < want[id] {
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
	return d.entries[setEntry{id, e}] > 0
}

// missingEntries appends to add the members of set id the desired table
// wants and listed lacks.
func (d *Dataplane) missingEntries(add []setEntry, id setID, listed []netlink.IPSetEntry) []setEntry {
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
	for se := range d.entries {
		if se.set == id && !held[se.e] {
			add = append(add, se)
		}
	}
	return add
}

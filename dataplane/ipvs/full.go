package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// fullSync diffs everything the dataplane owns in the kernel against s
// and changes only the difference; it returns what it changed. It costs
// one dump of the virtual servers, one of the link's addresses, one per
// ipset and one per virtual server of s, plus one call per difference.
func (d *Dataplane) fullSync(ctx context.Context, s *dataplane.State) ([]string, dataplane.SyncReport, error) {
	report := dataplane.SyncReport{Full: true}
	link, err := d.prepare()
	if err != nil {
		return nil, report, err
	}
	have, err := d.ensureSets()
	if err != nil {
		return nil, report, err
	}

	ka, err := d.readAddrs(link.Attrs().Index)
	if err != nil {
		return nil, report, err
	}
	addrs := nodeAddrsOf(s, ka.local, d.ipv6)

	w := d.wanted(s, addrs)
	progs, owner, binds, entries := w.progs, w.owner, w.binds, w.entries
	report.Services = len(progs)
	want := map[setEntry]int{}
	for se, n := range entries {
		want[se] = n
	}
	for a := range binds {
		want[setEntry{setIPs, entry{ip: a}}] = 1
	}

	var changes []string
	// Addresses: unbind what we bound and no longer need first, so that
	// the set of our addresses never misses one on the link.
	onLink := map[netip.Addr]bool{}
	for _, a := range ka.link {
		ip, _ := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		onLink[ip] = true
		if have[setIPs][entry{ip: ip}] && binds[ip] == 0 {
			if err := d.nl.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return changes, report, fmt.Errorf("unbind %s from %s: %w", ip, d.cfg.Link, err)
			}
			changes = append(changes, fmt.Sprintf("link %s: unbound %s", d.cfg.Link, ip))
		}
	}
	more, err := d.syncSets(have, want)
	changes = append(changes, more...)
	if err != nil {
		return changes, report, err
	}
	for _, a := range slices.SortedFunc(mapKeys(binds), netip.Addr.Compare) {
		if onLink[a] {
			continue
		}
		if err := d.bind(link, a); err != nil {
			return changes, report, err
		}
		changes = append(changes, fmt.Sprintf("link %s: bound %s", d.cfg.Link, a))
	}

	more, err = d.syncVirtualServers(w, have)
	changes = append(changes, more...)
	if err != nil {
		return changes, report, err
	}

	n, more, err := d.syncRules(ctx, s, internalText(w.internal))
	changes = append(changes, more...)
	if err != nil {
		return changes, report, err
	}
	report.Bytes = n
	d.progs, d.owner, d.binds, d.entries, d.internal = progs, owner, binds, entries, w.internal
	d.addrs = addrs
	return changes, report, nil
}

// syncVirtualServers makes the kernel's virtual servers what w wants and
// deletes those of the dataplane (as have, its sets, says) that w does not
// want: one dump, then one per wanted virtual server.
func (d *Dataplane) syncVirtualServers(w *desired, have map[setID]map[entry]bool) ([]string, error) {
	var changes []string
	kernel, err := d.ipvs.GetServices()
	if err != nil {
		return changes, fmt.Errorf("list virtual servers: %w", err)
	}
	byKey := map[vsKey]*mobyipvs.Service{}
	for _, ks := range kernel {
		if ks.FWMark == 0 && (ks.AddressFamily == unix.AF_INET6) == d.ipv6 {
			byKey[keyOfService(ks)] = ks
		}
	}
	for _, nn := range w.names {
		pr := w.progs[nn]
		if pr == nil {
			continue
		}
		for i := range pr.vss {
			vs := &pr.vss[i]
			more, err := d.syncVS(vs.key, byKey[vs.key], vs)
			changes = append(changes, more...)
			if err != nil {
				return changes, err
			}
		}
	}
	for k, ks := range byKey {
		if _, ok := w.owner[k]; ok || !d.owns(have, k) {
			continue
		}
		if err := d.ipvs.DelService(ks); err != nil && !errors.Is(err, unix.ESRCH) {
			return changes, fmt.Errorf("delete virtual server %s: %w", k, err)
		}
		d.forgetDrains(k)
		changes = append(changes, fmt.Sprintf("virtual server %s: deleted", k))
	}
	return changes, nil
}

// desired is what a State needs, service by service, and the counts of
// what they share.
type desired struct {
	names    []types.NamespacedName
	progs    map[types.NamespacedName]*program
	owner    map[vsKey]types.NamespacedName
	binds    map[netip.Addr]int
	entries  map[setEntry]int
	internal map[string]int
}

// wanted returns what s needs on a node with addrs: the first service by
// name claims a virtual server.
func (d *Dataplane) wanted(s *dataplane.State, addrs nodeAddrs) *desired {
	w := &desired{progs: map[types.NamespacedName]*program{}, owner: map[vsKey]types.NamespacedName{},
		binds: map[netip.Addr]int{}, entries: map[setEntry]int{}, internal: map[string]int{}}
	for nn := range s.Services.Services() {
		w.names = append(w.names, nn)
	}
	slices.SortFunc(w.names, servicemodel.CompareNames)
	for _, nn := range w.names {
		pr := d.programOf(s, nn, addrs)
		if pr == nil {
			continue
		}
		pr.vss = slices.DeleteFunc(pr.vss, func(vs virtualServer) bool {
			_, taken := w.owner[vs.key]
			return taken
		})
		for _, vs := range pr.vss {
			w.owner[vs.key] = nn
		}
		w.progs[nn] = pr
		count(w.binds, w.entries, w.internal, pr, 1)
	}
	return w
}

// owns reports whether the kernel's virtual server k is the dataplane's,
// as its sets say: on an address it bound, or a node port it recorded.
func (d *Dataplane) owns(have map[setID]map[entry]bool, k vsKey) bool {
	if have[setIPs][entry{ip: k.addr}] {
		return true
	}
	e := entry{ip: k.addr, proto: uint8(k.proto), port: k.port}
	return have[setNodePort][e] || have[setNodePortLocal][e]
}

func (d *Dataplane) forgetDrains(k vsKey) {
	for dk := range d.draining {
		if dk.vs == k {
			delete(d.draining, dk)
		}
	}
}

func (d *Dataplane) addrFamily() int {
	if d.ipv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (d *Dataplane) bind(link netlink.Link, a netip.Addr) error {
	if err := d.nl.AddrAdd(link, handle.HostAddr(a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("bind %s to %s: %w", a, d.cfg.Link, err)
	}
	return nil
}

// count adds pr's addresses, set members and INTERNAL rules to the
// counts, n times (-1 to remove them).
func count(binds map[netip.Addr]int, entries map[setEntry]int, internal map[string]int, pr *program, n int) {
	if pr == nil {
		return
	}
	for _, r := range pr.internal {
		internal[r] += n
		if internal[r] == 0 {
			delete(internal, r)
		}
	}
	for _, a := range pr.binds {
		binds[a] += n
		if binds[a] == 0 {
			delete(binds, a)
		}
	}
	for _, se := range pr.sets {
		entries[se] += n
		if entries[se] == 0 {
			delete(entries, se)
		}
	}
}

// internalText is the INTERNAL chain's rules, sorted.
func internalText(internal map[string]int) string {
	return strings.Join(slices.Sorted(mapKeys(internal)), "")
}

// partialSync reprograms the services in changed: for each virtual server
// that differs from what was programmed, one dump of its real servers and
// one call per difference; for each address or set member that appears or
// goes, one call.
func (d *Dataplane) partialSync(ctx context.Context, s *dataplane.State, changed []types.NamespacedName) (dataplane.SyncReport, error) {
	report := dataplane.SyncReport{}
	link, err := d.prepare()
	if err != nil {
		return report, err
	}
	next := map[types.NamespacedName]*program{}
	for _, nn := range changed {
		next[nn] = d.programOf(s, nn, d.addrs)
	}
	rulesChanged := false
	// Release the virtual servers services give up before others claim
	// them.
	for _, nn := range changed {
		old := d.progs[nn]
		if old == nil {
			continue
		}
		for _, vs := range old.vss {
			if pr := next[nn]; pr != nil && slices.ContainsFunc(pr.vss, func(n virtualServer) bool { return n.key == vs.key }) {
				continue
			}
			if err := d.ipvs.DelService(d.service(vs.key, 0, 0)); err != nil && !errors.Is(err, unix.ESRCH) {
				return report, fmt.Errorf("delete virtual server %s: %w", vs.key, err)
			}
			d.forgetDrains(vs.key)
			delete(d.owner, vs.key)
		}
	}
	for _, nn := range changed {
		old, pr := d.progs[nn], next[nn]
		if pr != nil {
			pr.vss = slices.DeleteFunc(pr.vss, func(vs virtualServer) bool {
				o, taken := d.owner[vs.key]
				return taken && o != nn
			})
		}
		more, err := d.applyAddrsAndSets(link, old, pr)
		if err != nil {
			return report, err
		}
		rulesChanged = rulesChanged || more
		wrote := false
		if pr != nil {
			for i := range pr.vss {
				vs := &pr.vss[i]
				var prev *virtualServer
				if old != nil {
					if j := slices.IndexFunc(old.vss, func(o virtualServer) bool { return o.key == vs.key }); j >= 0 {
						prev = &old.vss[j]
					}
				}
				if prev != nil && prev.flags == vs.flags && prev.timeout == vs.timeout && slices.Equal(prev.dests, vs.dests) {
					continue
				}
				var kernel *mobyipvs.Service
				if prev != nil {
					kernel = d.service(vs.key, prev.flags, prev.timeout)
				}
				if _, err := d.syncVS(vs.key, kernel, vs); err != nil {
					return report, err
				}
				d.owner[vs.key] = nn
				wrote = true
			}
			d.progs[nn] = pr
		} else {
			delete(d.progs, nn)
		}
		if wrote || old != nil && pr == nil {
			report.Services++
		}
	}
	if rulesChanged {
		n, err := d.syncInternal(ctx)
		if err != nil {
			return report, err
		}
		report.Bytes = n
	}
	return report, nil
}

// applyAddrsAndSets moves the link's addresses and the set members from
// what old needed to what pr needs, and counts the INTERNAL rules; it
// reports whether the chain must be rewritten.
func (d *Dataplane) applyAddrsAndSets(link netlink.Link, old, pr *program) (bool, error) {
	before := map[netip.Addr]int{}
	beforeSets := map[setEntry]int{}
	for _, a := range oldBinds(old) {
		before[a] = d.binds[a]
	}
	for _, se := range oldSets(old) {
		beforeSets[se] = d.entries[se]
	}
	beforeRules := map[string]int{}
	for _, p := range []*program{old, pr} {
		if p != nil {
			for _, r := range p.internal {
				beforeRules[r] = d.internal[r]
			}
		}
	}
	count(d.binds, d.entries, d.internal, old, -1)
	count(d.binds, d.entries, d.internal, pr, 1)
	rulesChanged := false
	for r, n := range beforeRules {
		rulesChanged = rulesChanged || (n == 0) != (d.internal[r] == 0)
	}
	// Gone first: unbind, then forget the address.
	for a := range before {
		if d.binds[a] == 0 {
			if err := d.nl.AddrDel(link, handle.HostAddr(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return false, fmt.Errorf("unbind %s from %s: %w", a, d.cfg.Link, err)
			}
			if err := d.delEntry(setEntry{setIPs, entry{ip: a}}); err != nil {
				return false, err
			}
		}
	}
	for se := range beforeSets {
		if d.entries[se] == 0 {
			if err := d.delEntry(se); err != nil {
				return false, err
			}
		}
	}
	if pr == nil {
		return rulesChanged, nil
	}
	for _, se := range pr.sets {
		if d.entries[se] == 1 && beforeSets[se] == 0 {
			if err := d.addEntry(se); err != nil {
				return false, err
			}
		}
	}
	for _, a := range pr.binds {
		if d.binds[a] == 1 && before[a] == 0 {
			if err := d.addEntry(setEntry{setIPs, entry{ip: a}}); err != nil {
				return false, err
			}
			if err := d.bind(link, a); err != nil {
				return false, err
			}
		}
	}
	return rulesChanged, nil
}

func oldBinds(p *program) []netip.Addr {
	if p == nil {
		return nil
	}
	return p.binds
}

func oldSets(p *program) []setEntry {
	if p == nil {
		return nil
	}
	return p.sets
}

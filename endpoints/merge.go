package endpoints

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Merging is incremental. The snapshot holds each port's merged list; a
// service records only the ports and addresses whose winning endpoint now
// differs from the snapshot's (a port the snapshot lacks is recorded as a
// whole). An update of one slice therefore costs the
// size of that slice (times the number of slices of the service, for
// finding competing entries), not the size of the service, and a Checkout
// rebuilds only the lists of ports that changed.

// serviceSlices is the slices of one service and how their merge differs
// from the snapshot.
type serviceSlices struct {
	slices sliceSet
	// dirty holds every port and address whose winning endpoint differs
	// from the snapshot's, with the current winner (nil when no slice has
	// the address any more).
	dirty map[portAddr]*Endpoint
	// queued is whether the service is in Tracker.pending.
	queued bool
	// fresh is the ports the snapshot does not have and some slice does.
	// Their addresses are not tracked one by one: the whole list is new,
	// so the initial sync does not pay for bookkeeping it cannot use.
	fresh []servicemodel.PortName
	// freshBuf backs fresh for a service of one port, the usual one, so
	// that adding it takes one allocation fewer.
	freshBuf [1]servicemodel.PortName
}

// changed reports whether the service's merge differs from the snapshot.
func (svc *serviceSlices) changed() bool { return len(svc.dirty) > 0 || len(svc.fresh) > 0 }

type portAddr struct {
	port servicemodel.PortName
	addr netip.AddrPort
}

// applyLocked accounts for slice name of service nn having changed from
// prev to cur (either may be nil), and reports whether the merged endpoints
// changed. svc.slices must already hold cur.
func (t *Tracker) applyLocked(nn types.NamespacedName, svc *serviceSlices, name string, prev, cur *parsedSlice) bool {
	changed := false
	if prev != nil {
		for _, p := range prev.ports {
			changed = t.diffPortLocked(svc, name, p.name, p.eps, cur.get(p.name)) || changed
		}
	}
	if cur != nil {
		for _, p := range cur.ports {
			if prev.get(p.name) == nil {
				changed = t.diffPortLocked(svc, name, p.name, nil, p.eps) || changed
			}
		}
	}
	if !changed {
		return false
	}
	switch {
	case svc.changed() && !svc.queued:
		if len(t.pending) >= 2*t.npending+smallMap {
			t.compactPending()
		}
		svc.queued = true
		t.pending = append(t.pending, nn)
		t.npending++
	case !svc.changed():
		// Back to what the snapshot has (an add undone by a delete, say):
		// nothing is left to check out.
		if svc.queued {
			svc.queued = false
			t.npending--
		}
		delete(t.triggers, nn)
	}
	return true
}

// compactPending drops from the pending list the services no longer
// pending and the second listing of those listed twice, so that a service
// flapping between Checkouts does not grow it without bound.
func (t *Tracker) compactPending() {
	kept := t.pending[:0]
	for _, nn := range t.pending {
		// A kept service is unmarked until the end, so that a second
		// listing of it is dropped too.
		if svc := t.services[nn]; svc != nil && svc.queued {
			svc.queued = false
			kept = append(kept, nn)
		}
	}
	for _, nn := range kept {
		t.services[nn].queued = true
	}
	clear(t.pending[len(kept):])
	t.pending = kept
}

// diffPortLocked walks the old and new sorted lists slice name had for port
// pn and, at every address where they differ, recomputes the winner over
// all slices. It reports whether any winner changed.
func (t *Tracker) diffPortLocked(svc *serviceSlices, name string, pn servicemodel.PortName, before, after []*Endpoint) bool {
	changed := false
	applied := t.snapshot.Get(pn)
	// The only slice of its service, as most are, competes with none:
	// there is no winner among the others to look for.
	alone := svc.slices.get(name) != nil && svc.slices.len() == 1
	for i, j := 0, 0; i < len(before) || j < len(after); {
		var old, new *Endpoint
		switch {
		case j == len(after) || i < len(before) && before[i].Addr.Compare(after[j].Addr) < 0:
			old = before[i]
			i++
		case i == len(before) || after[j].Addr.Compare(before[i].Addr) < 0:
			new = after[j]
			j++
		default:
			old, new = before[i], after[j]
			i++
			j++
			if sameEndpoint(old, new) {
				continue
			}
		}
		addr := addrOf(old, new)
		var others *Endpoint
		if !alone {
			others = svc.bestExcept(name, pn, addr)
		}
		was, is := preferred(others, old), preferred(others, new)
		if sameOrNil(was, is) {
			continue
		}
		changed = true
		if len(applied) > 0 {
			svc.markDirty(portAddr{pn, addr}, is, find(applied, addr))
		}
	}
	if changed && len(applied) == 0 {
		svc.markFresh(pn)
	}
	return changed
}

func addrOf(a, b *Endpoint) netip.AddrPort {
	if a != nil {
		return a.Addr
	}
	return b.Addr
}

// bestExcept returns the winning entry for addr on port pn among every
// slice but skip.
func (svc *serviceSlices) bestExcept(skip string, pn servicemodel.PortName, addr netip.AddrPort) *Endpoint {
	var best *Endpoint
	for name, ps := range svc.slices.all() {
		if name != skip {
			best = preferred(best, find(ps.get(pn), addr))
		}
	}
	return best
}

// markDirty records that the winner at k is now cur, applied being the
// snapshot's entry there.
func (svc *serviceSlices) markDirty(k portAddr, cur, applied *Endpoint) {
	if sameOrNil(cur, applied) {
		delete(svc.dirty, k)
		return
	}
	if svc.dirty == nil {
		svc.dirty = map[portAddr]*Endpoint{}
	}
	svc.dirty[k] = cur
}

// markFresh records whether port pn, which the snapshot lacks, now has
// endpoints: exactly when some slice lists it, as slices hold no empty list.
func (svc *serviceSlices) markFresh(pn servicemodel.PortName) {
	has := svc.slicesWith(pn) > 0
	i := slices.Index(svc.fresh, pn)
	switch {
	case has && i < 0:
		if svc.fresh == nil {
			svc.fresh = svc.freshBuf[:0]
		}
		svc.fresh = append(svc.fresh, pn)
	case !has && i >= 0:
		svc.fresh = slices.Delete(svc.fresh, i, i+1)
	}
}

// find returns the entry for addr in a sorted list, nil when absent.
func find(list []*Endpoint, addr netip.AddrPort) *Endpoint {
	i, ok := slices.BinarySearchFunc(list, addr, func(e *Endpoint, a netip.AddrPort) int { return e.Addr.Compare(a) })
	if !ok {
		return nil
	}
	return list[i]
}

// preferred returns whichever of a and b (either may be nil) a merge keeps.
func preferred(a, b *Endpoint) *Endpoint {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case comparePreference(b, a) < 0:
		return b
	default:
		return a
	}
}

func sameOrNil(a, b *Endpoint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameEndpoint(a, b)
}

// apply returns the service's endpoints with its changes applied to prev
// (nil when none are left), and records the changed ports and stale
// endpoints. A port of several slices with few changes is patched; any
// other is merged afresh from the slices, which for a port of a single
// slice just takes that slice's list.
func (ch *Changes) apply(svc *serviceSlices, prev *ServiceEndpoints) *ServiceEndpoints {
	var ports map[servicemodel.PortName][]*Endpoint
	if prev != nil {
		ports = maps.Clone(prev.Ports)
	} else {
		ports = map[servicemodel.PortName][]*Endpoint{}
	}
	// A service has few ports, so they are grouped in a slice.
	type portChanges struct {
		port  servicemodel.PortName
		n     int
		patch bool
		addrs []netip.AddrPort
	}
	var buf [4]portChanges
	changed := buf[:0]
	for k := range svc.dirty {
		i := slices.IndexFunc(changed, func(c portChanges) bool { return c.port == k.port })
		if i < 0 {
			i = len(changed)
			changed = append(changed, portChanges{port: k.port})
		}
		changed[i].n++
	}
	patching := false
	for i := range changed {
		c := &changed[i]
		c.patch = c.n*4 < len(ports[c.port]) && svc.slicesWith(c.port) > 1
		patching = patching || c.patch
	}
	if patching {
		for k := range svc.dirty {
			i := slices.IndexFunc(changed, func(c portChanges) bool { return c.port == k.port })
			if changed[i].patch {
				changed[i].addrs = append(changed[i].addrs, k.addr)
			}
		}
	}
	for _, pn := range svc.fresh {
		changed = append(changed, portChanges{port: pn})
	}
	for _, c := range changed {
		ch.Ports.Insert(c.port)
		old := ports[c.port]
		var list []*Endpoint
		if c.patch {
			slices.SortFunc(c.addrs, netip.AddrPort.Compare)
			list = ch.patch(c.port, old, c.addrs, svc.dirty)
		} else {
			list = svc.merge(c.port)
			ch.stale(c.port, old, list)
		}
		if len(list) == 0 {
			delete(ports, c.port)
		} else {
			ports[c.port] = list
		}
	}
	if len(ports) == 0 {
		return nil
	}
	return newServiceEndpoints(ports)
}

// slicesWith returns how many slices have endpoints for port pn.
func (svc *serviceSlices) slicesWith(pn servicemodel.PortName) int {
	n := 0
	for _, ps := range svc.slices.all() {
		if ps.get(pn) != nil {
			n++
		}
	}
	return n
}

// merge combines the lists every slice of the service has for port pn. A
// port served by one slice shares that slice's list.
func (svc *serviceSlices) merge(pn servicemodel.PortName) []*Endpoint {
	var only, all []*Endpoint
	n := 0
	for _, ps := range svc.slices.all() {
		list := ps.get(pn)
		if len(list) == 0 {
			continue
		}
		switch n++; n {
		case 1:
			only = list
			continue
		case 2:
			all = append(all, only...)
		}
		all = append(all, list...)
	}
	if n <= 1 {
		return only
	}
	return normalizeList(all)
}

// patch returns a new sorted list: old with the winners at addrs (sorted)
// of port pn replacing, adding or (nil) removing entries, and records the
// stale endpoints.
func (ch *Changes) patch(pn servicemodel.PortName, old []*Endpoint, addrs []netip.AddrPort, dirty map[portAddr]*Endpoint) []*Endpoint {
	tracksStale := pn.Protocol == v1.ProtocolUDP || pn.Protocol == v1.ProtocolSCTP
	out := make([]*Endpoint, 0, len(old)+len(addrs))
	i := 0
	for _, a := range addrs {
		for i < len(old) && old[i].Addr.Compare(a) < 0 {
			out = append(out, old[i])
			i++
		}
		var was *Endpoint
		if i < len(old) && old[i].Addr == a {
			was = old[i]
			i++
		}
		is := dirty[portAddr{pn, a}]
		if is != nil {
			out = append(out, is)
		}
		if tracksStale && stopsServing(was, is) {
			ch.Stale = append(ch.Stale, StaleEndpoint{Port: pn, Addr: a})
		}
	}
	return append(out, old[i:]...)
}

// stale records the UDP or SCTP endpoints of port pn that serve in the
// sorted list old and not in cur.
func (ch *Changes) stale(pn servicemodel.PortName, old, cur []*Endpoint) {
	if pn.Protocol != v1.ProtocolUDP && pn.Protocol != v1.ProtocolSCTP {
		return
	}
	j := 0
	for _, was := range old {
		for j < len(cur) && cur[j].Addr.Compare(was.Addr) < 0 {
			j++
		}
		var is *Endpoint
		if j < len(cur) && cur[j].Addr == was.Addr {
			is = cur[j]
		}
		if stopsServing(was, is) {
			ch.Stale = append(ch.Stale, StaleEndpoint{Port: pn, Addr: was.Addr})
		}
	}
}

// stopsServing reports whether an endpoint that was (was nil: was not
// there) serving no longer is.
func stopsServing(was, is *Endpoint) bool {
	return was != nil && was.Serving && (is == nil || !is.Serving)
}

package nftables

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// sharedDiff is what a diffPlan learnt of the shared chains and maps.
type sharedDiff struct {
	// Shared maps: to rewrite whole (missing, suspect, or holding what
	// the Dataplane did not write); listed, whose elements are diffed one
	// by one instead.
	dirty, listed [sharedMapCount]bool
	// wins are the shared endpoints of prog's winning claims, by map and
	// destination; nil until needed (winsOf): a Reconcile of a table that
	// is right needs none.
	wins *[sharedMapCount][]*sharedDef
}

// winsOf is x.shared.wins, computed on first use.
func (x *differ) winsOf(i int) []*sharedDef {
	if x.shared.wins == nil {
		x.shared.wins = sharedOf(x.prog)
	}
	return x.shared.wins[i]
}

// sharedOf groups the shared endpoints of p's winning service-ips claims
// by map, each sorted by destination.
func sharedOf(p *programmed) *[sharedMapCount][]*sharedDef {
	var out [sharedMapCount][]*sharedDef
	for k, c := range p.winners {
		if c.shared != nil && k.set == mapServiceIPs {
			out[c.shared.shard] = append(out[c.shared.shard], c.shared)
		}
	}
	for i := range out {
		slices.SortFunc(out[i], func(a, b *sharedDef) int { return strings.Compare(a.dest, b.dest) })
	}
	return &out
}

// sharedChains diffs the shared chains prog's claims go to.
func (x *differ) sharedChains() {
	names := make([]string, 0, len(x.prog.sharedUsers))
	for k := range x.prog.sharedUsers {
		names = append(names, sharedChainName(k.shard, k.n))
	}
	slices.Sort(names)
	x.prog.sharedLive = make(map[string]bool, len(names))
	for _, name := range names {
		shard, n, _ := sharedChainOf(name)
		c := x.d.sharedChain(shard, n)
		x.chain(&c, nil)
		x.prog.sharedLive[name] = true
	}
}

// sharedMaps adds the shared maps missing and judges which to rewrite
// whole: those a rejected transaction wrote to, and those the Dataplane
// did not know it had.
func (x *differ) sharedMaps() {
	s := &x.shared
	for i := range sharedMapCount {
		name := sharedMapName(i)
		_, s.listed[i] = x.k.elems[name]
		used := x.prog.mapUsers[i] > 0
		x.prog.sharedDeclared[i] = used
		if !used {
			continue
		}
		switch {
		case !x.k.maps[name]:
			x.p.add(x.d.sharedMap(i))
			if x.tracking {
				x.note("map %s: missing", name)
			}
			s.dirty[i] = true
		case x.d.suspect[mapCount+i], x.d.prog == nil || !x.d.prog.sharedDeclared[i]:
			s.dirty[i] = true
		}
		s.dirty[i] = s.dirty[i] && !s.listed[i]
	}
}

// flushShared flushes the shared maps to rewrite whole that the table
// has, once the chains are written.
func (x *differ) flushShared() {
	for i := range sharedMapCount {
		if name := sharedMapName(i); x.shared.dirty[i] && x.k.maps[name] {
			x.p.flush(&knftables.Map{Name: name})
			if x.tracking {
				x.note("map %s: rewritten", name)
			}
		}
	}
}

// deleteShared diffs the shared maps' elements: a listed map against its
// listing, any other (unless rewritten whole) against what the last sync
// wrote to it. Deletions go to p, additions to x.elemAdds.
func (x *differ) deleteShared() {
	var old *[sharedMapCount][]*sharedDef
	if x.d.prog != nil && x.d.prog != x.prog {
		old = sharedOf(x.d.prog)
	}
	for i := range sharedMapCount {
		switch {
		case x.shared.listed[i]:
			x.listedShared(i)
		case x.shared.dirty[i] || old == nil:
		default:
			x.p.ops, x.elemAdds = diffShared(x.p.ops, x.elemAdds, old[i], x.winsOf(i))
		}
	}
}

// diffShared appends the element changes from the destinations of was to
// those of is, both sorted by destination.
func diffShared(dels, adds []op, was, is []*sharedDef) ([]op, []op) {
	for len(was) > 0 || len(is) > 0 {
		var a, b *sharedDef
		switch {
		case len(is) == 0 || len(was) > 0 && was[0].dest < is[0].dest:
			a, was = was[0], was[1:]
		case len(was) == 0 || is[0].dest < was[0].dest:
			b, is = is[0], is[1:]
		default:
			a, b, was, is = was[0], is[0], was[1:], is[1:]
		}
		if !sameShared(a, b) {
			dels, adds = sharedChanges(dels, adds, a, b)
		}
	}
	return dels, adds
}

// listedShared diffs listed shared map i with the elements prog's winners
// want in it.
func (x *differ) listedShared(i int) {
	name := sharedMapName(i)
	have := x.k.elems[name]
	if len(have) == 0 {
		// Listed empty (a table someone flushed, or a read-back that
		// lists no elements): every endpoint, many to an operation.
		for _, s := range x.winsOf(i) {
			x.elemAdds = append(x.elemAdds, allShared(verbAdd, s))
		}
		return
	}
	// A right map, the common case, is checked without a string or an
	// operation per element: only a listed element that is not wanted
	// needs the map of what is.
	var key []byte
	matched := 0
	for _, s := range x.winsOf(i) {
		for j, ep := range s.eps {
			key = strconv.AppendInt(append(append(key[:0], s.dest...), " . "...), int64(j), 10)
			if v, ok := have[string(key)]; ok && v == ep {
				matched++
			} else {
				x.elemAdds = append(x.elemAdds, sharedElement(verbAdd, s, j))
			}
		}
	}
	if matched == len(have) {
		return
	}
	want := make(map[string]string, len(have))
	for _, s := range x.winsOf(i) {
		for j, ep := range s.eps {
			want[s.key(j)] = ep
		}
	}
	for _, key := range slices.Sorted(maps.Keys(have)) {
		if v, ok := want[key]; !ok || v != have[key] {
			x.p.ops = append(x.p.ops, op{Verb: verbDelete, Obj: &knftables.Element{Map: name, Key: []string{key}, Value: []string{have[key]}}})
			if x.tracking {
				x.note("map %s: unexpected element %s : %s", name, key, have[key])
			}
		}
	}
}

// addShared adds every element of the shared maps rewritten whole.
func (x *differ) addShared() {
	for i := range sharedMapCount {
		if x.shared.dirty[i] {
			for _, s := range x.winsOf(i) {
				x.p.ops = append(x.p.ops, allShared(verbAdd, s))
			}
		}
	}
}

// removeShared deletes the shared maps the table has and prog does not
// use, once the chains that used them are flushed.
func (x *differ) removeShared() {
	for _, name := range slices.Sorted(maps.Keys(x.k.maps)) {
		if i, ok := sharedIndex(name); ok && x.prog.mapUsers[i] == 0 {
			x.p.delete(&knftables.Map{Name: name})
		}
	}
}

package nftables

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// diffPlan adds to p the operations that make the per-service objects of
// table k those of prog, describing each in drift when it is not nil.
func (d *Dataplane) diffPlan(p *plan, prog *programmed, k *kernelTable, drift *[]string) {
	x := &differ{d: d, p: p, prog: prog, k: k, drift: drift, tracking: drift != nil}
	x.names = prog.names
	if x.names == nil {
		x.names = make([]types.NamespacedName, 0, len(prog.services))
		for nn := range prog.services {
			x.names = append(x.names, nn)
		}
		slices.SortFunc(x.names, servicemodel.CompareNames)
	}
	x.want = make(map[string]bool, prog.chains)
	if drift == nil && len(k.chains) == 0 {
		// A cold table gets every chain and rule: room for them at once.
		// A check for drift, or a warm table, writes few.
		x.chainOps = make([]op, 0, 2*prog.chains+prog.rules)
	}
	x.fresh = make(map[string]bool, max(0, prog.chains-len(k.chains)))
	for i := range mapCount {
		_, x.listed[i] = k.elems[shardName(i)]
	}
	// Sorting the fixed sets' elements takes as long as the rest up to
	// adding them, which only reads prog: it runs beside, when it may.
	winners := make(chan []setKeys, 1)
	if d.workers > 1 {
		go func() { winners <- prog.sortedWinners() }()
	} else {
		winners <- prog.sortedWinners()
	}
	for _, nn := range x.names {
		var old *rendering
		if d.prog != nil {
			old = d.prog.services[nn]
		}
		x.service(prog.services[nn], old)
	}
	x.sharedChains()
	x.maps()
	x.deleteElements()
	x.addElements(<-winners)
	x.removeStale()
}

// differ is one diffPlan under way: what it learnt of the table so far.
type differ struct {
	d    *Dataplane
	p    *plan
	prog *programmed
	k    *kernelTable
	// tracking is set when drift collects descriptions. Callers test it
	// before they call note: boxing its arguments would cost a full sync
	// an allocation per element.
	tracking bool
	drift    *[]string
	// names are prog's services, sorted.
	names []types.NamespacedName
	// want holds the chains and sets prog has.
	want map[string]bool
	// chainOps are the chain writes, added to p once the maps they refer
	// to exist.
	chainOps []op
	// Endpoint maps: used by some chain; to rewrite whole because a chain
	// of theirs is rewritten (its elements may be anything); listed, whose
	// elements are diffed one by one instead.
	used, dirty, listed [mapCount]bool
	// fresh holds the new DNAT chains, whose elements are all added.
	fresh map[string]bool
	// moved are the endpoints of DNAT chains the table holds as the last
	// sync wrote them, before and after: only the elements that differ
	// are written.
	moved [][2]*dnatDef
	// elemAdds are the endpoint map elements deleteElements found to add.
	elemAdds []op
	slab     slab
	shared   sharedDiff
}

func (x *differ) note(format string, args ...any) {
	*x.drift = append(*x.drift, fmt.Sprintf(format, args...))
}

// service diffs one service's affinity sets and chains; old is its
// rendering as the last sync programmed it, nil if none.
func (x *differ) service(r, old *rendering) {
	for _, s := range r.sets {
		if !x.want[s.name] && !x.k.sets[s.name] {
			x.p.ops = append(x.p.ops, op{Verb: verbAdd, Obj: x.d.affinitySetObj(s)})
			if x.tracking {
				x.note("set %s: missing", s.name)
			}
		}
		x.want[s.name] = true
	}
	for i := range r.chains {
		x.chain(&r.chains[i], old)
	}
}

// chain rewrites c unless the table holds it as prog has it.
func (x *differ) chain(c *chainDef, old *rendering) {
	x.want[c.name] = true
	have, exists := x.k.chains[c.name]
	if c.dnat != nil {
		x.used[c.dnat.shard] = true
	}
	if exists && have.rules == len(c.rules) && (len(c.rules) == 0 || have.comment == c.sig) {
		if c.dnat != nil && !x.listed[c.dnat.shard] {
			x.remembered(c, old)
		}
		return
	}
	if c.dnat != nil && !x.listed[c.dnat.shard] {
		// A chain the table has is not right: its elements are
		// unknown. A new chain's slot is one no chain of the
		// table holds, which has none.
		if exists {
			x.dirty[c.dnat.shard] = true
		} else {
			x.fresh[c.name] = true
		}
	}
	if exists && have.rules > 0 {
		x.chainOps = append(x.chainOps, op{Verb: verbFlush, Obj: x.slab.chain(c.name)})
		if x.tracking {
			x.note("chain %s: %d rules, want %d", c.name, have.rules, len(c.rules))
		}
	} else {
		x.chainOps = append(x.chainOps, op{Verb: verbAdd, Obj: x.slab.chain(c.name)})
		switch {
		case !x.tracking:
		case !exists:
			x.note("chain %s: missing", c.name)
		default:
			x.note("chain %s: empty, want %d rules", c.name, len(c.rules))
		}
	}
	delete(x.d.stale, c.name)
	x.chainOps = appendRules(x.chainOps, c, &x.slab)
}

// remembered judges the elements of a DNAT chain whose rule the table
// holds, from what the last sync wrote for it (in old): their differences
// are written, and a chain it did not write makes its map rewritten.
func (x *differ) remembered(c *chainDef, old *rendering) {
	var o *dnatDef
	if old != nil {
		if j := slices.IndexFunc(old.chains, func(oc chainDef) bool { return oc.name == c.name }); j >= 0 {
			o = old.chains[j].dnat
		}
	}
	switch {
	case o == nil || o.shard != c.dnat.shard || o.slot != c.dnat.slot:
		x.dirty[c.dnat.shard] = true
	case !slices.Equal(o.eps, c.dnat.eps):
		x.moved = append(x.moved, [2]*dnatDef{o, c.dnat})
	}
}

// maps adds the endpoint maps missing, then the chain writes, then the
// flushes of the maps to rewrite whole.
func (x *differ) maps() {
	for name, has := range x.k.chains {
		if !x.want[name] && has.rules > 0 {
			// A listed map's elements of this chain are deleted as
			// unexpected.
			_, hasSlot := slotOfSig(has.comment)
			if i, ok := shardOf(name, strings.ToLower(string(portOfChain(name).Protocol))); ok && hasSlot {
				x.dirty[i] = true
			}
		}
	}
	for i := range mapCount {
		x.prog.declared[i] = x.used[i]
		if !x.used[i] {
			continue
		}
		switch name := shardName(i); {
		case !x.k.maps[name]:
			x.p.add(x.d.shardMap(i))
			if x.tracking {
				x.note("map %s: missing", name)
			}
			x.dirty[i] = true
		case x.d.suspect[i]:
			x.dirty[i] = true
		}
	}
	for i := range mapCount {
		// A listed map is diffed element by element, whatever its
		// chains were.
		x.dirty[i] = x.dirty[i] && !x.listed[i]
	}
	x.sharedMaps()
	x.p.ops = append(x.p.ops, x.chainOps...)
	// A rewritten map is flushed after its chains are rewritten and
	// before its elements are added back.
	for i := range mapCount {
		if x.dirty[i] && x.k.maps[shardName(i)] {
			x.p.flush(&knftables.Map{Name: shardName(i)})
			if x.tracking {
				x.note("map %s: rewritten", shardName(i))
			}
		}
	}
	x.flushShared()
}

// deleteElements deletes the elements the table holds and prog does not,
// or with another value: first, as nft refuses to add an existing map key.
func (x *differ) deleteElements() {
	for _, sd := range x.d.sets() {
		have := x.k.elems[sd.name]
		for _, key := range slices.Sorted(maps.Keys(have)) {
			ek := elemKey{sd.name, key}
			c, ok := x.prog.winner(ek)
			if ok && x.k.holds(have, sd.name, key, c) {
				continue
			}
			x.p.ops = append(x.p.ops, op{Verb: verbDelete, Obj: element(ek, claim{value: have[key]})})
			switch {
			case !x.tracking:
			case !ok:
				x.note("%s: unexpected element %s", sd.name, key)
			case c.value != have[key]:
				x.note("%s: element %s is %q, want %q", sd.name, key, have[key], c.value)
			default:
				x.note("%s: element %s has comment %q, want %q", sd.name, key, x.k.comment(sd.name, key), c.comment)
			}
		}
	}
	for _, m := range x.moved {
		if !x.dirty[m[1].shard] {
			x.p.ops, x.elemAdds = endpointChanges(x.p.ops, x.elemAdds, m[0], m[1])
		}
	}
	// The chains of the listed maps by map and slot; a map listed empty
	// (after a failure, every map) takes all its chains' elements.
	var placed []*dnatDef
	for _, nn := range x.names {
		for _, c := range x.prog.services[nn].chains {
			if n := c.dnat; n != nil && x.listed[n.shard] {
				placed = append(placed, n)
			}
		}
	}
	slices.SortFunc(placed, func(a, b *dnatDef) int { return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.slot, b.slot)) })
	for i := range mapCount {
		if !x.listed[i] {
			continue
		}
		j := 0
		for j < len(placed) && placed[j].shard == i {
			j++
		}
		if len(x.k.elems[shardName(i)]) == 0 {
			for _, n := range placed[:j] {
				x.elemAdds = append(x.elemAdds, allElements(verbAdd, n))
			}
		} else {
			slots := make(map[int32]*dnatDef, j)
			for _, n := range placed[:j] {
				slots[n.slot] = n
			}
			x.listedElements(i, slots)
		}
		placed = placed[j:]
	}
	x.deleteShared()
}

// listedElements diffs listed endpoint map i with the elements that
// prog's chains, by slot, want in it: the unexpected elements, and those of
// another value, are deleted, the missing ones (and those) added.
func (x *differ) listedElements(i int, slots map[int32]*dnatDef) {
	name := shardName(i)
	have := x.k.elems[name]
	for _, key := range slices.Sorted(maps.Keys(have)) {
		if n, j := slotOfKey(slots, key); n == nil || have[key] != n.eps[j] {
			x.p.ops = append(x.p.ops, op{Verb: verbDelete, Obj: &knftables.Element{Map: name, Key: []string{key}, Value: []string{have[key]}}})
			if x.tracking {
				x.note("map %s: unexpected element %s : %s", name, key, have[key])
			}
		}
	}
	for _, s := range slices.Sorted(maps.Keys(slots)) {
		n := slots[s]
		if len(have) == 0 {
			x.elemAdds = append(x.elemAdds, allElements(verbAdd, n))
			continue
		}
		for j, ep := range n.eps {
			if have[n.key(j)] != ep {
				x.elemAdds = appendElements(x.elemAdds, verbAdd, n, j, j+1)
			}
		}
	}
}

// slotOfKey finds the chain whose slot holds endpoint map key, and the
// endpoint's index in it; nil when no chain of slots has that key.
func slotOfKey(slots map[int32]*dnatDef, key string) (*dnatDef, int) {
	k, err := strconv.ParseInt(key, 10, 64)
	if err != nil || k < 0 {
		return nil, 0
	}
	n := slots[int32(k>>slotBits)]
	j := int(k & (1<<slotBits - 1))
	if n == nil || j >= len(n.eps) {
		return nil, 0
	}
	return n, j
}

// addElements adds the claimed elements the table lacks, and the
// elements of the endpoint maps rewritten whole and of the new chains.
func (x *differ) addElements(sorted []setKeys) {
	for _, b := range sorted {
		x.p.ops = x.appendMissing(x.p.ops, b.set, b.keys)
	}
	// By map and key: the kernel handles a run of elements of one map as
	// one, which makes loading a third faster.
	var adds []*dnatDef
	for _, nn := range x.names {
		for _, c := range x.prog.services[nn].chains {
			if n := c.dnat; n != nil && (x.dirty[n.shard] || x.fresh[c.name]) {
				adds = append(adds, n)
			}
		}
	}
	slices.SortFunc(adds, func(a, b *dnatDef) int { return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.slot, b.slot)) })
	for _, n := range adds {
		x.p.ops = append(x.p.ops, allElements(verbAdd, n))
	}
	x.addShared()
	x.p.ops = append(x.p.ops, x.elemAdds...)
}

// removeStale flushes the service chains prog does not have, leaving them
// for a later sync to delete, and deletes the affinity sets and endpoint
// maps it does not use.
func (x *differ) removeStale() {
	// Stale chains someone else removed need no deleting.
	for name := range x.d.stale {
		if _, ok := x.k.chains[name]; !ok {
			delete(x.d.stale, name)
		}
	}
	now := x.d.clock.Now()
	var unwanted []string
	for name := range x.k.chains {
		if (isServiceChain(name) || isSharedChain(name)) && !x.want[name] {
			unwanted = append(unwanted, name)
		}
	}
	slices.Sort(unwanted)
	for _, name := range unwanted {
		if x.k.chains[name].rules > 0 {
			x.p.flush(&knftables.Chain{Name: name})
			if x.tracking {
				x.note("chain %s: unexpected", name)
			}
		}
		if _, ok := x.d.stale[name]; !ok {
			x.d.stale[name] = now
		}
	}
	for _, name := range slices.Sorted(maps.Keys(x.k.sets)) {
		if strings.HasPrefix(name, prefixAffinity) && !x.want[name] {
			x.p.delete(&knftables.Set{Name: name})
			if x.tracking {
				x.note("set %s: unexpected", name)
			}
		}
	}
	// Endpoint maps no chain uses any more, once the rules that did are
	// flushed.
	for _, name := range slices.Sorted(maps.Keys(x.k.maps)) {
		if i, ok := shardIndex(name); ok && !x.used[i] {
			x.p.delete(&knftables.Map{Name: name})
		}
	}
	x.removeShared()
}

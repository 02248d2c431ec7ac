package nftables

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/knftables"
)

func itoa(n int) string { return strconv.Itoa(n) }

// Sync implements dataplane.Dataplane. It first deletes, in a transaction
// of their own, chains that went stale at least StaleChainDelay ago. Then
// it programs s: when it knows the table (the last sync succeeded, the
// fixed rules are unchanged, State.ChangedSince can tell and the full sync
// period has not run out) with one transaction of the differences of the
// changed services only; otherwise it reads the table back and converges
// it with the operations that differ (see the package documentation).
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := d.checkState(s); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleteStale(ctx)

	st := d.static(s)
	changed, ok := s.ChangedFrom(d.last)
	if s == d.last {
		// The State programmed last: nothing changed.
		changed, ok = nil, true
	}
	full := d.prog == nil || !ok || d.prog.static != st.sig ||
		d.cfg.FullSyncPeriod > 0 && d.clock.Since(d.lastFull) >= d.cfg.FullSyncPeriod
	var err error
	if full {
		err = d.syncFull(ctx, s, st)
	} else {
		err = d.syncPartial(ctx, s, st, changed)
	}
	if err != nil {
		if full {
			d.metrics.fullFailures.Inc()
		} else {
			d.metrics.partialFailures.Inc()
		}
		// The stale chains were maybe never flushed, and what the table
		// holds is unknown: the next sync reads it back.
		d.forget()
		d.log.Error(err, "Sync failed; the next one is full", "full", full)
		return err
	}
	d.st, d.last = st, s
	d.metrics.operations.Observe(float64(d.stats.Operations))
	d.metrics.elements.Set(float64(len(d.prog.winners) + d.prog.dnatElems + d.prog.sharedElems + len(st.nodePortIPs)))
	d.metrics.chains.Set(float64(d.prog.chains + len(d.prog.sharedLive) + len(baseChains) + len(staticChains)))
	staticRules := 0
	for _, r := range st.rules {
		staticRules += len(r)
	}
	d.metrics.rules.Set(float64(d.prog.rules + len(d.prog.sharedLive) + staticRules))
	d.log.V(2).Info("Synced", "full", full, "services", d.stats.Services, "operations", d.stats.Operations, "transactions", d.stats.Transactions)
	return nil
}

// syncPartial writes the differences of the changed services.
func (d *Dataplane) syncPartial(ctx context.Context, s *dataplane.State, st *static, changed sets.Set[types.NamespacedName]) error {
	skipped := false
	r := d.newRenderer(s, func(reason string, kv ...any) {
		skipped = true
		d.skip(reason, kv...)
	})
	w := newWriter(d)
	names := make([]types.NamespacedName, 0, len(changed))
	for nn := range changed {
		names = append(names, nn)
	}
	slices.SortFunc(names, servicemodel.CompareNames)
	var reskip map[types.NamespacedName]bool
	if d.cache != nil {
		reskip = d.cache.reskip
	}
	for _, nn := range names {
		skipped = false
		w.service(nn, r.service(s.Services.Service(nn)))
		if skipped {
			if reskip == nil {
				reskip = map[types.NamespacedName]bool{}
			}
			reskip[nn] = true
		} else {
			delete(reskip, nn)
		}
	}
	// What the writer rendered is what the table would hold after s
	// whether or not the kernel takes it.
	d.remember(s, st, d.prog, reskip)
	p := w.plan()
	txs, bytes, err := d.run(ctx, p, -1)
	if err != nil {
		return err
	}
	d.stats = SyncStats{SyncReport: dataplane.SyncReport{Services: len(names), Bytes: bytes}, Operations: p.count(), Transactions: txs}
	return nil
}

// writer collects the operations that change what d.prog says the table
// holds into what a new rendering of some services says, updating d.prog
// (and d.stale) as it goes.
type writer struct {
	d    *Dataplane
	prog *programmed
	now  time.Time
	// In plan order: affinity sets to add, chain writes, stale chains to
	// flush, affinity sets to delete.
	addSets, chains, flushes, delSets []op
	// Endpoint map elements to delete and to add.
	elemDels, elemAdds []op
	// touched holds the winner of every element key a service changed, as
	// it was before.
	touched map[elemKey]prior
	slab    slab
}

type prior struct {
	claim
	present bool
}

func newWriter(d *Dataplane) *writer {
	return &writer{d: d, prog: d.prog, now: d.clock.Now(), touched: map[elemKey]prior{}}
}

func (w *writer) touch(k elemKey) {
	if _, ok := w.touched[k]; !ok {
		v, ok := w.prog.winner(k)
		w.touched[k] = prior{v, ok}
	}
}

// service moves service nn from its programmed rendering to r (nil: none).
func (w *writer) service(nn types.NamespacedName, r *rendering) {
	old := w.prog.services[nn]
	if old == nil && r == nil {
		return
	}
	var oldChains map[string]*chainDef
	var oldSets map[string]bool
	if old != nil {
		oldChains = make(map[string]*chainDef, len(old.chains))
		for i := range old.chains {
			oldChains[old.chains[i].name] = &old.chains[i]
		}
		oldSets = make(map[string]bool, len(old.sets))
		for _, s := range old.sets {
			oldSets[s.name] = true
		}
		for _, e := range old.elems {
			w.touch(e.elemKey)
		}
	}
	var keep map[string]bool
	if r != nil {
		w.d.place(w.prog, r, old)
		keep = make(map[string]bool, len(r.chains)+len(r.sets))
		for _, s := range r.sets {
			keep[s.name] = true
			if !oldSets[s.name] {
				w.addSets = append(w.addSets, op{Verb: verbAdd, Obj: w.d.affinitySetObj(s)})
			}
		}
		for i, c := range r.chains {
			keep[c.name] = true
			oc := oldChains[c.name]
			if oc != nil && oc.sig == c.sig {
				// Same rules at the same slot: at most elements change.
				if c.dnat != nil {
					w.dnatElems(oc.dnat, c.dnat)
				}
				continue
			}
			if c.dnat != nil && !w.prog.declared[c.dnat.shard] {
				w.addSets = append(w.addSets, op{Verb: verbAdd, Obj: w.d.shardMap(c.dnat.shard)})
				w.prog.declared[c.dnat.shard] = true
			}
			var oldDNAT *dnatDef
			if oc != nil {
				oldDNAT = oc.dnat
				w.chains = append(w.chains, op{Verb: verbFlush, Obj: w.slab.chain(c.name)})
			} else {
				delete(w.d.stale, c.name)
				w.chains = append(w.chains, op{Verb: verbAdd, Obj: w.slab.chain(c.name)})
			}
			w.dnatElems(oldDNAT, c.dnat)
			w.chains = appendRules(w.chains, &r.chains[i], &w.slab)
		}
		for _, e := range r.elems {
			w.touch(e.elemKey)
			if e.shared != nil {
				w.ensureShared(e.shared)
			}
		}
	}
	if old != nil {
		for _, c := range old.chains {
			if !keep[c.name] {
				w.flushes = append(w.flushes, op{Verb: verbFlush, Obj: &knftables.Chain{Name: c.name}})
				w.d.stale[c.name] = w.now
				w.dnatElems(c.dnat, nil)
			}
		}
		for _, s := range old.sets {
			if !keep[s.name] {
				w.delSets = append(w.delSets, op{Verb: verbDelete, Obj: &knftables.Set{Name: s.name}})
			}
		}
	}
	w.prog.setService(nn, r)
}

// ensureShared adds the shared map and chain s goes to, unless the table
// has them.
func (w *writer) ensureShared(s *sharedDef) {
	if !w.prog.sharedDeclared[s.shard] {
		w.addSets = append(w.addSets, op{Verb: verbAdd, Obj: w.d.sharedMap(s.shard)})
		w.prog.sharedDeclared[s.shard] = true
	}
	name := s.chain()
	if w.prog.sharedLive[name] {
		return
	}
	c := w.d.sharedChain(s.shard, len(s.eps))
	delete(w.d.stale, name)
	w.chains = append(w.chains, op{Verb: verbAdd, Obj: w.slab.chain(name)})
	w.chains = appendRules(w.chains, &c, &w.slab)
	w.prog.sharedLive[name] = true
}

// unusedShared flushes the shared chains no claim goes to any more, for a
// later sync to delete, and deletes the shared maps none uses.
func (w *writer) unusedShared() (flushes, deletes []op) {
	var names []string
	for name := range w.prog.sharedLive {
		if shard, n, _ := sharedChainOf(name); w.prog.sharedUsers[sharedKey{shard, n}] == 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		flushes = append(flushes, op{Verb: verbFlush, Obj: &knftables.Chain{Name: name}})
		w.d.stale[name] = w.now
		delete(w.prog.sharedLive, name)
	}
	for i := range sharedMapCount {
		if w.prog.sharedDeclared[i] && w.prog.mapUsers[i] == 0 {
			deletes = append(deletes, op{Verb: verbDelete, Obj: &knftables.Map{Name: sharedMapName(i)}})
			w.prog.sharedDeclared[i] = false
		}
	}
	return flushes, deletes
}

// dnatElems writes the endpoint map elements that change when a chain's
// endpoints go from old to new.
func (w *writer) dnatElems(old, new *dnatDef) {
	w.elemDels, w.elemAdds = endpointChanges(w.elemDels, w.elemAdds, old, new)
}

// endpointChanges appends to dels and adds the endpoint map elements that
// change when a chain's endpoints go from old to new (either nil: none):
// at the same slot only the keys whose endpoint differs.
func endpointChanges(dels, adds []op, old, new *dnatDef) ([]op, []op) {
	same := old != nil && new != nil && old.shard == new.shard && old.slot == new.slot
	if !same {
		if old != nil && len(old.eps) > 0 {
			dels = append(dels, allElements(verbDelete, old))
		}
		if new != nil && len(new.eps) > 0 {
			adds = append(adds, allElements(verbAdd, new))
		}
		return dels, adds
	}
	for i, ep := range old.eps {
		if i >= len(new.eps) || new.eps[i] != ep {
			dels = appendElements(dels, verbDelete, old, i, i+1)
		}
	}
	for i, ep := range new.eps {
		if i >= len(old.eps) || old.eps[i] != ep {
			adds = appendElements(adds, verbAdd, new, i, i+1)
		}
	}
	return dels, adds
}

// appendRules appends the adds of c's rules, the first commented with
// c's signature (which it points to).
func appendRules(ops []op, c *chainDef, s *slab) []op {
	for i, rule := range c.rules {
		r := s.rule(c.name, rule)
		if i == 0 {
			r.Comment = &c.sig
		}
		ops = append(ops, op{Verb: verbAdd, Obj: r})
	}
	return ops
}

func (d *Dataplane) affinitySetObj(s affinitySet) *knftables.Set {
	return &knftables.Set{Name: s.name, Type: d.addrT, Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(time.Duration(s.timeout) * time.Second)}
}

// plan orders the collected operations: sets and chains before the
// elements that refer to them, element deletions before additions (nft
// refuses to add a map key that exists), and the chains and sets nothing
// refers to any more last.
func (w *writer) plan() *plan {
	p := &plan{ops: make([]op, 0, len(w.addSets)+len(w.chains)+len(w.touched)+len(w.elemDels)+len(w.elemAdds)+len(w.flushes)+len(w.delSets))}
	p.ops = append(p.ops, w.addSets...)
	p.ops = append(p.ops, w.chains...)
	keys := make([]elemKey, 0, len(w.touched))
	for k := range w.touched {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareElemKeys)
	var adds []op
	for _, k := range keys {
		before := w.touched[k]
		v, ok := w.prog.winner(k)
		var was, is *sharedDef
		if before.present {
			was = before.shared
		}
		if ok {
			is = v.shared
		}
		if !sameShared(was, is) {
			w.elemDels, w.elemAdds = sharedChanges(w.elemDels, w.elemAdds, was, is)
		}
		if before.present == ok && before.value == v.value && before.comment == v.comment {
			continue
		}
		if before.present {
			p.ops = append(p.ops, op{Verb: verbDelete, Obj: element(k, before.claim)})
		}
		if ok {
			adds = append(adds, op{Verb: verbAdd, Obj: element(k, v)})
		}
	}
	p.ops = append(p.ops, w.elemDels...)
	p.ops = append(p.ops, adds...)
	p.ops = append(p.ops, w.elemAdds...)
	p.ops = append(p.ops, w.flushes...)
	sharedFlushes, sharedDeletes := w.unusedShared()
	p.ops = append(p.ops, sharedFlushes...)
	p.ops = append(p.ops, w.delSets...)
	p.ops = append(p.ops, sharedDeletes...)
	// Endpoint maps no chain uses any more go, as a fresh table would not
	// have them.
	for i := range mapCount {
		if w.prog.declared[i] && !w.prog.slots.inUse(i) {
			p.delete(&knftables.Map{Name: shardName(i)})
			w.prog.declared[i] = false
		}
	}
	return p
}

func compareElemKeys(a, b elemKey) int {
	return cmp.Or(strings.Compare(a.set, b.set), strings.Compare(a.key, b.key))
}

// isMap reports whether a fixed set name is a verdict map.
func isMap(name string) bool {
	switch name {
	case mapServiceIPs, mapServiceNodePorts, mapFirewallIPs, mapNoEndpointServices, mapNoEndpointNodePort:
		return true
	}
	return false
}

// appendMissing appends the add of the elements of set, of sorted keys
// (which it reuses), that the table lacks or holds otherwise
// (kernelTable.holds): one nftnl.Elements, whose strings share their
// allocations, as a cold start writes tens of thousands.
func (x *differ) appendMissing(ops []op, set string, keys []string) []op {
	have := x.k.elems[set]
	var values, comments []string
	if isMap(set) {
		values = make([]string, 0, len(keys))
	}
	n, commented := 0, false
	for _, key := range keys {
		c := x.prog.winners[elemKey{set, key}]
		if x.k.holds(have, set, key, c) {
			continue
		}
		if _, ok := have[key]; x.tracking && !ok {
			x.note("%s: element %s missing", set, key)
		}
		keys[n] = key
		n++
		if values != nil {
			values = append(values, c.value)
		}
		if c.comment != "" && !commented {
			comments, commented = make([]string, n-1, len(keys)), true
		}
		if commented {
			comments = append(comments, c.comment)
		}
	}
	if n == 0 {
		return ops
	}
	return append(ops, op{Verb: verbAdd, Elems: &nftnl.Elements{Set: set, Keys: keys[:n:n], Values: values, Comments: comments}})
}

func element(k elemKey, c claim) *knftables.Element {
	e := &knftables.Element{Key: []string{k.key}}
	if c.comment != "" {
		e.Comment = knftables.PtrTo(c.comment)
	}
	if isMap(k.set) {
		e.Map, e.Value = k.set, []string{c.value}
	} else {
		e.Set = k.set
	}
	return e
}

// deleteStale deletes, in a transaction of their own, the stale chains
// whose delay ran out. A failure is counted and logged and makes the next
// sync full, which finds them again.
func (d *Dataplane) deleteStale(ctx context.Context) {
	now := d.clock.Now()
	var names []string
	for name, since := range d.stale {
		if now.Sub(since) >= d.cfg.StaleChainDelay {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	p := &plan{}
	for _, name := range names {
		p.delete(&knftables.Chain{Name: name})
	}
	if _, _, err := d.run(ctx, p, -1); err != nil {
		d.metrics.cleanupFailures.Inc()
		d.log.Error(err, "Deleting stale chains failed; the next sync is full", "chains", len(names))
		d.forget()
		return
	}
	for _, name := range names {
		delete(d.stale, name)
	}
}

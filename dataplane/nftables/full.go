package nftables

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/fanout"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// kernelTable is what a listing of the table showed.
type kernelTable struct {
	exists bool
	// chains maps every chain to its rule count and first rule's comment.
	chains map[string]chainSummary
	sets   map[string]bool
	maps   map[string]bool
	// elems holds the elements of the fixed sets and maps, by set, key to
	// value.
	elems map[string]map[string]string
}

type chainSummary struct {
	rules   int
	comment string
}

// readBack lists the table: names, the rule count and first comment of
// every chain, and the elements of the fixed sets and maps. A table that
// does not exist is empty.
func (d *Dataplane) readBack(ctx context.Context) (*kernelTable, error) {
	k := &kernelTable{chains: map[string]chainSummary{}, sets: map[string]bool{}, maps: map[string]bool{}, elems: map[string]map[string]string{}}
	all, err := d.nft.ListAll(ctx)
	if notFound(err) {
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list table %s: %w", d.cfg.Table, err)
	}
	k.exists = true
	for _, c := range all["chain"] {
		k.chains[c] = chainSummary{}
	}
	for _, s := range all["set"] {
		k.sets[s] = true
	}
	for _, m := range all["map"] {
		k.maps[m] = true
	}
	rules, err := d.nft.ListRules(ctx, "")
	if err != nil && !notFound(err) {
		return nil, fmt.Errorf("list the rules of table %s: %w", d.cfg.Table, err)
	}
	for _, r := range rules {
		c := k.chains[r.Chain]
		if c.rules == 0 && r.Comment != nil {
			c.comment = *r.Comment
		}
		c.rules++
		k.chains[r.Chain] = c
	}
	lists := d.sets()
	if k.sets[setNodePortIPs] {
		lists = append(lists, setDef{name: setNodePortIPs})
	}
	for _, sd := range lists {
		typ := "set"
		if sd.isMap {
			typ = "map"
			if !k.maps[sd.name] {
				continue
			}
		} else if !k.sets[sd.name] {
			continue
		}
		elems, err := d.nft.ListElements(ctx, typ, sd.name)
		if err != nil {
			return nil, fmt.Errorf("list %s %s of table %s: %w", typ, sd.name, d.cfg.Table, err)
		}
		m := make(map[string]string, len(elems))
		for _, e := range elems {
			m[strings.Join(e.Key, " . ")] = strings.Join(e.Value, " . ")
		}
		k.elems[sd.name] = m
	}
	return k, nil
}

// notFound reports whether err says the table (or an object in it) does
// not exist, as nft or netlink say it; the netlink listing reports the
// errno only in its message.
func notFound(err error) bool {
	return err != nil && (knftables.IsNotFound(err) || errors.Is(err, syscall.ENOENT) ||
		strings.HasSuffix(err.Error(), ": "+syscall.ENOENT.Error()))
}

// syncFull renders every service, reads the table back and converges it.
func (d *Dataplane) syncFull(ctx context.Context, s *dataplane.State, st *static) error {
	k, err := d.readBack(ctx)
	if err != nil {
		// Without a listing, start from an empty table: this forgets
		// affinities, but converges.
		d.log.Error(err, "Reading the table back failed; rewriting it from scratch")
		k = &kernelTable{}
	}
	prog := d.renderAll(s, st, k)
	p := d.fullPlan(prog, st, k, !d.recreated)
	if !k.exists && err != nil {
		p.ops = append([]op{{verbAdd, &knftables.Table{}}, {verbDelete, &knftables.Table{}}}, p.ops...)
	}
	max := d.cfg.MaxOperations
	txs, bytes, err := d.run(ctx, p, max)
	if err != nil {
		return err
	}
	d.prog, d.st, d.recreated, d.lastFull, d.suspect = prog, st, true, d.clock.Now(), [mapCount]bool{}
	d.stats = SyncStats{SyncReport: dataplane.SyncReport{Full: true, Services: len(prog.services), Bytes: bytes}, Operations: len(p.ops), Transactions: txs}
	return nil
}

// parallelMin is the fewest services per goroutine a full sync renders
// on several: below it, starting goroutines costs more than it saves.
const parallelMin = 256

// renderAll renders every service of s. Endpoint-map chains keep the
// slots table k has them at (their comments say), so that a full sync
// after partial ones moves nothing; the others take the lowest free slots
// in the order of their services' names, so that equal States render
// equal tables.
func (d *Dataplane) renderAll(s *dataplane.State, st *static, k *kernelTable) *programmed {
	prog := newProgrammed(s.Services.Len())
	prog.static = st.sig
	type service struct {
		nn    types.NamespacedName
		ports []*servicemodel.ServicePort
	}
	all := make([]service, 0, s.Services.Len())
	for nn, ports := range s.Services.Services() {
		all = append(all, service{nn, ports})
	}
	slices.SortFunc(all, func(a, b service) int { return servicemodel.CompareNames(a.nn, b.nn) })
	rendered := make([]*rendering, len(all))
	fanout.Map(d.workers, parallelMin, all, rendered, d.skip, func(skip fanout.Skip) func(service) *rendering {
		r := d.newRenderer(s, skip)
		return func(sv service) *rendering { return r.service(sv.ports) }
	})
	type renderedService struct {
		nn types.NamespacedName
		r  *rendering
	}
	list := make([]renderedService, 0, len(all))
	for i, sv := range all {
		if rendered[i] != nil {
			list = append(list, renderedService{sv.nn, rendered[i]})
		}
	}
	for _, sv := range list {
		for i := range sv.r.chains {
			c := &sv.r.chains[i]
			if c.dnat == nil {
				continue
			}
			if have, ok := k.chains[c.name]; ok {
				if slot, ok := slotOfSig(have.comment); ok && prog.slots.take(c.dnat.shard, slot) {
					c.dnat.slot = slot
				}
			}
		}
	}
	for _, sv := range list {
		d.place(prog, sv.r, nil)
		prog.setService(sv.nn, sv.r)
	}
	return prog
}

// fullPlan is the operations that turn table k into prog: the fixed part
// rewritten, and of the rest only what differs. Stale chains are flushed
// and left for a later sync to delete.
func (d *Dataplane) fullPlan(prog *programmed, st *static, k *kernelTable, recreate bool) *plan {
	p := &plan{ops: make([]op, 0, 64+len(prog.winners)+prog.dnatElems+2*prog.chains+prog.rules)}
	d.writeStatic(p, st, recreate)
	d.diffPlan(p, prog, k, nil)
	return p
}

// diffPlan adds to p the operations that make the per-service objects of
// table k those of prog, describing each in drift when it is not nil.
func (d *Dataplane) diffPlan(p *plan, prog *programmed, k *kernelTable, drift *[]string) {
	// Callers test tracking before they call note: boxing its arguments
	// would cost a full sync an allocation per element.
	tracking := drift != nil
	note := func(format string, args ...any) {
		*drift = append(*drift, fmt.Sprintf(format, args...))
	}

	names := make([]types.NamespacedName, 0, len(prog.services))
	for nn := range prog.services {
		names = append(names, nn)
	}
	slices.SortFunc(names, servicemodel.CompareNames)
	want := make(map[string]bool, prog.chains)
	var chainOps []op
	// Endpoint maps: used by some chain, and to rewrite whole because a
	// chain of theirs is rewritten (its elements may be anything).
	var used, dirty [mapCount]bool
	fresh := make(map[string]bool, max(0, prog.chains-len(k.chains)))
	for _, nn := range names {
		r := prog.services[nn]
		for _, s := range r.sets {
			if !want[s.name] && !k.sets[s.name] {
				p.ops = append(p.ops, op{verbAdd, d.affinitySetObj(s)})
				if tracking {
					note("set %s: missing", s.name)
				}
			}
			want[s.name] = true
		}
		for _, c := range r.chains {
			want[c.name] = true
			have, exists := k.chains[c.name]
			if c.dnat != nil {
				used[c.dnat.shard] = true
			}
			if exists && have.rules == len(c.rules) && (len(c.rules) == 0 || have.comment == c.sig) {
				continue
			}
			if c.dnat != nil {
				// A chain the table has is not right: its elements are
				// unknown. A new chain's slot is one no chain of the
				// table holds, which has none.
				if exists {
					dirty[c.dnat.shard] = true
				} else {
					fresh[c.name] = true
				}
			}
			if exists && have.rules > 0 {
				chainOps = append(chainOps, op{verbFlush, &knftables.Chain{Name: c.name}})
				if tracking {
					note("chain %s: %d rules, want %d", c.name, have.rules, len(c.rules))
				}
			} else {
				chainOps = append(chainOps, op{verbAdd, &knftables.Chain{Name: c.name}})
				switch {
				case !tracking:
				case !exists:
					note("chain %s: missing", c.name)
				default:
					note("chain %s: empty, want %d rules", c.name, len(c.rules))
				}
			}
			delete(d.stale, c.name)
			chainOps = appendRules(chainOps, c)
		}
	}
	for name, has := range k.chains {
		if !want[name] && has.rules > 0 {
			_, hasSlot := slotOfSig(has.comment)
			if i, ok := shardOf(name, strings.ToLower(string(portOfChain(name).Protocol))); ok && hasSlot {
				dirty[i] = true
			}
		}
	}
	for i := range mapCount {
		prog.declared[i] = used[i]
		if !used[i] {
			continue
		}
		switch name := shardName(i); {
		case !k.maps[name]:
			p.add(d.shardMap(i))
			if tracking {
				note("map %s: missing", name)
			}
			dirty[i] = true
		case d.suspect[i]:
			dirty[i] = true
		}
	}
	p.ops = append(p.ops, chainOps...)
	// A rewritten map is flushed after its chains are rewritten and
	// before its elements are added back.
	for i := range mapCount {
		if dirty[i] && k.maps[shardName(i)] {
			p.flush(&knftables.Map{Name: shardName(i)})
			if tracking {
				note("map %s: rewritten", shardName(i))
			}
		}
	}

	// Elements: deletions first, as nft refuses to add an existing map key.
	keys := make([]elemKey, 0, len(prog.winners))
	for k := range prog.winners {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareElemKeys)
	for _, sd := range d.sets() {
		have := k.elems[sd.name]
		for _, key := range sortedKeys(have) {
			ek := elemKey{sd.name, key}
			if c, ok := prog.winner(ek); !ok || c.value != have[key] {
				p.ops = append(p.ops, op{verbDelete, element(ek, claim{value: have[key]})})
				switch {
				case !tracking:
				case !ok:
					note("%s: unexpected element %s", sd.name, key)
				default:
					note("%s: element %s is %q, want %q", sd.name, key, have[key], c.value)
				}
			}
		}
	}
	missing := make([]elemClaim, 0, len(keys))
	for _, ek := range keys {
		c := prog.winners[ek]
		if v, ok := k.elems[ek.set][ek.key]; !ok || v != c.value {
			missing = append(missing, elemClaim{ek, c})
			if tracking && !ok {
				note("%s: element %s missing", ek.set, ek.key)
			}
		}
	}
	p.ops = appendClaimed(p.ops, missing)
	// By map and key: the kernel handles a run of elements of one map as
	// one, which makes loading a third faster.
	var adds []*dnatDef
	for _, nn := range names {
		for _, c := range prog.services[nn].chains {
			if n := c.dnat; n != nil && (dirty[n.shard] || fresh[c.name]) {
				adds = append(adds, n)
			}
		}
	}
	slices.SortFunc(adds, func(a, b *dnatDef) int { return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.slot, b.slot)) })
	for _, n := range adds {
		p.ops = appendElements(p.ops, verbAdd, n, 0, len(n.eps))
	}

	// Stale chains someone else removed need no deleting.
	for name := range d.stale {
		if _, ok := k.chains[name]; !ok {
			delete(d.stale, name)
		}
	}
	now := d.clock.Now()
	for _, name := range sortedKeys(k.chains) {
		if !isServiceChain(name) || want[name] {
			continue
		}
		if k.chains[name].rules > 0 {
			p.flush(&knftables.Chain{Name: name})
			if tracking {
				note("chain %s: unexpected", name)
			}
		}
		if _, ok := d.stale[name]; !ok {
			d.stale[name] = now
		}
	}
	for _, name := range sortedKeys(k.sets) {
		if strings.HasPrefix(name, prefixAffinity) && !want[name] {
			p.delete(&knftables.Set{Name: name})
			if tracking {
				note("set %s: unexpected", name)
			}
		}
	}
	// Endpoint maps no chain uses any more, once the rules that did are
	// flushed.
	for _, name := range sortedKeys(k.maps) {
		if i, ok := shardIndex(name); ok && !used[i] {
			p.delete(&knftables.Map{Name: name})
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Render returns the nft -f script that the first full sync of s into an
// empty table would run: deterministic, byte-identical for equal States.
// It needs no privileges and changes nothing.
func (d *Dataplane) Render(s *dataplane.State) ([]byte, error) {
	if err := d.checkState(s); err != nil {
		return nil, err
	}
	st := d.static(s)
	p := d.fullPlan(d.renderAll(s, st, &kernelTable{}), st, &kernelTable{}, false)
	return []byte(transaction(d.nft, p.ops).String()), nil
}

// Cleanup implements dataplane.Dataplane: it deletes the dataplane's table
// (only its own), and succeeds when there is none.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prog, d.stale = nil, map[string]time.Time{}
	tx := d.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := d.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables: delete table %s %s: %w", d.ipX, d.cfg.Table, err)
	}
	d.metrics.elements.Set(0)
	d.metrics.chains.Set(0)
	d.metrics.rules.Set(0)
	return nil
}

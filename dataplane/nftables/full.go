package nftables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/proxykit/proxykit/dataplane"
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
	// elems holds the elements of the fixed sets and maps, and of the
	// endpoint maps when those were listed, by set, key to value.
	elems map[string]map[string]string
	// comments holds the comments of the elements that have one: the
	// no-endpoint verdicts and shared service-ips verdicts, whose values
	// many services share, so that only the comment names theirs.
	comments map[elemKey]string
}

// comment is the comment of element key of set, "" when it has none.
func (k *kernelTable) comment(set, key string) string {
	return k.comments[elemKey{set, key}]
}

// holds reports whether k has element key of set as c writes it: its
// value and its comment. have is k.elems[set], which both callers hold
// already, sparing a lookup per element of a full sync. What does not
// hold is deleted (deleteElements) and added again (appendMissing), so
// both ask this.
func (k *kernelTable) holds(have map[string]string, set, key string, c claim) bool {
	v, ok := have[key]
	return ok && v == c.value && k.comment(set, key) == c.comment
}

type chainSummary struct {
	rules   int
	comment string
}

// readBack lists the table: names, the rule count and first comment of
// every chain, the elements of the fixed sets and maps and, with
// endpointMaps, of the endpoint maps. A table that does not exist is
// empty.
func (d *Dataplane) readBack(ctx context.Context, endpointMaps bool) (*kernelTable, error) {
	k := &kernelTable{chains: map[string]chainSummary{}, sets: map[string]bool{}, maps: map[string]bool{},
		elems: map[string]map[string]string{}, comments: map[elemKey]string{}}
	all, err := d.kernel.ListAll(ctx)
	if notFound(err) {
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list table %s: %w", d.cfg.Table, err)
	}
	k.exists = true
	lists := d.sets()
	for _, c := range all["chain"] {
		k.chains[c] = chainSummary{}
	}
	for _, s := range all["set"] {
		k.sets[s] = true
	}
	for _, m := range all["map"] {
		k.maps[m] = true
		_, slotted := shardIndex(m)
		_, shared := sharedIndex(m)
		if (slotted || shared) && endpointMaps {
			lists = append(lists, setDef{name: m, isMap: true})
		}
	}
	rules, err := d.kernel.ListRules(ctx, "")
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
		elems, err := d.kernel.ListElements(ctx, typ, sd.name)
		if err != nil {
			return nil, fmt.Errorf("list %s %s of table %s: %w", typ, sd.name, d.cfg.Table, err)
		}
		m := make(map[string]string, len(elems))
		for _, e := range elems {
			key := strings.Join(e.Key, " . ")
			m[key] = strings.Join(e.Value, " . ")
			if e.Comment != nil {
				k.comments[elemKey{sd.name, key}] = *e.Comment
			}
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
// The endpoint maps are listed too when the Dataplane does not know what it
// wrote to them (its first sync, or the first after a failure): chain
// comments do not tell.
func (d *Dataplane) syncFull(ctx context.Context, s *dataplane.State, st *static) error {
	k, err := d.readBack(ctx, d.prog == nil)
	if err != nil {
		// Without a listing, start from an empty table: this forgets
		// affinities, but converges.
		d.log.Error(err, "Reading the table back failed; rewriting it from scratch")
		k = &kernelTable{}
	}
	prog, reskip := d.renderAll(s, st, k, d.reusable(s, st))
	d.remember(s, st, prog, reskip)
	p := d.fullPlan(prog, st, k, !d.recreated)
	if !k.exists && err != nil {
		p.ops = append([]op{{Verb: verbAdd, Obj: &knftables.Table{}}, {Verb: verbDelete, Obj: &knftables.Table{}}}, p.ops...)
	}
	max := d.cfg.MaxOperations
	txs, bytes, err := d.run(ctx, p, max)
	if err != nil {
		return err
	}
	d.prog, d.st, d.recreated, d.lastFull, d.suspect = prog, st, true, d.clock.Now(), [mapCount + sharedMapCount]bool{}
	d.stats = SyncStats{SyncReport: dataplane.SyncReport{Full: true, Services: len(prog.services), Bytes: bytes}, Operations: p.count(), Transactions: txs}
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
func (d *Dataplane) renderAll(s *dataplane.State, st *static, k *kernelTable, reuse *reuse) (*programmed, map[types.NamespacedName]bool) {
	prog, base := programmedOn(reuse, s.Services.Len())
	prog.static = st.sig
	all := make([]namedPorts, 0, s.Services.Len())
	for nn, ports := range s.Services.Services() {
		all = append(all, namedPorts{nn, ports})
	}
	sortServices(all, d.workers)
	rendered := d.renderServices(s, all, reuse)
	// The slots the table has the chains at, in chain order: a reused
	// rendering is placed without changing it.
	var slots []int32
	var reskip map[types.NamespacedName]bool
	for i, sv := range rendered {
		if sv.reskip {
			if reskip == nil {
				reskip = map[types.NamespacedName]bool{}
			}
			reskip[all[i].nn] = true
		}
		if sv.r == nil {
			continue
		}
		for j := range sv.r.chains {
			c := &sv.r.chains[j]
			if c.dnat == nil {
				continue
			}
			slot := int32(-1)
			if have, ok := k.chains[c.name]; ok {
				if at, ok := slotOfSig(have.comment); ok && prog.slots.take(c.dnat.shard, at) {
					slot = at
				}
			}
			if sv.reused {
				slots = append(slots, slot)
			} else {
				c.dnat.slot = slot
			}
		}
	}
	if base == nil {
		prog.sizeClaims(rendered)
	}
	for i, sv := range rendered {
		r := sv.r
		if r == nil {
			continue
		}
		if sv.reused {
			n := 0
			for _, c := range r.chains {
				if c.dnat != nil {
					n++
				}
			}
			rendered[i].r, slots = d.placeReused(prog, r, slots[:n]), slots[n:]
		} else {
			d.place(prog, r, nil)
		}
		if base == nil {
			prog.setService(all[i].nn, rendered[i].r)
		}
	}
	if base != nil {
		reuse.account(prog, s, all, rendered)
	}
	prog.names = make([]types.NamespacedName, 0, len(prog.services))
	for i, sv := range rendered {
		if sv.r != nil {
			prog.names = append(prog.names, all[i].nn)
		}
	}
	return prog, reskip
}

// fullPlan is the operations that turn table k into prog: the fixed part
// rewritten, and of the rest only what differs. Stale chains are flushed
// and left for a later sync to delete.
func (d *Dataplane) fullPlan(prog *programmed, st *static, k *kernelTable, recreate bool) *plan {
	p := &plan{ops: make([]op, 0, 64+len(prog.winners)+3*prog.chains+prog.rules)}
	d.writeStatic(p, st, recreate)
	d.diffPlan(p, prog, k, nil)
	return p
}

package nftables

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/fanout"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// renderCache is the renderings of every service of one State, as the
// last sync rendered them (whether or not the kernel took them), so that a
// full sync renders again only the services that changed since: a forced
// full resync of a big cluster otherwise spends a third of its time
// rendering what it rendered the sync before. A rendering depends on the
// service's ports and endpoints, which State.ChangedSince follows, and on
// what the fixed part's signature, the node's addresses and the local
// traffic match say, which the cache keeps to compare.
type renderCache struct {
	state   *dataplane.State
	static  string
	ifLocal string
	nodeIPs []netip.Addr
	// prog holds the renderings of every service with one (a service
	// without one renders nil): the programmed the sync built, shared.
	prog *programmed
	// reskip holds the services whose rendering reported an input left
	// out: they are rendered again, so that every full sync reports them
	// as it always did.
	reskip map[types.NamespacedName]bool
}

// reuse is what a full sync may take from the cache.
type reuse struct {
	c *renderCache
	// changed are the services that changed since the cache's State;
	// nil when it is the State synced.
	changed sets.Set[types.NamespacedName]
	// base is the cache's programmed, which the full sync may build its
	// own on instead of claiming every element again: set only while no
	// programmed is the table's (d.prog, which later syncs compare with).
	base *programmed
}

// reusable returns what d's cache has for the services of s that changed
// in none of the ways above; nil when nothing.
func (d *Dataplane) reusable(s *dataplane.State, st *static) *reuse {
	c := d.cache
	if c == nil || c.static != st.sig || c.ifLocal != d.localMatch(s, false) || !slices.Equal(c.nodeIPs, s.Node.IPs) {
		return nil
	}
	u := &reuse{c: c}
	if s != c.state {
		ch, ok := s.ChangedFrom(c.state)
		if !ok {
			return nil
		}
		u.changed = ch
	}
	if d.prog == nil {
		u.base = c.prog
	}
	return u
}

// get returns the cached rendering of service nn; ok is false when it
// must be rendered again.
func (u *reuse) get(nn types.NamespacedName) (r *rendering, ok bool) {
	if _, ok := u.changed[nn]; ok || u.c.reskip[nn] {
		return nil, false
	}
	return u.c.prog.services[nn], true
}

// remember makes prog, which holds the renderings of every service of s
// (reskip: those that reported an input left out), d's cache.
func (d *Dataplane) remember(s *dataplane.State, st *static, prog *programmed, reskip map[types.NamespacedName]bool) {
	d.cache = &renderCache{state: s, static: st.sig, ifLocal: d.localMatch(s, false), nodeIPs: s.Node.IPs, prog: prog, reskip: reskip}
}

// programmedOn returns the programmed a full sync builds: on the claims and
// shared-chain counts of u's base, when there is one (its slots and what
// the table holds start empty all the same: the full sync places every
// chain and finds the shared ones), else a new one for services.
func programmedOn(u *reuse, services int) (prog, base *programmed) {
	if u == nil || u.base == nil {
		return newProgrammed(services), nil
	}
	b := u.base
	return &programmed{services: b.services, winners: b.winners, others: b.others,
		chains: b.chains, rules: b.rules, dnatElems: b.dnatElems,
		sharedUsers: b.sharedUsers, mapUsers: b.mapUsers, sharedElems: b.sharedElems,
		sharedLive: map[string]bool{}}, b
}

// account makes prog, built on a base, hold the renderings rendered of
// all: only the services whose rendering is not the base's change their
// claims.
func (u *reuse) account(prog *programmed, s *dataplane.State, all []namedPorts, rendered []rendered) {
	for i, sv := range rendered {
		if sv.r != prog.services[all[i].nn] {
			prog.account(all[i].nn, sv.r)
		}
	}
	// Services gone since the cache's State.
	for nn := range u.changed {
		if prog.services[nn] != nil && s.Services.Service(nn) == nil {
			prog.account(nn, nil)
		}
	}
}

// namedPorts is a service and its ports.
type namedPorts struct {
	nn    types.NamespacedName
	ports []*servicemodel.ServicePort
}

// rendered is one service's rendering in a full sync: reused, when it is
// the cache's (which placing it must not change), and whether it reported
// an input left out.
type rendered struct {
	r              *rendering
	reused, reskip bool
}

// renderServices renders all, or takes their renderings from the cache
// where u (if not nil) has them.
func (d *Dataplane) renderServices(s *dataplane.State, all []namedPorts, u *reuse) []rendered {
	out := make([]rendered, len(all))
	fanout.Map(d.workers, parallelMin, all, out, d.skip, func(skip fanout.Skip) func(namedPorts) rendered {
		skipped := false
		r := d.newRenderer(s, func(reason string, kv ...any) {
			skipped = true
			skip(reason, kv...)
		})
		return func(sv namedPorts) rendered {
			if u != nil {
				if c, ok := u.get(sv.nn); ok {
					return rendered{r: c, reused: true}
				}
			}
			skipped = false
			rr := r.service(sv.ports)
			return rendered{r: rr, reskip: skipped}
		}
	})
	return out
}

// placeReused places a reused rendering r at the slots its endpoint-map
// chains are to take (slots, in chain order, -1 where the lowest free
// one): r itself when they are where r has them, else a copy of r, which
// shares everything but its chains. A reused rendering may be the
// programmed one, which partial syncs compare with.
func (d *Dataplane) placeReused(p *programmed, r *rendering, slots []int32) *rendering {
	k := 0
	for _, c := range r.chains {
		if c.dnat == nil {
			continue
		}
		if slots[k] < 0 {
			slots[k] = p.slots.alloc(c.dnat.shard)
		}
		k++
	}
	k = 0
	var out *rendering
	for i, c := range r.chains {
		if c.dnat == nil {
			continue
		}
		if slots[k] != c.dnat.slot && out == nil {
			out = &rendering{elems: r.elems, sets: r.sets, chains: slices.Clone(r.chains)}
		}
		if out != nil && slots[k] != c.dnat.slot {
			n := *c.dnat
			n.slot = slots[k]
			out.chains[i].dnat = &n
			d.placeDNAT(&out.chains[i])
		}
		k++
	}
	if out == nil {
		return r
	}
	return out
}

// sortServices sorts all by name, in two halves on two goroutines (then
// merged) when workers allow and there are enough: sorting a big
// cluster's names is a few percent of a full sync.
func sortServices(all []namedPorts, workers int) {
	compare := func(a, b namedPorts) int { return servicemodel.CompareNames(a.nn, b.nn) }
	if workers < 2 || len(all) < 4*parallelMin {
		slices.SortFunc(all, compare)
		return
	}
	half := len(all) / 2
	var wg sync.WaitGroup
	wg.Go(func() { slices.SortFunc(all[:half], compare) })
	slices.SortFunc(all[half:], compare)
	wg.Wait()
	merged := make([]namedPorts, 0, len(all))
	i, j := 0, half
	for i < half && j < len(all) {
		if compare(all[j], all[i]) < 0 {
			merged = append(merged, all[j])
			j++
		} else {
			merged = append(merged, all[i])
			i++
		}
	}
	merged = append(merged, all[i:half]...)
	merged = append(merged, all[j:]...)
	copy(all, merged)
}

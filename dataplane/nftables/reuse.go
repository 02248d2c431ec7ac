package nftables

import (
	"net/netip"
	"slices"

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
	// services maps every service with a rendering to it (a service
	// without one renders nil); it is the map of the programmed
	// renderings the sync built, shared.
	services map[types.NamespacedName]*rendering
	// reskip holds the services whose rendering reported an input left
	// out: they are rendered again, so that every full sync reports them
	// as it always did.
	reskip map[types.NamespacedName]bool
}

// reusable returns the renderings of d's cache that hold for the services
// of s that changed in none of the ways above; nil when none do.
func (d *Dataplane) reusable(s *dataplane.State, st *static) func(types.NamespacedName) (*rendering, bool) {
	c := d.cache
	if c == nil || c.static != st.sig || c.ifLocal != d.localMatch(s, false) || !slices.Equal(c.nodeIPs, s.Node.IPs) {
		return nil
	}
	var changed sets.Set[types.NamespacedName]
	if s != c.state {
		ch, ok := s.ChangedSince(c.state.Generation)
		if !ok {
			return nil
		}
		changed = ch
	}
	return func(nn types.NamespacedName) (*rendering, bool) {
		if _, ok := changed[nn]; ok || c.reskip[nn] {
			return nil, false
		}
		return c.services[nn], true
	}
}

// remember makes the renderings of services, those of every service of s
// (reskip: those that reported an input left out), d's cache.
func (d *Dataplane) remember(s *dataplane.State, st *static, services map[types.NamespacedName]*rendering, reskip map[types.NamespacedName]bool) {
	d.cache = &renderCache{state: s, static: st.sig, ifLocal: d.localMatch(s, false), nodeIPs: s.Node.IPs, services: services, reskip: reskip}
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
// where reuse (if not nil) has them.
func (d *Dataplane) renderServices(s *dataplane.State, all []namedPorts, reuse func(types.NamespacedName) (*rendering, bool)) []rendered {
	out := make([]rendered, len(all))
	fanout.Map(d.workers, parallelMin, all, out, d.skip, func(skip fanout.Skip) func(namedPorts) rendered {
		skipped := false
		r := d.newRenderer(s, func(reason string, kv ...any) {
			skipped = true
			skip(reason, kv...)
		})
		return func(sv namedPorts) rendered {
			if reuse != nil {
				if c, ok := reuse(sv.nn); ok {
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

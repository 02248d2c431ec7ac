package nftables

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// programmed is what the table holds after the last successful sync.
type programmed struct {
	static string
	// services are the renderings of the services programmed.
	services map[types.NamespacedName]*rendering
	// winners holds, for every element key some service port claims, the
	// first claim by order: the table holds its value. others holds the
	// other claims of the keys several ports claim, sorted; most keys
	// have one claim, which costs no slice.
	winners map[elemKey]claim
	others  map[elemKey][]claim
	// chains and rules count the per-service chains and their rules,
	// dnatElems the elements of the endpoint maps.
	chains, rules, dnatElems int
	// slots are the endpoint map slots the chains hold; declared says
	// which endpoint maps the table has.
	slots    slotTable
	declared [mapCount]bool
	// names are the services, sorted, when the full sync that built
	// the programmed knows them; nil once a service came or went.
	names []types.NamespacedName
	// sharedUsers counts the claims going to each shared chain, and
	// mapUsers those of each shared map, sharedElems their endpoints;
	// sharedLive holds the shared chains the table has, sharedDeclared
	// the shared maps.
	sharedUsers    map[sharedKey]int
	mapUsers       [sharedMapCount]int
	sharedElems    int
	sharedLive     map[string]bool
	sharedDeclared [sharedMapCount]bool
}

// newProgrammed returns an empty programmed sized for services.
func newProgrammed(services int) *programmed {
	return &programmed{services: make(map[types.NamespacedName]*rendering, services),
		winners: map[elemKey]claim{}, others: map[elemKey][]claim{},
		sharedUsers: map[sharedKey]int{}, sharedLive: map[string]bool{}}
}

// sizeClaims sizes the empty p's winners for the claims of rendered,
// which it is to hold: a guess would either grow it, copying every entry,
// or overshoot by a power of two, at thousands of services.
func (p *programmed) sizeClaims(rendered []rendered) {
	n := 0
	for _, sv := range rendered {
		if sv.r != nil {
			n += len(sv.r.elems)
		}
	}
	p.winners = make(map[elemKey]claim, n)
}

// winner is the claim on k whose element is in the table; ok is false
// when there is none.
func (p *programmed) winner(k elemKey) (c claim, ok bool) {
	c, ok = p.winners[k]
	return c, ok
}

func (p *programmed) addClaim(k elemKey, c claim) {
	w, ok := p.winners[k]
	if !ok {
		p.winners[k] = c
		return
	}
	if compareClaims(c, w) < 0 {
		p.winners[k], c = c, w
	}
	list := p.others[k]
	i, _ := slices.BinarySearchFunc(list, c, compareClaims)
	p.others[k] = slices.Insert(list, i, c)
}

func (p *programmed) removeClaim(k elemKey, c claim) {
	list := p.others[k]
	if w, ok := p.winners[k]; ok && w == c {
		if len(list) == 0 {
			delete(p.winners, k)
			return
		}
		p.winners[k], list = list[0], list[1:]
	} else if i := slices.Index(list, c); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(p.others, k)
	} else {
		p.others[k] = list
	}
}

// setKeys are the keys of a set's elements.
type setKeys struct {
	set  string
	keys []string
}

// sortedWinners is the keys of the winning claims by set, sets and keys
// sorted as the table lists them: bucketed by set first, a full sync's
// tens of thousands of keys are sorted as plain strings.
func (p *programmed) sortedWinners() []setKeys {
	var buckets []setKeys
	find := func(set string) *setKeys {
		i := slices.IndexFunc(buckets, func(b setKeys) bool { return b.set == set })
		if i < 0 {
			i = len(buckets)
			buckets = append(buckets, setKeys{set: set})
		}
		return &buckets[i]
	}
	// Counted first, so that each bucket is allocated once.
	counts := map[string]int{}
	for k := range p.winners {
		counts[k.set]++
	}
	for set, n := range counts {
		find(set).keys = make([]string, 0, n)
	}
	for k := range p.winners {
		b := find(k.set)
		b.keys = append(b.keys, k.key)
	}
	slices.SortFunc(buckets, func(a, b setKeys) int { return strings.Compare(a.set, b.set) })
	for _, b := range buckets {
		slices.Sort(b.keys)
	}
	return buckets
}

func compareClaims(a, b claim) int {
	if c := strings.Compare(a.order, b.order); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.value, b.value), strings.Compare(a.comment, b.comment))
}

// setService replaces the rendering of nn.
func (p *programmed) setService(nn types.NamespacedName, r *rendering) {
	if old := p.services[nn]; old != nil {
		for _, c := range old.chains {
			if n := c.dnat; n != nil && !r.holds(n.shard, n.slot) {
				p.slots.release(n.shard, n.slot)
			}
		}
	}
	p.account(nn, r)
}

// account replaces the rendering of nn, its claims and counts, leaving the
// slots as they are.
func (p *programmed) account(nn types.NamespacedName, r *rendering) {
	old := p.services[nn]
	if old != nil {
		p.rules -= countRules(old)
		p.chains -= len(old.chains)
		for _, e := range old.elems {
			p.removeClaim(e.elemKey, e.claim)
			p.countShared(e.shared, -1)
		}
		for _, c := range old.chains {
			if n := c.dnat; n != nil {
				p.dnatElems -= len(n.eps)
			}
		}
	}
	if (old == nil) != (r == nil) {
		p.names = nil
	}
	if r == nil {
		delete(p.services, nn)
		return
	}
	p.services[nn] = r
	p.rules += countRules(r)
	p.chains += len(r.chains)
	for _, e := range r.elems {
		p.addClaim(e.elemKey, e.claim)
		p.countShared(e.shared, 1)
	}
	for _, c := range r.chains {
		if c.dnat != nil {
			p.dnatElems += len(c.dnat.eps)
		}
	}
}

// countShared counts a claim of s (nil: none) in or (by -1) out.
func (p *programmed) countShared(s *sharedDef, by int) {
	if s == nil {
		return
	}
	k := s.users()
	p.sharedUsers[k] += by
	if p.sharedUsers[k] == 0 {
		delete(p.sharedUsers, k)
	}
	p.mapUsers[s.shard] += by
	p.sharedElems += by * len(s.eps)
}

// holds reports whether a chain of r is placed at slot s of shard i.
func (r *rendering) holds(i int, s int32) bool {
	return r != nil && slices.ContainsFunc(r.chains, func(c chainDef) bool {
		return c.dnat != nil && c.dnat.shard == i && c.dnat.slot == s
	})
}

// place gives the endpoint-map chains of r their slots and then their
// rules: a chain the service's programmed rendering old has keeps its
// slot, any other takes the lowest free one.
func (d *Dataplane) place(p *programmed, r, old *rendering) {
	for i := range r.chains {
		c := &r.chains[i]
		if c.dnat == nil {
			continue
		}
		if old != nil {
			if j := slices.IndexFunc(old.chains, func(o chainDef) bool { return o.name == c.name && o.dnat != nil }); j >= 0 {
				c.dnat.slot = old.chains[j].dnat.slot
			}
		}
		if c.dnat.slot < 0 {
			c.dnat.slot = p.slots.alloc(c.dnat.shard)
		}
		d.placeDNAT(c)
	}
}

func countRules(r *rendering) int {
	n := 0
	for _, c := range r.chains {
		n += len(c.rules)
	}
	return n
}

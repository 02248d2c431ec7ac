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
	// chains and rules count the per-service chains and their rules.
	chains, rules int
}

// newProgrammed returns an empty programmed sized for services.
func newProgrammed(services int) *programmed {
	return &programmed{services: make(map[types.NamespacedName]*rendering, services),
		winners: make(map[elemKey]claim, 3*services), others: map[elemKey][]claim{}}
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

func compareClaims(a, b claim) int {
	if c := strings.Compare(a.order, b.order); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.value, b.value), strings.Compare(a.comment, b.comment))
}

// setService replaces the rendering of nn.
func (p *programmed) setService(nn types.NamespacedName, r *rendering) {
	if old := p.services[nn]; old != nil {
		p.rules -= countRules(old)
		p.chains -= len(old.chains)
		for _, e := range old.elems {
			p.removeClaim(e.elemKey, e.claim)
		}
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
	}
}

func countRules(r *rendering) int {
	n := 0
	for _, c := range r.chains {
		n += len(c.rules)
	}
	return n
}

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
	// claims are every service port's element wishes, the winner first:
	// the table holds the first claim's value of every key.
	claims map[elemKey][]claim
	// chains and rules count the per-service chains and their rules.
	chains, rules int
}

func newProgrammed() *programmed {
	return &programmed{services: map[types.NamespacedName]*rendering{}, claims: map[elemKey][]claim{}}
}

// winner is the claim on k whose element is in the table; ok is false
// when there is none.
func (p *programmed) winner(k elemKey) (c claim, ok bool) {
	if list := p.claims[k]; len(list) > 0 {
		return list[0], true
	}
	return claim{}, false
}

func (p *programmed) addClaim(k elemKey, c claim) {
	list := p.claims[k]
	i, _ := slices.BinarySearchFunc(list, c, compareClaims)
	p.claims[k] = slices.Insert(list, i, c)
}

func (p *programmed) removeClaim(k elemKey, c claim) {
	list := p.claims[k]
	if i := slices.Index(list, c); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(p.claims, k)
	} else {
		p.claims[k] = list
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

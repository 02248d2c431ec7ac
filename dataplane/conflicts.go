package dataplane

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/internal/logtext"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxListedClaimants bounds the services one conflict warning names.
const maxListedClaimants = 5

// destination is what service ports claim: an address, port and protocol,
// or, with no address, a node port. Node ports are not told apart by
// family, as the API allocates each to one service.
type destination struct {
	addr  netip.Addr
	port  uint16
	proto v1.Protocol
}

func (d destination) compare(o destination) int {
	return cmp.Or(d.addr.Compare(o.addr), cmp.Compare(d.port, o.port), cmp.Compare(d.proto, o.proto))
}

// claimant is a service claiming a destination with n of its ports, over
// all families.
type claimant struct {
	service types.NamespacedName
	n       int
}

// claims finds destinations that several services claim, so that each
// such conflict is warned about once when it appears rather than on every
// Build. Only Build uses it.
type claims struct {
	by map[destination][]claimant
	// warned holds, for every destination in conflict, the services it was
	// last seen claimed by, sorted.
	warned map[destination][]types.NamespacedName
}

// conflict is a destination claimed by several services, sorted by
// namespace and name.
type conflict struct {
	dest     destination
	services []types.NamespacedName
}

// reserve makes room for n destinations when c holds none, as before a
// first Build.
func (c *claims) reserve(n int) {
	if n > 0 && len(c.by) == 0 {
		c.by = make(map[destination][]claimant, n)
	}
}

// update replaces the claims of service nn's ports prev by those of cur,
// and adds every destination whose claims changed to touched.
func (c *claims) update(nn types.NamespacedName, prev, cur []*servicemodel.ServicePort, touched map[destination]bool) {
	if c.by == nil {
		c.by = map[destination][]claimant{}
	}
	if c.warned == nil {
		c.warned = map[destination][]types.NamespacedName{}
	}
	for _, p := range prev {
		for d := range destinations(p) {
			c.add(d, nn, -1)
			touched[d] = true
		}
	}
	for _, p := range cur {
		for d := range destinations(p) {
			c.add(d, nn, 1)
			touched[d] = true
		}
	}
}

func (c *claims) add(d destination, nn types.NamespacedName, delta int) {
	list := c.by[d]
	i := slices.IndexFunc(list, func(cl claimant) bool { return cl.service == nn })
	switch {
	case i < 0 && delta > 0:
		c.by[d] = append(list, claimant{nn, delta})
	case i < 0:
	case list[i].n+delta > 0:
		list[i].n += delta
	case len(list) == 1:
		delete(c.by, d)
	default:
		c.by[d] = slices.Delete(list, i, i+1)
	}
}

// destinations yields the destinations port p claims; one claimed twice
// (an external IP equal to the cluster IP) is yielded twice, which add
// balances.
func destinations(p *servicemodel.ServicePort) func(yield func(destination) bool) {
	return func(yield func(destination) bool) {
		if !yield(destination{p.ClusterIP, p.Port, p.Protocol}) {
			return
		}
		for _, ip := range p.ExternalIPs {
			if !yield(destination{ip, p.Port, p.Protocol}) {
				return
			}
		}
		for _, ip := range p.LoadBalancerVIPs {
			if !yield(destination{ip, p.Port, p.Protocol}) {
				return
			}
		}
		if p.NodePort != 0 {
			yield(destination{port: p.NodePort, proto: p.Protocol})
		}
	}
}

// conflicts returns, in a fixed order, the touched destinations whose
// claimants now include a service they were not last warned with: a new
// conflict, or a new service joining one. It forgets the destinations no
// longer in conflict, so that a conflict that reappears is new again.
func (c *claims) conflicts(touched map[destination]bool) []conflict {
	var out []conflict
	for d := range touched {
		list := c.by[d]
		if len(list) < 2 {
			delete(c.warned, d)
			continue
		}
		services := make([]types.NamespacedName, len(list))
		for i, cl := range list {
			services[i] = cl.service
		}
		slices.SortFunc(services, servicemodel.CompareNames)
		prev := c.warned[d]
		c.warned[d] = services
		if slices.ContainsFunc(services, func(nn types.NamespacedName) bool { return !slices.Contains(prev, nn) }) {
			out = append(out, conflict{d, services})
		}
	}
	slices.SortFunc(out, func(a, b conflict) int { return a.dest.compare(b.dest) })
	return out
}

// warnConflicts logs each conflict. Which service is served there is
// decided per packet (see the package documentation), so the warning does
// not name a winner.
func (b *Builder) warnConflicts(list []conflict) {
	for _, c := range list {
		listed := c.services[:min(len(c.services), maxListedClaimants)]
		names := make([]string, len(listed))
		for i, nn := range listed {
			names[i] = logtext.Name(nn).String()
		}
		kv := []any{"protocol", c.dest.proto, "services", names}
		if n := len(c.services) - len(names); n > 0 {
			kv = append(kv, "moreServices", n)
		}
		if c.dest.addr.IsValid() {
			kv = append([]any{"destination", netip.AddrPortFrom(c.dest.addr, c.dest.port).String()}, kv...)
		} else {
			kv = append([]any{"nodePort", c.dest.port}, kv...)
		}
		b.logger.Info("Several services claim the same destination; its traffic reaches only one of them", kv...)
	}
}

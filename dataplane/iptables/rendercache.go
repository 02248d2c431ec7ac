package iptables

import (
	"reflect"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
)

// renderCache keeps what the last full rendering made of each service, so
// that a full sync (after a failure, a repair, a restart of the
// programming) re-renders only the services whose inputs changed. States
// are persistent maps: an unchanged service port, or an unchanged endpoint
// list, is the very same pointer in the next State, so "unchanged" is a
// pointer comparison. What every service's rendering depends on besides
// (the view, this node, the settings) must be equal, or nothing is reused.
type renderCache struct {
	view     *view
	node     dataplane.Node
	settings dataplane.Settings
	services map[types.NamespacedName]cachedService
}

// cachedService is one service's rendering and the inputs it was made of.
type cachedService struct {
	ports []*servicemodel.ServicePort
	eps   [][]*endpoints.Endpoint
	st    *svcState
}

// usable returns the cache if it was made for s under v, else nil.
func (c *renderCache) usable(s *dataplane.State, v *view) *renderCache {
	if c == nil || !c.view.equal(v) || !reflect.DeepEqual(c.node, s.Node) || !reflect.DeepEqual(c.settings, s.Settings) {
		return nil
	}
	return c
}

// inputs returns the service ports of nn in s and their endpoint lists.
func inputs(s *dataplane.State, nn types.NamespacedName) ([]*servicemodel.ServicePort, [][]*endpoints.Endpoint) {
	ports := s.Services.Service(nn)
	eps, _ := endpointLists(s, ports, nil)
	return ports, eps
}

// endpointLists returns the endpoint lists in s of ports, in their order,
// in the front of free if it has room, and what is left of free.
func endpointLists(s *dataplane.State, ports []*servicemodel.ServicePort, free [][]*endpoints.Endpoint) (eps, rest [][]*endpoints.Endpoint) {
	if n := len(ports); len(free) >= n {
		eps, rest = free[:n:n], free[n:]
	} else {
		eps, rest = make([][]*endpoints.Endpoint, n), free
	}
	for i, sp := range ports {
		if sp != nil {
			eps[i] = s.Endpoints.Get(sp.Name)
		}
	}
	return eps, rest
}

// lookup returns the cached rendering of a service whose inputs are
// ports and eps, if they are the ones it was made of.
func (c *renderCache) lookup(nn types.NamespacedName, ports []*servicemodel.ServicePort, eps [][]*endpoints.Endpoint) (*svcState, bool) {
	if c == nil {
		return nil, false
	}
	e, ok := c.services[nn]
	if !ok || len(e.ports) != len(ports) {
		return nil, false
	}
	for i := range ports {
		if e.ports[i] != ports[i] || !sameList(e.eps[i], eps[i]) {
			return nil, false
		}
	}
	return e.st, true
}

// sameList reports whether a and b are the same list, not merely equal
// ones: the same backing array and length.
func sameList(a, b []*endpoints.Endpoint) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

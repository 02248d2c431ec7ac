package servicemodel

import (
	"iter"
	"slices"

	"github.com/proxykit/proxykit/internal/pmap"
	"k8s.io/apimachinery/pkg/types"
)

// Map is an immutable set of service ports of one family, grouped by
// service. The zero value is empty. Copying a Map is cheap and shares its
// contents.
type Map struct {
	services pmap.Map[types.NamespacedName, []*ServicePort]
	ports    int
}

// NewMap builds a Map from ports, for tests and for callers that drive a
// dataplane without a Tracker. A later port with the same PortName replaces
// an earlier one.
func NewMap(ports ...*ServicePort) Map {
	byService := map[types.NamespacedName][]*ServicePort{}
	for _, p := range ports {
		list := byService[p.Name.NamespacedName]
		if i := slices.IndexFunc(list, func(q *ServicePort) bool { return q.Name == p.Name }); i >= 0 {
			list[i] = p
		} else {
			list = append(list, p)
		}
		byService[p.Name.NamespacedName] = list
	}
	e := Map{}.edit()
	for nn, list := range byService {
		e.withService(nn, list)
	}
	return e.done()
}

// edit is a batch of changes to a Map, which copies each node of the
// underlying persistent map at most once.
type edit struct {
	txn   *pmap.Txn[types.NamespacedName, []*ServicePort]
	ports int
}

func (m Map) edit() *edit { return &edit{txn: m.services.Txn(), ports: m.ports} }

// withService replaces service nn's ports by ports (removes it when
// empty). ports is sorted in place and kept by the Map.
func (e *edit) withService(nn types.NamespacedName, ports []*ServicePort) {
	old, _ := e.txn.Get(nn)
	e.ports -= len(old)
	if len(ports) == 0 {
		e.txn.Delete(nn)
		return
	}
	slices.SortFunc(ports, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	e.txn.Set(nn, ports)
	e.ports += len(ports)
}

// done returns the Map the batch made.
func (e *edit) done() Map { return Map{services: e.txn.Map(), ports: e.ports} }

// Len returns the number of service ports.
func (m Map) Len() int { return m.ports }

// Get returns the port named n.
func (m Map) Get(n PortName) (*ServicePort, bool) {
	for _, p := range m.Service(n.NamespacedName) {
		if p.Name == n {
			return p, true
		}
	}
	return nil, false
}

// Service returns the ports of service nn, sorted by port name and protocol;
// nil when the service is absent. The slice must not be modified.
func (m Map) Service(nn types.NamespacedName) []*ServicePort {
	ports, _ := m.services.Get(nn)
	return ports
}

// Services yields each service and its ports (as Service returns them) in
// unspecified order.
func (m Map) Services() iter.Seq2[types.NamespacedName, []*ServicePort] {
	return m.services.All()
}

// All yields every service port in unspecified order.
func (m Map) All() iter.Seq[*ServicePort] {
	return func(yield func(*ServicePort) bool) {
		for _, ports := range m.services.All() {
			for _, p := range ports {
				if !yield(p) {
					return
				}
			}
		}
	}
}

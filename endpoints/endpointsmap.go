package endpoints

import (
	"iter"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/internal/pmap"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
)

// Map is an immutable set of endpoints of one family, grouped by service.
// The zero value is empty. Copying a Map is cheap and shares its contents.
type Map struct {
	services pmap.Map[types.NamespacedName, *ServiceEndpoints]
}

// ServiceEndpoints is the endpoints of every port of one service.
type ServiceEndpoints struct {
	// Ports maps each port name to its endpoints, sorted by address; it
	// never holds an empty list.
	Ports map[servicemodel.PortName][]*Endpoint
	// LocalReady is the number of distinct IPs of ready endpoints on this
	// node, the count a health-check node port reports.
	LocalReady int
}

// NewMap builds a Map, for tests and for callers that drive a dataplane
// without a Tracker. Each list is sorted by address; of several entries with
// one address one is kept by the rule a Tracker applies to duplicates across
// slices (non-terminating first; see the package documentation). Empty lists
// are dropped, and so are nil entries. The Endpoints are shared, not copied.
func NewMap(eps map[servicemodel.PortName][]*Endpoint) Map {
	byService := map[types.NamespacedName]map[servicemodel.PortName][]*Endpoint{}
	for pn, list := range eps {
		list = slices.DeleteFunc(slices.Clone(list), func(e *Endpoint) bool { return e == nil })
		list = normalizeList(list)
		if len(list) == 0 {
			continue
		}
		ports := byService[pn.NamespacedName]
		if ports == nil {
			ports = map[servicemodel.PortName][]*Endpoint{}
			byService[pn.NamespacedName] = ports
		}
		ports[pn] = list
	}
	e := Map{}.edit()
	for nn, ports := range byService {
		e.withService(nn, newServiceEndpoints(ports))
	}
	return e.done()
}

// normalizeList sorts list by address and keeps one entry per address, the
// one comparePreference puts first. It reorders list in place.
func normalizeList(list []*Endpoint) []*Endpoint {
	slices.SortFunc(list, func(a, b *Endpoint) int {
		if c := compareAddrPorts(a.Addr, b.Addr); c != 0 {
			return c
		}
		return comparePreference(a, b)
	})
	return slices.CompactFunc(list, func(a, b *Endpoint) bool { return a.Addr == b.Addr })
}

// compareAddrPorts orders endpoints by address then port, numerically, so
// that 10.0.0.2 sorts before 10.0.0.11 (upstream sorts "ip:port" strings).
func compareAddrPorts(a, b netip.AddrPort) int {
	return a.Compare(b)
}

func newServiceEndpoints(ports map[servicemodel.PortName][]*Endpoint) *ServiceEndpoints {
	// Local endpoints are few, so sorting their IPs beats building a set.
	var buf [16]netip.Addr
	local := buf[:0]
	for _, list := range ports {
		for _, e := range list {
			if e.Local && e.Ready {
				local = append(local, e.IP())
			}
		}
	}
	slices.SortFunc(local, netip.Addr.Compare)
	return &ServiceEndpoints{Ports: ports, LocalReady: len(slices.Compact(local))}
}

// edit is a batch of changes to a Map, which copies each node of the
// underlying persistent map at most once.
type edit struct {
	txn *pmap.Txn[types.NamespacedName, *ServiceEndpoints]
}

func (m Map) edit() edit { return edit{txn: m.services.Txn()} }

// withService replaces service nn's endpoints by se (removes them when se
// is nil or empty).
func (e edit) withService(nn types.NamespacedName, se *ServiceEndpoints) {
	if se == nil || len(se.Ports) == 0 {
		e.txn.Delete(nn)
		return
	}
	e.txn.Set(nn, se)
}

// done returns the Map the batch made.
func (e edit) done() Map { return Map{services: e.txn.Map()} }

// Len returns the number of services with endpoints.
func (m Map) Len() int { return m.services.Len() }

// Get returns the endpoints of port n, sorted by address. The slice must
// not be modified.
func (m Map) Get(n servicemodel.PortName) []*Endpoint {
	se, ok := m.services.Get(n.NamespacedName)
	if !ok {
		return nil
	}
	return se.Ports[n]
}

// Service returns the endpoints of service nn; nil when it has none.
func (m Map) Service(nn types.NamespacedName) *ServiceEndpoints {
	se, _ := m.services.Get(nn)
	return se
}

// LocalReadyEndpoints returns the health-check count of service nn.
func (m Map) LocalReadyEndpoints(nn types.NamespacedName) int {
	if se := m.Service(nn); se != nil {
		return se.LocalReady
	}
	return 0
}

// Services yields every service's endpoints in unspecified order.
func (m Map) Services() iter.Seq2[types.NamespacedName, *ServiceEndpoints] {
	return m.services.All()
}

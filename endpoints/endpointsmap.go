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
// one address the first non-terminating one is kept. Empty lists are dropped.
func NewMap(eps map[servicemodel.PortName][]*Endpoint) Map {
	byService := map[types.NamespacedName]map[servicemodel.PortName][]*Endpoint{}
	for pn, list := range eps {
		list = normalizeList(slices.Clone(list))
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
	var m Map
	for nn, ports := range byService {
		m = m.withService(nn, newServiceEndpoints(ports))
	}
	return m
}

// normalizeList sorts list by address and removes duplicate addresses,
// preferring a non-terminating entry, then the earliest.
func normalizeList(list []*Endpoint) []*Endpoint {
	slices.SortStableFunc(list, func(a, b *Endpoint) int { return compareAddrPorts(a.Addr, b.Addr) })
	out := list[:0]
	for _, e := range list {
		if n := len(out); n > 0 && out[n-1].Addr == e.Addr {
			if out[n-1].Terminating && !e.Terminating {
				out[n-1] = e
			}
			continue
		}
		out = append(out, e)
	}
	clear(list[len(out):])
	return out
}

// compareAddrPorts orders endpoints by address then port, numerically, so
// that 10.0.0.2 sorts before 10.0.0.11 (upstream sorts "ip:port" strings).
func compareAddrPorts(a, b netip.AddrPort) int {
	return a.Compare(b)
}

func newServiceEndpoints(ports map[servicemodel.PortName][]*Endpoint) *ServiceEndpoints {
	local := map[netip.Addr]struct{}{}
	for _, list := range ports {
		for _, e := range list {
			if e.Local && e.Ready {
				local[e.IP()] = struct{}{}
			}
		}
	}
	return &ServiceEndpoints{Ports: ports, LocalReady: len(local)}
}

// withService returns m with service nn's endpoints replaced by se (removed
// when nil or empty).
func (m Map) withService(nn types.NamespacedName, se *ServiceEndpoints) Map {
	if se == nil || len(se.Ports) == 0 {
		m.services = m.services.Delete(nn)
		return m
	}
	m.services = m.services.Set(nn, se)
	return m
}

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

package endpoints

import (
	"iter"

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
// without a Tracker. Lists are sorted and de-duplicated as the tracker does.
func NewMap(eps map[servicemodel.PortName][]*Endpoint) Map {
	panic("unimplemented")
}

// Len returns the number of services with endpoints.
func (m Map) Len() int { return m.services.Len() }

// Get returns the endpoints of port n, sorted by address. The slice must
// not be modified.
func (m Map) Get(n servicemodel.PortName) []*Endpoint {
	panic("unimplemented")
}

// Service returns the endpoints of service nn; nil when it has none.
func (m Map) Service(nn types.NamespacedName) *ServiceEndpoints {
	panic("unimplemented")
}

// LocalReadyEndpoints returns the health-check count of service nn.
func (m Map) LocalReadyEndpoints(nn types.NamespacedName) int {
	panic("unimplemented")
}

// Services yields every service's endpoints in unspecified order.
func (m Map) Services() iter.Seq2[types.NamespacedName, *ServiceEndpoints] {
	panic("unimplemented")
}

package servicemodel

import (
	"iter"

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
	panic("unimplemented")
}

// Len returns the number of service ports.
func (m Map) Len() int { return m.ports }

// Get returns the port named n.
func (m Map) Get(n PortName) (*ServicePort, bool) {
	panic("unimplemented")
}

// Service returns the ports of service nn, sorted by port name and protocol;
// nil when the service is absent. The slice must not be modified.
func (m Map) Service(nn types.NamespacedName) []*ServicePort {
	panic("unimplemented")
}

// Services yields each service and its ports (as Service returns them) in
// unspecified order.
func (m Map) Services() iter.Seq2[types.NamespacedName, []*ServicePort] {
	panic("unimplemented")
}

// All yields every service port in unspecified order.
func (m Map) All() iter.Seq[*ServicePort] {
	panic("unimplemented")
}

package informer

import (
	"sync"

	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/validation"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// checked stands between the informers and the Handler (and its
// ServiceCIDRHandler) and hands on only objects a real API server could
// have sent: a fake clientset, an
// aggregated or buggy server, or an object written to etcd directly may
// send others. A refused object is handled as absent: its add is dropped,
// an update to it removes the version handed on before, and its delete is
// dropped; a later valid version is handed on as an add. Each check costs
// one validation of the object changed; a resync, which hands the cached
// object on unchanged, is not checked again.
type checked struct {
	h       source.Handler
	checker *validation.Checker

	mu sync.Mutex
	// refused are the objects whose latest version was refused: the
	// handler holds none of them.
	refused map[objectKey]bool
}

type objectKey struct {
	kind            byte
	namespace, name string
}

func newChecked(h source.Handler, c *validation.Checker) *checked {
	return &checked{h: h, checker: c, refused: map[objectKey]bool{}}
}

func (c *checked) OnService(old, new *v1.Service) { pass(c, 's', old, new, c.h.OnService) }

func (c *checked) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	pass(c, 'e', old, new, c.h.OnEndpointSlice)
}

func (c *checked) OnNode(old, new *v1.Node) { pass(c, 'n', old, new, c.h.OnNode) }

func (c *checked) Synced() { c.h.Synced() }

// serviceCIDRs is ch.OnServiceCIDR behind the same checks.
func (c *checked) serviceCIDRs(ch source.ServiceCIDRHandler) func(old, new *networking.ServiceCIDR) {
	return func(old, new *networking.ServiceCIDR) { pass(c, 'c', old, new, ch.OnServiceCIDR) }
}

// pass hands fn the change from old to new as the handler must see it:
// without the versions refused.
func pass[P interface {
	comparable
	metav1.Object
	runtime.Object
}](c *checked, kind byte, old, new P, fn func(old, new P)) {
	var none P
	obj := new
	if obj == none {
		obj = old
	}
	key := objectKey{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName()}
	c.mu.Lock()
	oldOK := old != none && !c.refused[key]
	c.mu.Unlock()
	newOK := true
	switch {
	case new == none:
	case old == new:
		// A resync: the object was judged when it arrived.
		newOK = oldOK
	default:
		newOK = c.checker.Check(new) == nil
	}
	c.mu.Lock()
	if newOK {
		delete(c.refused, key)
	} else {
		c.refused[key] = true
	}
	c.mu.Unlock()
	if !oldOK {
		old = none
	}
	if !newOK {
		new = none
	}
	if old != none || new != none {
		fn(old, new)
	}
}

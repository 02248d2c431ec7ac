package source

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Source feeds Kubernetes objects to a proxy. A Source that also
// implements fmt.Stringer describes itself in the proxy's start-up line and
// in the errors it returns ("manifests /etc/proxy"); the sources of this
// module do.
type Source interface {
	// Run delivers objects to h until ctx is done, then returns nil. It
	// calls h.Synced once, after it has delivered its initial state. An
	// error means the source cannot go on; the proxy then stops.
	Run(ctx context.Context, h Handler) error
}

// Func adapts a function to a Source.
type Func func(ctx context.Context, h Handler) error

// Run calls f(ctx, h).
func (f Func) Run(ctx context.Context, h Handler) error { return f(ctx, h) }

// Handler receives a Source's objects. Its methods may be called from any
// goroutine and never block on rule programming. For every method old is
// nil for an add and new is nil for a delete; both are never modified and
// may be kept by the proxy, so a source must not modify them afterwards.
type Handler interface {
	OnService(old, new *v1.Service)
	OnEndpointSlice(old, new *discovery.EndpointSlice)
	// OnNode receives Node objects; those of other nodes than the proxy's
	// are ignored.
	OnNode(old, new *v1.Node)
	// Synced reports that the source has delivered its initial state;
	// later calls are no-ops.
	Synced()
}

// ServiceCIDRHandler is a Handler that also takes the cluster's
// ServiceCIDR objects (networking.k8s.io/v1), with which the nftables mode
// drops traffic to unallocated cluster IPs. Sources deliver them only to a
// Handler that implements it, and never wait for them before Synced: a
// proxy runs without them, as kube-proxy does.
type ServiceCIDRHandler interface {
	OnServiceCIDR(old, new *networking.ServiceCIDR)
}

// Static is a Source of a fixed set of objects, each a *v1.Service, a
// *discovery.EndpointSlice, a *v1.Node or a *networking.ServiceCIDR
// (manifest.Decode returns such a list). The objects are shared, not copied.
type Static []runtime.Object

// Run delivers the objects in order, calls h.Synced and blocks until ctx is
// done. An object of another type is an error and nothing is delivered.
func (s Static) Run(ctx context.Context, h Handler) error {
	for _, o := range s {
		switch o.(type) {
		case *v1.Service, *discovery.EndpointSlice, *v1.Node, *networking.ServiceCIDR:
		default:
			name := ""
			if a, err := meta.Accessor(o); err == nil {
				name = " " + a.GetName()
			}
			return fmt.Errorf("static source: %T%s: unsupported type", o, name)
		}
	}
	for _, o := range s {
		Deliver(h, nil, o)
	}
	h.Synced()
	<-ctx.Done()
	return nil
}

// String implements fmt.Stringer.
func (s Static) String() string { return "static objects" }

// Deliver hands one change of a supported object to the matching method of
// h, for sources that hold their objects as runtime.Objects. old and new are
// of the same type or nil; an object of another type is ignored.
func Deliver(h Handler, old, new runtime.Object) {
	obj := old
	if obj == nil {
		obj = new
	}
	switch obj.(type) {
	case *v1.Service:
		a, _ := old.(*v1.Service)
		b, _ := new.(*v1.Service)
		h.OnService(a, b)
	case *discovery.EndpointSlice:
		a, _ := old.(*discovery.EndpointSlice)
		b, _ := new.(*discovery.EndpointSlice)
		h.OnEndpointSlice(a, b)
	case *v1.Node:
		a, _ := old.(*v1.Node)
		b, _ := new.(*v1.Node)
		h.OnNode(a, b)
	case *networking.ServiceCIDR:
		if ch, ok := h.(ServiceCIDRHandler); ok {
			a, _ := old.(*networking.ServiceCIDR)
			b, _ := new.(*networking.ServiceCIDR)
			ch.OnServiceCIDR(a, b)
		}
	}
}

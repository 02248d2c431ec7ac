package proxykit

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Source feeds Kubernetes objects to a Proxy. Built in: InformerSource
// (a cluster, through client-go), ManifestSource (files) and StaticSource
// (objects in memory).
type Source interface {
	// Run delivers objects to h until ctx is done, then returns nil. It
	// calls h.Synced once, after it has delivered its initial state. An
	// error means the source cannot go on; the Proxy then stops.
	Run(ctx context.Context, h Handler) error
}

// SourceFunc adapts a function to a Source.
type SourceFunc func(ctx context.Context, h Handler) error

// Run calls f(ctx, h).
func (f SourceFunc) Run(ctx context.Context, h Handler) error { return f(ctx, h) }

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

// StaticSource delivers a fixed set of objects once, reports Synced, and
// then waits for its context to end.
type StaticSource struct {
	objects []runtime.Object
}

// NewStaticSource returns a source of objs, which must be *v1.Service,
// *discovery.EndpointSlice or *v1.Node values (DecodeManifests returns
// such a list). objs are shared, not copied.
func NewStaticSource(objs ...runtime.Object) *StaticSource {
	return &StaticSource{objects: objs}
}

// Run delivers the objects in order, calls h.Synced and blocks until ctx is
// done. An object of another type is an error and nothing is delivered.
func (s *StaticSource) Run(ctx context.Context, h Handler) error {
	for i, o := range s.objects {
		switch o.(type) {
		case *v1.Service, *discovery.EndpointSlice, *v1.Node:
		default:
			return fmt.Errorf("static source: object %d: unsupported type %T", i, o)
		}
	}
	for _, o := range s.objects {
		deliver(h, nil, o)
	}
	h.Synced()
	<-ctx.Done()
	return nil
}

// deliver hands one change of a supported object to h; old and new are of
// the same type or nil.
func deliver(h Handler, old, new runtime.Object) {
	switch firstNonNil(old, new).(type) {
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
	}
}

func firstNonNil(a, b runtime.Object) runtime.Object {
	if a != nil {
		return a
	}
	return b
}

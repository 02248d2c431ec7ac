package source_test

import (
	"context"
	"fmt"

	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// printer is a Handler that prints what it receives.
type printer struct{ synced chan struct{} }

func (p printer) OnService(old, new *v1.Service) { fmt.Println("service", new.Namespace+"/"+new.Name) }
func (p printer) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	fmt.Println("slice", new.Namespace+"/"+new.Name)
}
func (p printer) OnNode(old, new *v1.Node) { fmt.Println("node", new.Name) }
func (p printer) Synced()                  { close(p.synced) }

// A Static source delivers its objects once, reports Synced and waits for
// its context to end.
func Example() {
	src := source.Static{
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}},
		&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1"}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := printer{synced: make(chan struct{})}
	done := make(chan error)
	go func() { done <- src.Run(ctx, h) }()
	<-h.synced
	cancel()
	fmt.Println("done:", <-done)
	// Output:
	// node node-1
	// service demo/web
	// slice demo/web-1
	// done: <nil>
}

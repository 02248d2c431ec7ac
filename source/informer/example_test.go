package informer_test

import (
	"context"
	"fmt"
	"time"

	"github.com/proxykit/proxykit/source/informer"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// counter is a Handler that counts the services it is given.
type counter struct {
	services int
	synced   chan struct{}
}

func (c *counter) OnService(old, new *v1.Service)                    { c.services++ }
func (c *counter) OnEndpointSlice(old, new *discovery.EndpointSlice) {}
func (c *counter) OnNode(old, new *v1.Node)                          {}
func (c *counter) Synced()                                           { close(c.synced) }

// The source watches a clientset (here client-go's fake; in a node agent a
// *kubernetes.Clientset) and reports Synced once every informer has
// delivered its initial list. A proxy passes it in Config.Sources.
func Example() {
	client := fake.NewClientset(
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}, Spec: v1.ServiceSpec{ClusterIP: "172.30.0.10", Ports: []v1.ServicePort{{Port: 80}}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
	)
	src := informer.New(client, informer.Config{NodeName: "node-1"})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := &counter{synced: make(chan struct{})}
	go func() { _ = src.Run(ctx, h) }()
	select {
	case <-h.synced:
		fmt.Println("synced with", h.services, "service")
	case <-ctx.Done():
		fmt.Println("not synced")
	}
	// Output: synced with 1 service
}

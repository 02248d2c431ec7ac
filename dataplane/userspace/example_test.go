package userspace_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Serve a service in unprivileged mode: no root, no netfilter. Its cluster
// IP is mapped to a free loopback port, and the one endpoint is a server
// of this process.
func Example() {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello from the endpoint")
			c.Close()
		}
	}()

	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Node:   dataplane.Node{Name: "laptop"},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {{Addr: backend.Addr().(*net.TCPAddr).AddrPort(), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
		}),
	}

	dp, err := userspace.New(userspace.Config{
		Listen: func(fe userspace.Destination) (netip.AddrPort, bool) {
			return netip.MustParseAddrPort("127.0.0.1:0"), fe.Kind == userspace.ClusterIP
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := dp.Sync(ctx, state); err != nil {
		panic(err)
	}
	defer dp.Cleanup(ctx)

	for fe, addr := range dp.Listeners() {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			panic(err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		fmt.Printf("%s: %s", fe, line)
	}
	// Output:
	// 10.96.0.10:80/TCP: hello from the endpoint
}

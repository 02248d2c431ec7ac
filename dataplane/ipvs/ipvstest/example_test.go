package ipvstest_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Exercise graceful termination without a kernel: an endpoint that goes
// away while the fake says it still has connections stays at weight 0,
// and is deleted at the first sync after they are gone.
func Example() {
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	state := func(eps ...string) *dataplane.State {
		var list []*endpoints.Endpoint
		for _, e := range eps {
			list = append(list, &endpoints.Endpoint{Addr: netip.MustParseAddrPort(e), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}})
		}
		return &dataplane.State{
			Family:    v1.IPv4Protocol,
			Node:      dataplane.Node{Name: "node-a"},
			Services:  servicemodel.NewMap(&servicemodel.ServicePort{Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP}),
			Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{name: list}),
		}
	}
	kernel := ipvstest.NewKernel()
	dp, err := ipvs.New(ipvs.Config{Kernel: kernel, Runner: xtables.NewFakeRunner()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	sync := func(s *dataplane.State) {
		if err := dp.Sync(ctx, s); err != nil {
			panic(err)
		}
		fmt.Println(kernel.IPVS.Dump())
	}
	sync(state("10.244.1.5:8080", "10.244.2.7:8080"))
	kernel.IPVS.SetConnections(netip.MustParseAddrPort("10.96.0.10:80"), "TCP", netip.MustParseAddrPort("10.244.2.7:8080"), 1, 0)
	sync(state("10.244.1.5:8080"))
	kernel.IPVS.SetConnections(netip.MustParseAddrPort("10.96.0.10:80"), "TCP", netip.MustParseAddrPort("10.244.2.7:8080"), 0, 0)
	sync(state("10.244.1.5:8080"))
	// Output:
	// TCP 10.96.0.10:80 rr
	//   -> 10.244.1.5:8080 weight 1
	//   -> 10.244.2.7:8080 weight 1
	// TCP 10.96.0.10:80 rr
	//   -> 10.244.1.5:8080 weight 1
	//   -> 10.244.2.7:8080 weight 0
	// TCP 10.96.0.10:80 rr
	//   -> 10.244.1.5:8080 weight 1
}

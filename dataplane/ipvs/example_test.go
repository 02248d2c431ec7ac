package ipvs_test

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

// Program a one-service State into the fakes and list the IPVS table, as
// ipvsadm -Ln would, and the addresses bound to the dummy link.
func Example() {
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Node:   dataplane.Node{Name: "node-a", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {
				{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}},
				{Addr: netip.MustParseAddrPort("10.244.2.7:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}},
			},
		}),
	}
	kernel := ipvstest.NewKernel()
	// The node's own address, as the kernel holds it: node ports follow
	// the kernel's addresses.
	kernel.Netlink.SetLinkAddrs("eth0", netip.MustParseAddr("192.168.0.2"))
	dp, err := ipvs.New(ipvs.Config{Kernel: kernel, Runner: xtables.NewFakeRunner()})
	if err != nil {
		panic(err)
	}
	if err := dp.Sync(context.Background(), state); err != nil {
		panic(err)
	}
	fmt.Println(kernel.IPVS.Dump())
	fmt.Println(ipvs.DefaultLink, kernel.Netlink.LinkAddrs(ipvs.DefaultLink))
	// Output:
	// TCP 10.96.0.10:80 rr
	//   -> 10.244.1.5:8080 weight 1
	//   -> 10.244.2.7:8080 weight 1
	// TCP 192.168.0.2:30080 rr
	//   -> 10.244.1.5:8080 weight 1
	//   -> 10.244.2.7:8080 weight 1
	// proxykit-ipvs0 [10.96.0.10]
}

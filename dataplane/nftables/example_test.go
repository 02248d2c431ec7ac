package nftables_test

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// Render a one-service State as the node agent's --dry-run does: no root,
// no kernel, the exact nft -f script of a first sync.
func Example() {
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Node:   dataplane.Node{Name: "node-a", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {
				{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}},
				{Addr: netip.MustParseAddrPort("10.244.2.7:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}},
			},
		}),
	}
	dp, err := nftables.New(nftables.Config{NFT: knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)})
	if err != nil {
		panic(err)
	}
	out, err := dp.Render(state)
	if err != nil {
		panic(err)
	}
	// The full script also holds the table's fixed part; print what the
	// service adds: its chain, whose rule picks one of the endpoints kept
	// in an endpoint map shared with other services, and its elements.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "demo/web") || strings.Contains(line, "10.96.0.10") || strings.Contains(line, "dnat-tcp-") {
			fmt.Println(line)
		}
	}
	// Output:
	// add map ip proxykit dnat-tcp-112 { typeof numgen random mod 1 : ip daddr . tcp dport ; comment "service endpoints by numgen value" ; }
	// add chain ip proxykit service-AXK6CI2C-demo/web/tcp/http
	// add rule ip proxykit service-AXK6CI2C-demo/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 2 offset 0 map @dnat-tcp-112 comment "pk:3n5xcmaw27i3a@0"
	// add element ip proxykit cluster-ips { 10.96.0.10 }
	// add element ip proxykit service-ips { 10.96.0.10 . tcp . 80 : goto service-AXK6CI2C-demo/web/tcp/http }
	// add element ip proxykit dnat-tcp-112 { 0 : 10.244.1.5 . 8080 }
	// add element ip proxykit dnat-tcp-112 { 1 : 10.244.2.7 . 8080 }
}

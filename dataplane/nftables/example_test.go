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
	// service adds. A ClusterIP port without affinity has no chain of its
	// own: its service-ips element goes to a chain shared with every such
	// port of two endpoints, whose rule picks one of the port's endpoints
	// from a shared map, keyed by destination and index.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "demo/web") || strings.Contains(line, "10.96.0.10") || strings.Contains(line, "cluster-endpoints-tcp-") || strings.Contains(line, "cluster-dnat-tcp-") {
			fmt.Println(line)
		}
	}
	// Output:
	// add map ip proxykit cluster-endpoints-tcp-20 { typeof ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport ; comment "ClusterIP endpoints by destination and numgen value" ; }
	// add chain ip proxykit cluster-dnat-tcp-20-2
	// add rule ip proxykit cluster-dnat-tcp-20-2 dnat ip addr . port to ip daddr . tcp dport . numgen random mod 2 map @cluster-endpoints-tcp-20 comment "pk:2zvld7udfpi1l"
	// add element ip proxykit cluster-ips { 10.96.0.10 }
	// add element ip proxykit service-ips { 10.96.0.10 . tcp . 80 comment "demo/web/tcp/http" : goto cluster-dnat-tcp-20-2 }
	// add element ip proxykit cluster-endpoints-tcp-20 { 10.96.0.10 . 80 . 0 : 10.244.1.5 . 8080 }
	// add element ip proxykit cluster-endpoints-tcp-20 { 10.96.0.10 . 80 . 1 : 10.244.2.7 . 8080 }
}

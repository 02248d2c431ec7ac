package iptables_test

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Render a one-service State as the node agent's --dry-run does: no root,
// no kernel, the exact iptables-restore input.
func Example() {
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Node:   dataplane.Node{Name: "node-a", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
		}),
	}
	dp, err := iptables.New(iptables.Config{Runner: xtables.NewFakeRunner(), Logger: logr.Discard()})
	if err != nil {
		panic(err)
	}
	out, err := dp.Render(state)
	if err != nil {
		panic(err)
	}
	// The full text also holds the fixed chains and, as comments, the
	// jumps from the built-in chains; print the service's own rules.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "demo/web") || strings.HasPrefix(line, ":PK-S") {
			fmt.Println(line)
		}
	}
	// Output:
	// :PK-SERVICES - [0:0]
	// :PK-SERVICES - [0:0]
	// :PK-SVC-XRY76EGRC3BSCIIJ - [0:0]
	// :PK-SEP-NW5VICAF3Z2QABHQ - [0:0]
	// -A PK-SERVICES -m comment --comment "demo/web:http cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j PK-SVC-XRY76EGRC3BSCIIJ
	// -A PK-SVC-XRY76EGRC3BSCIIJ -m comment --comment "demo/web:http -> 10.244.1.5:8080" -j PK-SEP-NW5VICAF3Z2QABHQ
	// -A PK-SEP-NW5VICAF3Z2QABHQ -m comment --comment "demo/web:http" -s 10.244.1.5 -j PK-MARK-MASQ
	// -A PK-SEP-NW5VICAF3Z2QABHQ -m comment --comment "demo/web:http" -m tcp -p tcp -j DNAT --to-destination 10.244.1.5:8080
}

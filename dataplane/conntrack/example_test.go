package conntrack_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/conntrack"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A DNS service lost endpoint 10.244.1.5 and a UDP service was deleted:
// after the sync that programmed this, the flows still pinned to them go,
// and the flow to the surviving endpoint stays.
func Example() {
	client := netip.MustParseAddrPort("10.0.0.7:41000")
	dns := netip.MustParseAddrPort("10.96.0.10:53")
	gone := netip.MustParseAddrPort("10.96.0.99:514")
	table := conntrack.NewFakeTable(
		conntrack.NewFlow(v1.ProtocolUDP, client, dns, netip.MustParseAddrPort("10.244.1.5:53")),
		conntrack.NewFlow(v1.ProtocolUDP, client, dns, netip.MustParseAddrPort("10.244.2.8:53")),
		conntrack.NewFlow(v1.ProtocolUDP, client, gone, netip.MustParseAddrPort("10.244.3.2:514")),
	)
	// On a node, leave Netlink nil to clean the kernel's table.
	cleaner := conntrack.New(conntrack.Config{Netlink: table, Logger: logr.Discard()})
	dnsPort := servicemodel.PortName{
		NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"},
		Port:           "dns", Protocol: v1.ProtocolUDP,
	}
	n, err := cleaner.CleanStale(context.Background(), dataplane.StaleFlows{
		Frontends: []servicemodel.Frontend{{IP: gone.Addr(), Port: gone.Port(), Protocol: v1.ProtocolUDP}},
		Endpoints: []endpoints.StaleEndpoint{{Port: dnsPort, Addr: netip.MustParseAddrPort("10.244.1.5:53")}},
	})
	fmt.Println("deleted:", n, err)
	for _, f := range table.Flows() {
		fmt.Printf("kept: %s:%d -> %s:%d\n", f.Forward.DstIP, f.Forward.DstPort, f.Reverse.SrcIP, f.Reverse.SrcPort)
	}
	// Output:
	// deleted: 2 <nil>
	// kept: 10.96.0.10:53 -> 10.244.2.8:53
}

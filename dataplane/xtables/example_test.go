package xtables_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// Apply restore input to a FakeRunner, read the table back and follow a
// packet through it, as the kernel would.
func Example() {
	fake := xtables.NewFakeRunner()
	in := xtables.RestoreBytes(`*filter
:DEMO-FIREWALL - [0:0]
-A DEMO-FIREWALL -m comment --comment "demo/web:http blocked" -p tcp -d 10.96.0.10 --dport 80 -j DROP
COMMIT
`)
	if err := fake.Restore(context.Background(), in); err != nil {
		panic(err)
	}
	if err := fake.EnsureJump(context.Background(), xtables.Jump{Table: "filter", Chain: "OUTPUT", Rule: []string{"-j", "DEMO-FIREWALL"}}); err != nil {
		panic(err)
	}
	save, _ := fake.Save(context.Background(), "filter")
	rs, skipped := xtables.ParseSave(save)
	v := rs.Trace(dataplane.Packet{
		Src:      netip.MustParseAddr("192.168.0.2"),
		Dst:      netip.MustParseAddrPort("10.96.0.10:80"),
		Protocol: v1.ProtocolTCP,
		From:     dataplane.FromNode,
	}, []netip.Addr{netip.MustParseAddr("192.168.0.2")})
	fmt.Println(v.Action, v.Service, len(skipped))
	// Output: Drop demo/web:http 0
}

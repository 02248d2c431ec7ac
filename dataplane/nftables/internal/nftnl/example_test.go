package nftnl_test

import (
	"context"
	"fmt"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// A service's endpoint choice compiles to five expressions: the protocol
// match (meta, cmp), numgen, the lookup in the endpoint map and the NAT;
// reading them back gives the text again.
func ExampleCompile() {
	rule := "meta l4proto tcp dnat ip addr . port to numgen random mod 3 offset 0 map @dnat-tcp-000"
	c, err := nftnl.Compile(knftables.IPv4Family, rule)
	if err != nil {
		panic(err)
	}
	for _, e := range c.Exprs {
		fmt.Printf("%T\n", e)
	}
	text, err := nftnl.Decompile(knftables.IPv4Family, c.Exprs, c.Anon)
	fmt.Println(text == rule, err)
	// Output:
	// *expr.Meta
	// *expr.Cmp
	// *expr.Numgen
	// *expr.Lookup
	// *expr.NAT
	// true <nil>
}

// Programming a table needs CAP_NET_ADMIN; nothing here needs nft.
func ExampleConn_Run() {
	conn, err := nftnl.Open(knftables.IPv4Family, "example", nftnl.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	err = conn.Run(context.Background(), []nftnl.Op{
		{Verb: nftnl.Add, Obj: &knftables.Table{}},
		{Verb: nftnl.Add, Obj: &knftables.Chain{Name: "services"}},
		{Verb: nftnl.Add, Obj: &knftables.Rule{Chain: "services", Rule: "ip daddr 10.96.0.0/12 drop"}},
	})
	fmt.Println(err)
}

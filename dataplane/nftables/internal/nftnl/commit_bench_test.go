package nftnl_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"github.com/proxykit/proxykit/internal/netns"
	"sigs.k8s.io/knftables"
)

// BenchmarkKernelCommit is a one-element change (a delete and an add in
// one endpoint map) committed into tables of many chains or many
// elements (PROXYKIT_BENCH_KERNEL=1; it needs root and nft). It shows
// what a commit costs: every commit visits every chain of every table in
// the namespace (nf_tables_commit makes each chain's rules of the next
// generation current), so its time grows with the chains, and not with
// the elements.
func BenchmarkKernelCommit(b *testing.B) {
	if os.Getenv("PROXYKIT_BENCH_KERNEL") == "" {
		b.Skip("set PROXYKIT_BENCH_KERNEL=1 to run kernel benchmarks")
	}
	netns.Require(b, "nft")
	for _, size := range []struct{ chains, elements int }{
		{100, 1}, {10_000, 1}, {100_000, 1}, {1_000, 1_000_000},
	} {
		b.Run(fmt.Sprintf("chains=%d/elements=%d", size.chains, size.elements), func(b *testing.B) {
			ns := netns.New(b, "nftnl")
			f, err := os.Open("/var/run/netns/" + ns.Name)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			c, err := nftnl.Open(knftables.IPv4Family, table, nftnl.Options{NetNS: f})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Run(b.Context(), commitTable(size.chains, size.elements)); err != nil {
				b.Fatal(err)
			}
			one := []nftnl.Op{
				{Verb: nftnl.Delete, Obj: &knftables.Element{Map: "dnat-tcp-000", Key: []string{"0"}}},
				{Verb: nftnl.Add, Obj: &knftables.Element{Map: "dnat-tcp-000", Key: []string{"0"}, Value: []string{"10.0.0.2 . 80"}}},
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Run(b.Context(), one); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// commitTable is a table of chains empty chains and 1024 endpoint maps
// holding elements elements (at least one, in dnat-tcp-000).
func commitTable(chains, elements int) []nftnl.Op {
	ops := []nftnl.Op{{Verb: nftnl.Add, Obj: &knftables.Table{}}}
	const shards = 1024
	for s := range shards {
		ops = append(ops, nftnl.Op{Verb: nftnl.Add, Obj: &knftables.Map{Name: fmt.Sprintf("dnat-tcp-%03x", s), TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}})
	}
	for i := range chains {
		ops = append(ops, nftnl.Op{Verb: nftnl.Add, Obj: &knftables.Chain{Name: fmt.Sprintf("c%d", i)}})
	}
	for i := range max(elements, 1) {
		ops = append(ops, nftnl.Op{Verb: nftnl.Add, Obj: &knftables.Element{Map: fmt.Sprintf("dnat-tcp-%03x", i%shards),
			Key: []string{fmt.Sprint(i / shards)}, Value: []string{"10.0.0.1 . 80"}}})
	}
	return ops
}

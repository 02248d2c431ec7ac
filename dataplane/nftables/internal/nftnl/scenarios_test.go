package nftnl_test

import (
	"slices"
	"testing"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// scenarioTable is the table a conformance-suite scenario's first sync
// writes: as knftables objects (read from the fake it was synced into)
// and as the dataplane's nft -f script.
type scenarioTable struct {
	name   string
	family knftables.Family
	fake   *knftables.Fake
	script string
}

func scenarioTables(t *testing.T) []scenarioTable {
	t.Helper()
	var out []scenarioTable
	for _, s := range dataplanetest.Scenarios() {
		_, st := s.Build(t)
		fam := knftables.IPv4Family
		if s.Family == v1.IPv6Protocol {
			fam = knftables.IPv6Family
		}
		fake := knftables.NewFake(fam, nftables.DefaultTable)
		d, err := nftables.New(nftables.Config{Family: s.Family, NFT: fake})
		if err != nil {
			t.Fatal(err)
		}
		script, err := d.Render(st)
		if err != nil {
			t.Fatalf("%s: Render: %v", s.Name, err)
		}
		if err := d.Sync(t.Context(), st); err != nil {
			t.Fatalf("%s: Sync: %v", s.Name, err)
		}
		out = append(out, scenarioTable{s.Name, fam, fake, string(script)})
	}
	return out
}

// rules are the rules of a fake's table, chains in name order.
func rules(fake *knftables.Fake) []*knftables.Rule {
	var out []*knftables.Rule
	names := make([]string, 0, len(fake.Table.Chains))
	for n := range fake.Table.Chains {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		out = append(out, fake.Table.Chains[n].Rules...)
	}
	return out
}

// ops are the operations that create a fake's table in an empty kernel,
// in the order the dataplane's first sync writes them.
func ops(fake *knftables.Fake) []nftnl.Op {
	tbl := fake.Table
	out := []nftnl.Op{{Verb: nftnl.Add, Obj: &tbl.Table}}
	for _, n := range sortedKeys(tbl.Chains) {
		out = append(out, nftnl.Op{Verb: nftnl.Add, Obj: &tbl.Chains[n].Chain})
	}
	for _, n := range sortedKeys(tbl.Sets) {
		out = append(out, nftnl.Op{Verb: nftnl.Add, Obj: &tbl.Sets[n].Set})
		for _, e := range tbl.Sets[n].Elements {
			out = append(out, nftnl.Op{Verb: nftnl.Add, Obj: e})
		}
	}
	for _, n := range sortedKeys(tbl.Maps) {
		out = append(out, nftnl.Op{Verb: nftnl.Add, Obj: &tbl.Maps[n].Map})
		for _, e := range tbl.Maps[n].Elements {
			out = append(out, nftnl.Op{Verb: nftnl.Add, Obj: e})
		}
	}
	for _, r := range rules(fake) {
		out = append(out, nftnl.Op{Verb: nftnl.Add, Obj: r})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

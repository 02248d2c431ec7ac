package nftnl_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// elemTexts is a listing's elements as "key : value comment" lines, sorted.
func elemTexts(es []*knftables.Element) []string {
	var out []string
	for _, e := range es {
		s := strings.Join(e.Key, " . ")
		if len(e.Value) > 0 {
			s += " : " + strings.Join(e.Value, " . ")
		}
		if e.Comment != nil {
			s += " comment " + *e.Comment
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func ruleTexts(rs []*knftables.Rule) []string {
	var out []string
	for _, r := range rs {
		s := r.Chain + ": " + r.Rule
		if r.Comment != nil {
			s += " comment " + *r.Comment
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// TestKernelRunAndList: a scenario's table written through Run lists
// through the Conn as the fake it was rendered into lists it.
func TestKernelRunAndList(t *testing.T) {
	ctx := t.Context()
	for _, st := range scenarioTables(t) {
		if st.name != "SessionAffinity" && st.name != "LoadBalancer" && st.name != "IPv6 ExternalTrafficPolicyLocal" {
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			k := newKernelNS(t, st.family)
			ops, err := scriptOps(st.script)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.conn.Run(ctx, ops); err != nil {
				t.Fatal(err)
			}
			for _, typ := range []string{"chains", "sets", "maps"} {
				want, _ := st.fake.List(ctx, typ)
				got, err := k.conn.List(ctx, typ)
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(want)
				slices.Sort(got)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("List(%s) (-fake +kernel):\n%s", typ, d)
				}
			}
			wantAll, _ := st.fake.ListAll(ctx)
			wantAll["table"] = []string{table} // as knftables' netlink ListAll
			gotAll, err := k.conn.ListAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []map[string][]string{wantAll, gotAll} {
				for _, v := range m {
					slices.Sort(v)
				}
			}
			if d := cmp.Diff(wantAll, gotAll); d != "" {
				t.Errorf("ListAll (-fake +kernel):\n%s", d)
			}
			wantRules, _ := st.fake.ListRules(ctx, "")
			gotRules, err := k.conn.ListRules(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range wantRules {
				if canon, err := roundTrip(st.family, r.Rule); err == nil {
					c := *r
					c.Rule = canon
					wantRules[i] = &c
				}
			}
			if d := cmp.Diff(ruleTexts(wantRules), ruleTexts(gotRules)); d != "" {
				t.Errorf("ListRules (-fake +kernel):\n%s", d)
			}
			for _, typ := range []string{"set", "map"} {
				names, _ := st.fake.List(ctx, typ)
				for _, n := range names {
					want, _ := st.fake.ListElements(ctx, typ, n)
					got, err := k.conn.ListElements(ctx, typ, n)
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(elemTexts(want), elemTexts(got)); d != "" {
						t.Errorf("ListElements(%s %s) (-fake +kernel):\n%s", typ, n, d)
					}
				}
			}
		})
	}
}

func TestKernelListMissing(t *testing.T) {
	k := newKernelNS(t, knftables.IPv4Family)
	ctx := t.Context()
	if _, err := k.conn.List(ctx, "chains"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("List without a table: %v, want ENOENT", err)
	}
	if err := k.conn.Run(ctx, []nftnl.Op{{Verb: nftnl.Add, Obj: &knftables.Table{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.conn.ListElements(ctx, "set", "none"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("ListElements of a missing set: %v, want ENOENT", err)
	}
	if _, err := k.conn.ListRules(ctx, "none"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("ListRules of a missing chain: %v, want ENOENT", err)
	}
}

// base is a small table for the incremental tests.
func base() []nftnl.Op {
	s := func(x string) *string { return &x }
	return []nftnl.Op{
		{Verb: nftnl.Add, Obj: &knftables.Table{Comment: s("t")}},
		{Verb: nftnl.Add, Obj: &knftables.Chain{Name: "a"}},
		{Verb: nftnl.Add, Obj: &knftables.Chain{Name: "b"}},
		{Verb: nftnl.Add, Obj: &knftables.Map{Name: "m", Type: "ipv4_addr . inet_proto . inet_service : verdict"}},
		{Verb: nftnl.Add, Obj: &knftables.Element{Map: "m", Key: []string{"10.0.0.1", "tcp", "80"}, Value: []string{"goto a"}}},
		{Verb: nftnl.Add, Obj: &knftables.Element{Map: "m", Key: []string{"10.0.0.2 . udp . 53"}, Value: []string{"drop"}, Comment: s("ns/svc")}},
		{Verb: nftnl.Add, Obj: &knftables.Rule{Chain: "a", Rule: "ip daddr . meta l4proto . th dport vmap @m"}},
		{Verb: nftnl.Add, Obj: &knftables.Rule{Chain: "b", Rule: "jump a", Comment: s("x")}},
	}
}

func TestKernelIncremental(t *testing.T) {
	ctx := t.Context()
	k := newKernelNS(t, knftables.IPv4Family)
	if err := k.conn.Run(ctx, base()); err != nil {
		t.Fatal(err)
	}
	// A verdict changes by delete and add in one transaction.
	err := k.conn.Run(ctx, []nftnl.Op{
		{Verb: nftnl.Delete, Obj: &knftables.Element{Map: "m", Key: []string{"10.0.0.1 . tcp . 80"}}},
		{Verb: nftnl.Add, Obj: &knftables.Element{Map: "m", Key: []string{"10.0.0.1 . tcp . 80"}, Value: []string{"goto b"}}},
		{Verb: nftnl.Flush, Obj: &knftables.Chain{Name: "b"}},
		{Verb: nftnl.Add, Obj: &knftables.Rule{Chain: "b", Rule: "drop"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	els, err := k.conn.ListElements(ctx, "map", "m")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"10.0.0.1 . tcp . 80 : goto b", "10.0.0.2 . udp . 53 : drop comment ns/svc"}, elemTexts(els)); d != "" {
		t.Errorf("elements (-want +got):\n%s", d)
	}
	rules, err := k.conn.ListRules(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"b: drop"}, ruleTexts(rules)); d != "" {
		t.Errorf("rules (-want +got):\n%s", d)
	}
	// Deletes: the map's elements (one names chain b), a rule by handle,
	// then the chain it was in.
	err = k.conn.Run(ctx, []nftnl.Op{
		{Verb: nftnl.Flush, Obj: &knftables.Map{Name: "m"}},
		{Verb: nftnl.Delete, Obj: &knftables.Rule{Chain: "b", Handle: rules[0].Handle}},
		{Verb: nftnl.Delete, Obj: &knftables.Chain{Name: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	chains, _ := k.conn.List(ctx, "chains")
	els, _ = k.conn.ListElements(ctx, "map", "m")
	if !slices.Equal(chains, []string{"a"}) || len(els) != 0 {
		t.Errorf("after deletes: chains %v, elements %v", chains, elemTexts(els))
	}
}

// TestKernelFailedRun: a refused transaction changes nothing, names what
// the kernel refused, and leaves the Conn usable.
func TestKernelFailedRun(t *testing.T) {
	ctx := t.Context()
	k := newKernelNS(t, knftables.IPv4Family)
	if err := k.conn.Run(ctx, base()); err != nil {
		t.Fatal(err)
	}
	before := k.MustRun("nft", "list", "table", "ip", table)
	err := k.conn.Run(ctx, []nftnl.Op{
		{Verb: nftnl.Add, Obj: &knftables.Chain{Name: "c"}},
		{Verb: nftnl.Add, Obj: &knftables.Element{Map: "m", Key: []string{"10.0.0.3 . tcp . 80"}, Value: []string{"goto a"}}},
		{Verb: nftnl.Delete, Obj: &knftables.Element{Map: "m", Key: []string{"10.9.9.9 . tcp . 80"}}},
		{Verb: nftnl.Add, Obj: &knftables.Rule{Chain: "a", Rule: "jump c"}},
	})
	var oe *nftnl.OpError
	if !errors.Is(err, syscall.ENOENT) || !errors.As(err, &oe) || !strings.Contains(oe.Op, "10.9.9.9 . tcp . 80") {
		t.Fatalf("Run = %v, want ENOENT naming the missing element", err)
	}
	if after := k.MustRun("nft", "list", "table", "ip", table); after != before {
		t.Errorf("a refused transaction changed the table:\n%s\nthen:\n%s", before, after)
	}
	err = k.conn.Run(ctx, []nftnl.Op{{Verb: nftnl.Add, Obj: &knftables.Rule{Chain: "a", Rule: "jump nowhere"}}})
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "jump nowhere") {
		t.Errorf("Run = %v, want ENOENT naming the rule", err)
	}
	if err := k.conn.Run(ctx, []nftnl.Op{{Verb: nftnl.Add, Obj: &knftables.Chain{Name: "c"}}}); err != nil {
		t.Errorf("Run after refusals: %v", err)
	}
}

func TestKernelGeneration(t *testing.T) {
	ctx := t.Context()
	k := newKernelNS(t, knftables.IPv4Family)
	g0, err := k.conn.Generation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.conn.Run(ctx, base()); err != nil {
		t.Fatal(err)
	}
	g1, _ := k.conn.Generation(ctx)
	if c, ok := k.conn.Committed(); !ok || c != g1 {
		t.Errorf("Committed after a commit: %d, %v; the generation is %d", c, ok, g1)
	}
	k.MustRun("nft", "add", "table", "ip", "other")
	g2, _ := k.conn.Generation(ctx)
	if !(g0 < g1 && g1 < g2) {
		t.Errorf("generations %d, %d, %d: want each commit to move it", g0, g1, g2)
	}
	bad := []nftnl.Op{{Verb: nftnl.Delete, Obj: &knftables.Chain{Name: "missing"}}}
	if err := k.conn.Run(ctx, bad); err == nil {
		t.Fatal("deleting a missing chain succeeded")
	}
	if c, ok := k.conn.Committed(); ok {
		t.Errorf("Committed after a refused transaction: %d, true", c)
	}
}

// TestKernelScale measures cold syncs of dataplane-shaped tables and a
// one-element change into the largest.
func TestKernelScale(t *testing.T) {
	ctx := t.Context()
	sizes := []int{10_000, 100_000}
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			k := newKernelNS(t, knftables.IPv4Family)
			ops := nftnl.ServiceOps(n, 10)
			start := time.Now()
			if err := k.conn.Run(ctx, ops); err != nil {
				t.Fatal(err)
			}
			cold := time.Since(start)
			one := []nftnl.Op{
				{Verb: nftnl.Delete, Obj: &knftables.Element{Map: "dnat-tcp-000", Key: []string{"0"}}},
				{Verb: nftnl.Add, Obj: &knftables.Element{Map: "dnat-tcp-000", Key: []string{"0"}, Value: []string{"10.200.0.1 . 8080"}}},
			}
			start = time.Now()
			const rounds = 100
			for range rounds {
				if err := k.conn.Run(ctx, one); err != nil {
					t.Fatal(err)
				}
			}
			change := time.Since(start) / rounds
			t.Logf("%d services × 10 endpoints (%d operations): cold %v; one-element change %v", n, len(ops), cold, change)
			els, err := k.conn.ListElements(ctx, "map", "dnat-tcp-001")
			if err != nil || len(els) == 0 {
				t.Errorf("ListElements: %d, %v", len(els), err)
			}
		})
	}
}

// TestKernelForeignRule: a rule nftnl did not write lists as a
// *RuleError, not as wrong text; ListRuleHeads, which reads no
// expression, lists it like any other.
func TestKernelForeignRule(t *testing.T) {
	ctx := t.Context()
	k := newKernelNS(t, knftables.IPv4Family)
	if err := k.conn.Run(ctx, base()); err != nil {
		t.Fatal(err)
	}
	k.MustRun("nft", "add", "rule", "ip", table, "a", "ip", "daddr", "10.0.0.1", "counter", "drop")
	_, err := k.conn.ListRules(ctx, "a")
	var re *nftnl.RuleError
	if !errors.As(err, &re) || re.Chain != "a" {
		t.Errorf("ListRules = %v, want a *RuleError in chain a", err)
	}
	heads, err := k.conn.ListRuleHeads(ctx, "a")
	if err != nil || len(heads) == 0 || heads[len(heads)-1].Chain != "a" || heads[len(heads)-1].Rule != "" {
		t.Errorf("ListRuleHeads = %v, %v; want the foreign rule last, without text", heads, err)
	}
}

package xtables

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// TestKernelSumOf: the fingerprint over netlink (nft backend) and the one
// from a listing (the same runner seen through a wrapper) follow the same
// changes: a foreign rule in an owned chain and a deleted jump move it;
// zeroed counters, a foreign rule in a built-in chain and a rewrite of
// the same rules do not.
func TestKernelSumOf(t *testing.T) {
	netns.Require(t, "iptables-nft", "iptables-nft-restore", "iptables-nft-save")
	ns := netns.New(t, "xtsum")
	ctx := context.Background()
	var r *ExecRunner
	if err := ns.Do(func() (err error) {
		r, err = NewExecRunner(ExecConfig{Variant: "nft"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if r.Backend() != "nft" {
		t.Skipf("iptables-nft reports backend %q", r.Backend())
	}
	o := &OwnedChains{
		Chains: []Chain{{"nat", "DEMO-SERVICES"}, {"filter", "DEMO-FILTER"}},
		Jumps: []Jump{
			{Table: "nat", Chain: "OUTPUT", Rule: []string{"-m", "comment", "--comment", "demo chains", "-j", "DEMO-SERVICES"}},
			{Table: "filter", Chain: "INPUT", Rule: []string{"-m", "comment", "--comment", "demo chains", "-j", "DEMO-FILTER"}},
		},
	}
	in := "*nat\n:DEMO-SERVICES - [0:0]\n-A DEMO-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -m comment --comment \"demo web\" -j DNAT --to-destination 10.0.0.1:8080\nCOMMIT\n" +
		"*filter\n:DEMO-FILTER - [0:0]\n-A DEMO-FILTER -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n"
	sums := map[string]func(context.Context, *OwnedChains) (uint64, error){
		"netlink": SumOf(r), "listing": SumOf(struct{ Runner }{r}),
	}
	sum := func() map[string]uint64 {
		t.Helper()
		out := map[string]uint64{}
		if err := ns.Do(func() error {
			for name, fn := range sums {
				s, err := fn(ctx, o)
				if err != nil {
					return err
				}
				out[name] = s
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	write := func(in string) {
		t.Helper()
		if err := ns.Do(func() error {
			if err := r.Restore(ctx, RestoreBytes(in)); err != nil {
				return err
			}
			l, err := o.List(ctx, r)
			if err != nil {
				return err
			}
			return o.Hook(ctx, r, l)
		}); err != nil {
			t.Fatal(err)
		}
	}
	write(in)
	base := sum()
	for _, step := range []struct {
		name  string
		cmd   []string
		moves bool
	}{
		{"counters zeroed", []string{"iptables-nft", "-t", "nat", "-Z"}, false},
		{"foreign rule in a built-in chain", []string{"iptables-nft", "-t", "nat", "-I", "OUTPUT", "1", "-s", "192.0.2.1/32", "-j", "RETURN"}, false},
		{"foreign rule atop an owned chain", []string{"iptables-nft", "-t", "nat", "-I", "DEMO-SERVICES", "1", "-j", "RETURN"}, true},
		{"same rules rewritten", nil, false},
		{"jump deleted", []string{"iptables-nft", "-t", "filter", "-F", "INPUT"}, true},
		{"same rules rewritten and hooked", nil, false},
	} {
		if step.cmd == nil {
			write(in)
		} else {
			ns.MustRun(step.cmd[0], step.cmd[1:]...)
		}
		got := sum()
		want := map[string]bool{"netlink": step.moves, "listing": step.moves}
		moved := map[string]bool{}
		for name := range sums {
			moved[name] = got[name] != base[name]
		}
		if d := cmp.Diff(want, moved); d != "" {
			t.Errorf("%s: fingerprint moved (-want +got):\n%s", step.name, d)
		}
	}
}

// TestKernelLegacyGeneration: the legacy backend's fingerprint moves with
// a chain created, a rule added, inserted, deleted or flushed, and not with
// counters zeroed; a rule replaced by one of the same size is the one
// change it misses (the periodic Reconcile finds that).
func TestKernelLegacyGeneration(t *testing.T) {
	netns.Require(t, "iptables-legacy", "ip6tables-legacy")
	ns := netns.New(t, "xtlegacy")
	ctx := context.Background()
	gens := map[string]func(context.Context) (uint32, error){}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if err := ns.Do(func() error {
			r, err := NewExecRunner(ExecConfig{Variant: "legacy", Family: family})
			if err != nil {
				return err
			}
			if r.Backend() != "legacy" {
				t.Skipf("iptables-legacy reports backend %q", r.Backend())
			}
			gens[string(family)] = GenerationOf(r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() map[string]uint32 {
		t.Helper()
		out := map[string]uint32{}
		if err := ns.Do(func() error {
			for name, gen := range gens {
				g, err := gen(ctx)
				if err != nil {
					return err
				}
				out[name] = g
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	last := read()
	for _, step := range []struct {
		name  string
		cmd   []string
		moves map[string]bool
	}{
		{"nat table loaded, chain created", []string{"iptables-legacy", "-t", "nat", "-N", "DEMO"}, map[string]bool{"IPv4": true}},
		{"rule added", []string{"iptables-legacy", "-t", "nat", "-A", "DEMO", "-d", "10.96.0.10/32", "-j", "RETURN"}, map[string]bool{"IPv4": true}},
		{"counters zeroed", []string{"iptables-legacy", "-t", "nat", "-Z"}, nil},
		{"foreign rule atop", []string{"iptables-legacy", "-t", "nat", "-I", "DEMO", "1", "-j", "RETURN"}, map[string]bool{"IPv4": true}},
		{"rule deleted", []string{"iptables-legacy", "-t", "nat", "-D", "DEMO", "1"}, map[string]bool{"IPv4": true}},
		{"rule replaced by one of the same size", []string{"iptables-legacy", "-t", "nat", "-R", "DEMO", "1", "-d", "10.96.0.11/32", "-j", "RETURN"}, nil},
		{"chain flushed", []string{"iptables-legacy", "-t", "nat", "-F", "DEMO"}, map[string]bool{"IPv4": true}},
		{"IPv6 chain created", []string{"ip6tables-legacy", "-t", "filter", "-N", "DEMO"}, map[string]bool{"IPv6": true}},
	} {
		ns.MustRun(step.cmd[0], step.cmd[1:]...)
		got := read()
		moved := map[string]bool{}
		for name := range gens {
			if got[name] != last[name] {
				moved[name] = true
			}
		}
		if d := cmp.Diff(step.moves, moved, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: fingerprint moved (-want +got):\n%s", step.name, d)
		}
		last = got
	}
}

package xtables

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
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

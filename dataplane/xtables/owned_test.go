package xtables

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOwnedChains: the life of a program's helper chains on a FakeRunner:
// written, hooked, listed, disturbed by another program, found changed,
// removed, and removed again from an empty kernel.
func TestOwnedChains(t *testing.T) {
	ctx := context.Background()
	r := NewFakeRunner()
	o := &OwnedChains{
		Chains: []Chain{{"nat", "DEMO-SERVICES"}, {"filter", "DEMO-FILTER"}},
		Jumps: []Jump{
			{Table: "nat", Chain: "OUTPUT", Rule: []string{"-m", "comment", "--comment", "demo", "-j", "DEMO-SERVICES"}},
			{Table: "filter", Chain: "INPUT", Rule: []string{"-m", "comment", "--comment", "demo", "-j", "DEMO-FILTER"}},
		},
	}
	in := "*nat\n:DEMO-SERVICES - [0:0]\n-A DEMO-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8080\nCOMMIT\n" +
		"*filter\n:DEMO-FILTER - [0:0]\nCOMMIT\n"
	if err := r.Restore(ctx, RestoreBytes(in)); err != nil {
		t.Fatal(err)
	}
	saves := &countingSaves{Runner: r}
	before, err := o.List(ctx, saves)
	if err != nil {
		t.Fatal(err)
	}
	if saves.n != 2 {
		t.Errorf("List ran %d saves, want one per table (2)", saves.n)
	}
	if d := cmp.Diff([]string{"nat chain OUTPUT: no jump to DEMO-SERVICES", "filter chain INPUT: no jump to DEMO-FILTER"}, o.MissingJumps(before)); d != "" {
		t.Errorf("before Hook, missing jumps (-want +got):\n%s", d)
	}
	wantIn := "*nat\n-I OUTPUT 1 -m comment --comment demo -j DEMO-SERVICES\nCOMMIT\n" +
		"*filter\n-I INPUT 1 -m comment --comment demo -j DEMO-FILTER\nCOMMIT\n"
	if d := cmp.Diff(wantIn, o.HookInput(before)); d != "" {
		t.Errorf("HookInput (-want +got):\n%s", d)
	}
	if err := o.Hook(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	want, err := o.List(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if missing := o.MissingJumps(want); len(missing) != 0 {
		t.Errorf("after Hook, missing jumps: %q", missing)
	}
	if in := o.HookInput(want); in != "" {
		t.Errorf("after Hook, HookInput = %q, want none", in)
	}
	if changed := o.Changed(want, want); len(changed) != 0 {
		t.Errorf("a listing differs from itself: %q", changed)
	}
	if err := r.Restore(ctx, RestoreBytes("*nat\n:DEMO-SERVICES - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := o.List(ctx, r)
	if d := cmp.Diff([]string{"nat chain DEMO-SERVICES: 0 rules, want 1"}, o.Changed(want, got)); d != "" {
		t.Errorf("after a flush (-want +got):\n%s", d)
	}
	for range 2 {
		if err := o.Remove(ctx, r); err != nil {
			t.Fatal(err)
		}
		if chains := r.Ruleset().Chains("nat"); len(chains) != 4 || len(r.Ruleset().Rules("nat", "OUTPUT")) != 0 {
			t.Errorf("after Remove, nat has chains %q and OUTPUT rules %q", chains, r.Ruleset().Rules("nat", "OUTPUT"))
		}
	}
}

// countingSaves counts the Runner's saves.
type countingSaves struct {
	Runner
	n int
}

func (c *countingSaves) Save(ctx context.Context, table string) ([]byte, error) {
	c.n++
	return c.Runner.Save(ctx, table)
}

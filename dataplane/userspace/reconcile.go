package userspace

import (
	"context"
	"fmt"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

var (
	_ dataplane.Reconciler    = (*Dataplane)(nil)
	_ dataplane.KernelWatcher = (*Dataplane)(nil)
)

// Reconcile implements dataplane.Reconciler. In redirect mode it lists the
// chains and compares each with its listing taken right after the last
// write, looks for the jumps into them and for the policy route; anything
// different rewrites every chain (a few rules per service), the jumps and
// the route. In unprivileged mode nobody else can change the forwarders:
// it finds nothing.
func (d *Dataplane) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.redir
	if r == nil || !r.valid || r.listed == nil {
		return dataplane.Drift{}, nil
	}
	repaired, err := r.drift(ctx)
	if err != nil {
		r.valid = false
		return dataplane.Drift{}, fmt.Errorf("userspace: reconcile: %w", err)
	}
	if len(repaired) == 0 {
		return dataplane.Drift{}, nil
	}
	slices.Sort(repaired)
	if _, err := d.redirectSync(ctx, nil, true); err != nil {
		return dataplane.Drift{}, fmt.Errorf("userspace: repair redirect rules: %w", err)
	}
	return dataplane.Drift{Repaired: repaired}, nil
}

// drift describes how the kernel differs from the last write.
func (r *redirector) drift(ctx context.Context) ([]string, error) {
	owned := r.owned()
	got, err := owned.List(ctx, r.runner)
	if err != nil {
		return nil, err
	}
	out := owned.Changed(r.listed, got)
	jumps, err := owned.MissingJumps(ctx, r.runner)
	if err != nil {
		return nil, err
	}
	missing, err := r.routing.Missing(ctx, r.policy)
	if err != nil {
		return nil, err
	}
	return append(append(out, jumps...), missing...), nil
}

// KernelChanged implements dataplane.KernelWatcher: in redirect mode the
// chains the node's own traffic and the traffic entering it meet first
// (a listing of each, as Reconcile makes of every chain) and the policy
// route are its canary.
func (d *Dataplane) KernelChanged(ctx context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.redir
	if r == nil || r.listed == nil {
		return false, nil
	}
	for _, c := range []xtables.Chain{{Table: "nat", Name: r.services}, {Table: "mangle", Name: r.divert}} {
		want := r.listed[c]
		rules, ok, err := r.runner.ListChain(ctx, c.Table, c.Name)
		if err != nil {
			return false, fmt.Errorf("userspace: canary: %w", err)
		}
		if !ok || !slices.Equal(rules, want) {
			return true, nil
		}
	}
	missing, err := r.routing.Missing(ctx, r.policy)
	if err != nil {
		return false, fmt.Errorf("userspace: canary: %w", err)
	}
	return len(missing) > 0, nil
}

// owned are the redirect rules' chains, heads first in each table, and
// the jumps into them.
func (r *redirector) owned() *xtables.OwnedChains {
	o := &xtables.OwnedChains{Jumps: r.jumps()}
	for _, table := range redirectTables {
		for _, c := range r.chains(table) {
			o.Chains = append(o.Chains, xtables.Chain{Table: table, Name: c})
		}
	}
	return o
}

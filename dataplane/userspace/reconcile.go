package userspace

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
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
	got, err := r.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range r.allChains() {
		if want := r.listed[c]; !slices.Equal(want, got[c]) {
			out = append(out, fmt.Sprintf("%s chain %s: %d rules, want %d", c.table, c.chain, len(got[c]), len(want)))
		}
	}
	for _, j := range r.jumps() {
		rules, _, err := r.runner.ListChain(ctx, j.Table, j.Chain)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(rules, func(s string) bool { return strings.HasSuffix(s, " -j "+j.Rule[len(j.Rule)-1]) }) {
			out = append(out, fmt.Sprintf("%s chain %s: no jump to %s", j.Table, j.Chain, j.Rule[len(j.Rule)-1]))
		}
	}
	missing, err := r.routing.Missing(ctx, r.policy)
	if err != nil {
		return nil, err
	}
	return append(out, missing...), nil
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
	for _, c := range []tableChain{{"nat", r.services}, {"mangle", r.divert}} {
		want := r.listed[c]
		rules, ok, err := r.runner.ListChain(ctx, c.table, c.chain)
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

type tableChain struct{ table, chain string }

func (r *redirector) allChains() []tableChain {
	var out []tableChain
	for _, table := range redirectTables {
		for _, c := range r.chains(table) {
			out = append(out, tableChain{table, c})
		}
	}
	return out
}

// list returns the rules of the chains as "iptables -S" prints them.
func (r *redirector) list(ctx context.Context) (map[tableChain][]string, error) {
	out := map[tableChain][]string{}
	for _, c := range r.allChains() {
		rules, _, err := r.runner.ListChain(ctx, c.table, c.chain)
		if err != nil {
			return nil, err
		}
		out[c] = rules
	}
	return out, nil
}

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
// three chains and compares each with its listing taken right after the
// last write, and looks for the jumps into them; anything different
// rewrites all three chains (a few rules per service) and the jumps. In
// unprivileged mode nobody else can change the forwarders: it finds
// nothing.
func (d *Dataplane) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.redir
	if r == nil || !r.valid || r.listed == nil {
		return dataplane.Drift{}, nil
	}
	got, err := r.list(ctx)
	if err != nil {
		r.valid = false
		return dataplane.Drift{}, fmt.Errorf("userspace: reconcile: %w", err)
	}
	var repaired []string
	for _, c := range r.allChains() {
		if want := r.listed[c]; !slices.Equal(want, got[c]) {
			repaired = append(repaired, fmt.Sprintf("%s chain %s: %d rules, want %d", c.table, c.chain, len(got[c]), len(want)))
		}
	}
	for _, j := range r.jumps() {
		rules, _, err := r.runner.ListChain(ctx, j.Table, j.Chain)
		if err != nil {
			r.valid = false
			return dataplane.Drift{}, fmt.Errorf("userspace: reconcile: %w", err)
		}
		if !slices.ContainsFunc(rules, func(s string) bool { return strings.HasSuffix(s, " -j "+j.Rule[len(j.Rule)-1]) }) {
			repaired = append(repaired, fmt.Sprintf("%s chain %s: no jump to %s", j.Table, j.Chain, j.Rule[len(j.Rule)-1]))
		}
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

// KernelChanged implements dataplane.KernelWatcher: in redirect mode the
// service chain's last rule, the jump to node ports, is its canary.
func (d *Dataplane) KernelChanged(ctx context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.redir
	if r == nil || r.listed == nil {
		return false, nil
	}
	want := r.listed[tableChain{"nat", r.services}]
	rules, ok, err := r.runner.ListChain(ctx, "nat", r.services)
	if err != nil {
		return false, fmt.Errorf("userspace: canary: %w", err)
	}
	return !ok || len(rules) == 0 || len(want) == 0 || rules[len(rules)-1] != want[len(want)-1], nil
}

type tableChain struct{ table, chain string }

func (r *redirector) allChains() []tableChain {
	return []tableChain{{"nat", r.services}, {"nat", r.nodePorts}, {"filter", r.reject}}
}

// list returns the rules of the three chains as "iptables -S" prints them.
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

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
	if len(repaired) > 0 {
		if _, err := d.redirectSync(ctx, nil, true); err != nil {
			return dataplane.Drift{}, fmt.Errorf("userspace: repair redirect rules: %w", err)
		}
	}
	repaired = append(repaired, r.repaired...)
	r.repaired = nil
	if len(repaired) == 0 {
		return dataplane.Drift{}, nil
	}
	slices.Sort(repaired)
	return dataplane.Drift{Repaired: slices.Compact(repaired)}, nil
}

// foreignChange reports whether the rules must be written whole rather
// than in part: when someone else may have changed them since they were
// last seen as written (always, with a backend that numbers no changes)
// and a listing finds that they did, or cannot tell. A partial write would
// leave such a change in place, and the listing after it, which drift is
// measured against, would take it for the dataplane's own.
func (r *redirector) foreignChange(ctx context.Context) bool {
	if r.listed == nil {
		return true
	}
	if r.gen != nil && r.seen {
		if g, err := r.gen(ctx); err == nil && g == r.seenGen {
			return false
		}
	}
	drift, err := r.drift(ctx)
	if err != nil {
		r.log.Error(err, "Cannot tell whether someone else changed the redirect rules; writing them whole")
		return true
	}
	r.repaired = append(r.repaired, drift...)
	return len(drift) > 0
}

// drift describes how the kernel differs from the last write.
func (r *redirector) drift(ctx context.Context) ([]string, error) {
	owned := r.owned()
	got, err := owned.List(ctx, r.runner)
	if err != nil {
		return nil, err
	}
	out := owned.Changed(r.listed, got)
	jumps := owned.MissingJumps(got)
	missing, err := r.routing.Missing(ctx, r.policy)
	if err != nil {
		return nil, err
	}
	return append(append(out, jumps...), missing...), nil
}

// KernelChanged implements dataplane.KernelWatcher. In redirect mode it
// reads the rules' generation (xtables.GenerationOf) and, only when it
// moved since the rules were last seen as written, lists every chain and
// jump as Reconcile does: a flush, a deleted redirect rule or a foreign
// rule in any chain is seen at the next poll. With a Runner that has no
// generation the chains the node's own traffic and the traffic entering
// it meet first are listed. The policy route is checked every time.
func (d *Dataplane) KernelChanged(ctx context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.redir
	// After a failed write the next one writes everything whatever the
	// kernel holds, and Reconcile waits for it.
	if r == nil || r.listed == nil || !r.valid {
		return false, nil
	}
	if len(r.repaired) > 0 {
		// What a write found and undid, for the Reconcile this
		// answer calls for to report.
		return true, nil
	}
	if r.gen != nil {
		g, err := r.gen(ctx)
		if err != nil {
			return false, fmt.Errorf("userspace: canary: %w", err)
		}
		if !r.seen || g != r.seenGen {
			drift, err := r.drift(ctx)
			if err != nil {
				return false, fmt.Errorf("userspace: canary: %w", err)
			}
			if len(drift) > 0 {
				return true, nil
			}
			r.seen, r.seenGen = true, g
			return false, nil
		}
	} else {
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
	}
	missing, err := r.routing.Missing(ctx, r.policy)
	if err != nil {
		return false, fmt.Errorf("userspace: canary: %w", err)
	}
	return len(missing) > 0, nil
}

// noteGeneration records the rules' generation after a write, so that the
// canary lists nothing for it: the write started from rules seen as
// written (foreignChange) or wrote them whole. A change of someone else's
// committed while the rules were written is missed until the next
// Reconcile.
func (r *redirector) noteGeneration(ctx context.Context) {
	r.seen = false
	if r.gen == nil {
		return
	}
	if g, err := r.gen(ctx); err == nil {
		r.seen, r.seenGen = true, g
	}
}

// owned are the redirect rules' chains, heads first in each table, and
// the jumps into them.
func (r *redirector) owned() *xtables.OwnedChains {
	o := &xtables.OwnedChains{Jumps: r.jumps(), Logger: r.log}
	for _, table := range redirectTables {
		for _, c := range r.chains(table) {
			o.Chains = append(o.Chains, xtables.Chain{Table: table, Name: c})
		}
	}
	return o
}

package nftables

import (
	"context"
	"fmt"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
)

// Reconcile implements dataplane.Reconciler: it reads the table back and
// repairs, in one transaction, what differs from the last successful
// Sync. The fixed part (base and fixed chains, sets and maps) is compared
// by rule counts, and rewritten whole when any of it differs; the
// per-service chains by rule count and the signature comment of their
// first rule; elements exactly. An untouched table costs the listing and
// no transaction. Over netlink the ruleset generation read before the
// listing is recorded, so the canary after a Reconcile, repairing or not,
// reads the table only once someone commits again.
func (d *Dataplane) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prog == nil {
		return dataplane.Drift{}, nil
	}
	gen, numbered, err := d.generation(ctx)
	if err != nil {
		return dataplane.Drift{}, fmt.Errorf("nftables: reconcile: %w", err)
	}
	k, err := d.readBack(ctx, false)
	if err != nil {
		d.forget()
		return dataplane.Drift{}, fmt.Errorf("nftables: reconcile: %w", err)
	}
	var drift []string
	p := &plan{}
	if why := d.staticDrift(k); len(why) > 0 {
		drift = append(drift, why...)
		d.writeStatic(p, d.st, false)
	}
	d.diffPlan(p, d.prog, k, &drift)
	// The table as listed is the one at gen (or a later one, which then
	// moved the generation): with no repair it is as programmed there,
	// and a repair's commit is taken for the Dataplane's own only when
	// nobody committed since gen, as after a Sync.
	d.seen, d.seenGen = numbered, gen
	if len(p.ops) == 0 {
		return dataplane.Drift{}, nil
	}
	if _, _, err := d.run(ctx, p, d.cfg.MaxOperations); err != nil {
		d.metrics.fullFailures.Inc()
		d.forget()
		return dataplane.Drift{}, fmt.Errorf("nftables: reconcile: %w", err)
	}
	slices.Sort(drift)
	return dataplane.Drift{Repaired: drift}, nil
}

// staticDrift describes how the fixed part of table k differs from d.st.
func (d *Dataplane) staticDrift(k *kernelTable) []string {
	var why []string
	if !k.exists {
		return []string{"table " + d.ipX + " " + d.cfg.Table + ": missing"}
	}
	for _, c := range append(baseChainNames(), staticChains[:]...) {
		have, ok := k.chains[c]
		switch want := len(d.st.rules[c]); {
		case !ok:
			why = append(why, "chain "+c+": missing")
		case have.rules != want:
			why = append(why, fmt.Sprintf("chain %s: %d rules, want %d", c, have.rules, want))
		}
	}
	for _, sd := range d.sets() {
		if sd.isMap && !k.maps[sd.name] || !sd.isMap && !k.sets[sd.name] {
			why = append(why, sd.name+": missing")
		}
	}
	if d.st.nodePortIPs != nil {
		have := k.elems[setNodePortIPs]
		switch {
		case !k.sets[setNodePortIPs]:
			why = append(why, setNodePortIPs+": missing")
		case len(have) != len(d.st.nodePortIPs) || slices.ContainsFunc(d.st.nodePortIPs, func(ip string) bool { _, ok := have[ip]; return !ok }):
			why = append(why, fmt.Sprintf("%s: %d elements, want %v", setNodePortIPs, len(have), d.st.nodePortIPs))
		}
	}
	return why
}

// generations is a kernel that numbers its commits: nftables' ruleset
// generation, which every transaction in the network namespace moves.
type generations interface {
	Generation(ctx context.Context) (uint32, error)
}

// KernelChanged implements dataplane.KernelWatcher: it reports whether the
// table differs from the last successful Sync, as Reconcile would find it,
// without repairing anything. Over netlink the ruleset generation is
// asked first, and the table is read only when some transaction (anyone's)
// committed since the table was last seen as programmed.
func (d *Dataplane) KernelChanged(ctx context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prog == nil {
		return false, nil
	}
	gen, numbered, err := d.generation(ctx)
	if err != nil {
		return false, fmt.Errorf("nftables: canary: %w", err)
	}
	if d.seen && gen == d.seenGen {
		return false, nil
	}
	k, err := d.readBack(ctx, false)
	if err != nil {
		return false, fmt.Errorf("nftables: canary: %w", err)
	}
	drift := d.staticDrift(k)
	d.diffPlan(&plan{}, d.prog, k, &drift)
	if len(drift) > 0 {
		d.log.V(2).Info("Table changed under the dataplane", "first", drift[0], "changes", len(drift))
		return true, nil
	}
	d.seen, d.seenGen = numbered, gen
	return false, nil
}

// generation reads the ruleset generation, when the kernel numbers its
// commits (numbered).
func (d *Dataplane) generation(ctx context.Context) (gen uint32, numbered bool, err error) {
	g, numbered := d.kernel.(generations)
	if !numbered {
		return 0, false, nil
	}
	gen, err = g.Generation(ctx)
	return gen, true, err
}

// unchanged reports whether nobody committed since the table was last
// seen as programmed: read before one of the Dataplane's own commits.
func (d *Dataplane) unchanged(ctx context.Context) bool {
	g, ok := d.kernel.(generations)
	if !ok || !d.seen {
		return false
	}
	gen, err := g.Generation(ctx)
	return err == nil && gen == d.seenGen
}

// committer is a kernel that reads the generation as a transaction
// commits, sparing a round trip after each sync.
type committer interface {
	Committed() (uint32, bool)
}

// noteGeneration records the generation after the Dataplane's own commit,
// so that KernelChanged does not read the table for it, when the table
// was unchanged before it: otherwise the commit (a partial one, say)
// would take someone else's change for its own, and the canary would
// miss it until the next Reconcile. A commit of someone else's during
// the Dataplane's is missed until the next one, or the next Reconcile.
func (d *Dataplane) noteGeneration(ctx context.Context, unchanged bool) {
	d.seen = false
	if !unchanged {
		return
	}
	if c, ok := d.kernel.(committer); ok {
		d.seenGen, d.seen = c.Committed()
		return
	}
	if g, ok := d.kernel.(generations); ok {
		if gen, err := g.Generation(ctx); err == nil {
			d.seen, d.seenGen = true, gen
		}
	}
}

// TableChains counts the chains of the dataplane's table in the kernel: 0
// when there is no table. It is what Cleanup would remove.
func (d *Dataplane) TableChains(ctx context.Context) (int, error) {
	all, err := d.kernel.ListAll(ctx)
	if notFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("nftables: list table %s %s: %w", d.ipX, d.cfg.Table, err)
	}
	return len(all["chain"]), nil
}

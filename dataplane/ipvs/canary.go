package ipvs

import (
	"context"
	"fmt"

	"github.com/proxykit/proxykit/dataplane"
)

var _ dataplane.KernelWatcher = (*Dataplane)(nil)

// canary is what KernelChanged compares the iptables rules with, taken
// when the last successful Sync or Reconcile ended. (The IPVS table and
// the sets are compared with the desired table, which says what they
// hold.)
type canary struct {
	// gen is the generation of the iptables rules (xtables.GenerationOf)
	// at which the owned chains were last seen as programmed, and rules
	// their fingerprint then (xtables.SumOf); seen is unset when there is
	// none to go by.
	gen   uint32
	rules uint64
	seen  bool
}

// KernelChanged implements dataplane.KernelWatcher. Its canary looks, in
// turn, at:
//   - the addresses: one dump of the family's addresses tells whether the
//     node gained or lost an address that serves node ports, or whether
//     someone removed the link or unbound a service address from it;
//   - the IPVS table: one read of /proc/net/ip_vs, whose fingerprint of
//     the dataplane's virtual servers and their real servers (without the
//     connection counters) is compared with the one the desired table
//     says they have (a virtual or real server deleted, added or changed,
//     "ipvsadm -C");
//   - the sets: one listing of each of the dataplane's ipsets, compared
//     with the members it programmed;
//   - the iptables rules: only when their generation
//     (xtables.GenerationOf) moved since they were last seen as
//     programmed, a fingerprint of the owned chains and of the jumps
//     into them (xtables.SumOf: over netlink with the nft backend, no
//     iptables-save; from a listing with legacy).
//
// The table and the sets are compared with what the dataplane wants, so a
// change another program made is reported until a Sync or Reconcile
// repairs it, whenever it was made. The rules' fingerprint is taken after
// each write: a change made while the dataplane was writing them is found
// by the next Reconcile instead; one made before a Sync that does not
// rewrite them is not taken as the Sync's own (the Sync leaves that
// fingerprint as it was).
func (d *Dataplane) KernelChanged(ctx context.Context) (bool, error) {
	// A sync or reconcile under way answers for now (it leaves what
	// someone else moved for the next poll): waiting for it would count
	// its seconds as the poll's, which the proxy spaces nine times over.
	if !d.mu.TryLock() {
		return false, nil
	}
	defer d.mu.Unlock()
	if !d.valid || d.last == nil {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	for _, look := range []struct {
		what string
		fn   func(context.Context) (bool, error)
	}{
		{"addresses", func(context.Context) (bool, error) { return d.addrsChanged() }},
		{"IPVS table", d.tableChanged},
		{"ipsets", d.setsChanged},
		{"iptables rules", d.rulesChanged},
	} {
		changed, err := look.fn(ctx)
		if err != nil {
			return false, fmt.Errorf("ipvs: canary: %s: %w", look.what, err)
		}
		if changed {
			d.log.V(2).Info("Canary: kernel changed", "what", look.what)
			return true, nil
		}
	}
	return false, nil
}

// noteCanary takes the rules' fingerprint after a write, unless keep
// says someone else had moved them before it: a sync that repairs nothing
// must not take another program's change as its own, or the canary would
// miss it until the next Reconcile. A failure to read only leaves the
// rules unwatched until the next write.
func (d *Dataplane) noteCanary(ctx context.Context, keep bool) {
	old := d.canary
	d.canary = canary{}
	switch {
	case keep:
		d.canary = old
	case d.gen != nil:
		g, err := d.gen(ctx)
		if err != nil {
			return
		}
		if old.seen && g == old.gen {
			// Nothing written since the fingerprint.
			d.canary = old
			return
		}
		if sum, err := d.rulesSum(ctx, d.owned()); err == nil {
			d.canary = canary{gen: g, rules: sum, seen: true}
		}
	}
}

// rulesMoved compares the rules' fingerprint with the canary's, before a
// sync that does not rewrite them writes (one netlink round trip, plus
// the fingerprint when their generation moved): what moved is someone
// else's doing, and stays for the canary to report. The generation alone
// would not do: any nftables commit in the namespace moves it (the other
// family's dataplane, a container runtime's), and keeping the old
// fingerprint for that would report the sync's own rewrite of its chains
// as a change.
func (d *Dataplane) rulesMoved(ctx context.Context) bool {
	if d.gen == nil || !d.canary.seen {
		return false
	}
	g, err := d.gen(ctx)
	if err != nil || g == d.canary.gen {
		return false
	}
	sum, err := d.rulesSum(ctx, d.owned())
	return err != nil || sum != d.canary.rules
}

// tableChanged reads the kernel's table once and compares the
// fingerprint of the dataplane's virtual servers in it with the one the
// desired table says they have.
func (d *Dataplane) tableChanged(context.Context) (bool, error) {
	if d.table == nil {
		return false, nil
	}
	var sum uint64
	if err := d.table(func(text []byte) {
		scanTable(text, d.ipv6, func(k vsKey, s uint64) {
			if _, ok := d.owner[k]; ok {
				sum += s
			}
		})
	}); err != nil {
		return false, err
	}
	return sum != d.expect, nil
}

// setsChanged lists the dataplane's ipsets and compares their members
// with those it programmed: the entries its services need and, in the
// set of its addresses, the addresses it bound.
func (d *Dataplane) setsChanged(context.Context) (bool, error) {
	want := make([]int, numSets)
	for k, n := range d.entries {
		if n > 0 {
			want[k.set]++
		}
	}
	want[setIPs] += len(d.binds)
	for id := range numSets {
		res, err := d.nl.IpsetList(d.names.set[id])
		if err != nil || len(res.Entries) != want[id] {
			// A set someone destroyed, or added to or took from.
			return true, nil
		}
		for i := range res.Entries {
			e := entryFromNetlink(setSpecs[id].typ, &res.Entries[i])
			if id == setIPs && d.binds[e.ip] > 0 || d.entries[setEntry{id, e}.key()] > 0 {
				continue
			}
			return true, nil
		}
	}
	return false, nil
}

// rulesChanged fingerprints the owned chains and the built-in chains'
// jumps (xtables.SumOf: over netlink with the nft backend) when the
// rules' generation moved since they were last seen as programmed.
func (d *Dataplane) rulesChanged(ctx context.Context) (bool, error) {
	if d.gen == nil || !d.canary.seen {
		return false, nil
	}
	g, err := d.gen(ctx)
	if err != nil {
		return false, err
	}
	if g == d.canary.gen {
		return false, nil
	}
	sum, err := d.rulesSum(ctx, d.owned())
	if err != nil {
		return false, err
	}
	if sum != d.canary.rules {
		return true, nil
	}
	d.canary.gen = g
	return false, nil
}

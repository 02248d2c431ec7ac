package ipvs

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"

	"github.com/proxykit/proxykit/dataplane"
)

var _ dataplane.KernelWatcher = (*Dataplane)(nil)

// canary is what KernelChanged compares the kernel with, taken when the
// last successful Sync or Reconcile ended.
type canary struct {
	// table fingerprints the family's part of the IPVS table (tableSum);
	// 0 when it could not be read.
	table uint64
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
//   - the IPVS table: one read of /proc/net/ip_vs, the family's virtual
//     and real servers without the connection counters, whose fingerprint
//     is compared with the one taken after the last write (a virtual or
//     real server deleted, added or changed, "ipvsadm -C");
//   - the sets: one listing of each of the dataplane's ipsets, compared
//     with the members it programmed;
//   - the iptables rules: only when their generation
//     (xtables.GenerationOf) moved since they were last seen as
//     programmed, a fingerprint of the owned chains and of the jumps
//     into them (xtables.SumOf: over netlink with the nft backend, no
//     iptables-save; from a listing with legacy).
//
// A change another program made while the dataplane was writing is taken
// into the fingerprints and found by the next Reconcile instead; one made
// before a Sync that does not rewrite what it changed is not (the Sync
// leaves that fingerprint as it was).
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

// noteCanary takes the canary's fingerprints of what the dataplane just
// wrote, but those keep says someone else had moved before the write: a
// sync that repairs nothing must not take another program's change as
// its own, or the canary would miss it until the next Reconcile. A
// failure to read only leaves that part unwatched until the next write.
func (d *Dataplane) noteCanary(ctx context.Context, keep moved) {
	old := d.canary
	d.canary = canary{}
	if keep.table {
		d.canary.table = old.table
	} else if sum, ok, err := d.tableSum(); err == nil && ok {
		d.canary.table = sum
	}
	switch {
	case keep.gen:
		d.canary.gen, d.canary.rules, d.canary.seen = old.gen, old.rules, old.seen
	case d.gen != nil:
		g, err := d.gen(ctx)
		if err != nil {
			return
		}
		if old.seen && g == old.gen {
			// Nothing written since the fingerprint.
			d.canary.gen, d.canary.rules, d.canary.seen = g, old.rules, true
			return
		}
		if sum, err := d.rulesSum(ctx, d.owned()); err == nil {
			d.canary.gen, d.canary.rules, d.canary.seen = g, sum, true
		}
	}
}

// moved says which of the canary's fingerprints the kernel no longer
// matches.
type moved struct{ table, gen bool }

// canaryMoved compares the IPVS table's fingerprint and the rules' with
// the canary's, before a sync that repairs neither writes (one read of
// /proc/net/ip_vs and one netlink round trip, plus the rules' fingerprint
// when their generation moved): what moved is someone else's doing, and
// stays for the canary to report. The generation alone would not do:
// any nftables commit in the namespace moves it (the other family's
// dataplane, a container runtime's), and keeping the old fingerprint for
// that would report the sync's own rewrite of its chains as a change.
func (d *Dataplane) canaryMoved(ctx context.Context) moved {
	var m moved
	if d.canary.table != 0 {
		sum, ok, err := d.tableSum()
		m.table = err == nil && ok && sum != d.canary.table
	}
	if d.gen != nil && d.canary.seen {
		if g, err := d.gen(ctx); err == nil && g != d.canary.gen {
			sum, err := d.rulesSum(ctx, d.owned())
			m.gen = err != nil || sum != d.canary.rules
		}
	}
	return m
}

func (d *Dataplane) tableChanged(context.Context) (bool, error) {
	if d.canary.table == 0 {
		return false, nil
	}
	sum, ok, err := d.tableSum()
	if err != nil || !ok {
		return false, err
	}
	return sum != d.canary.table, nil
}

// tableSum fingerprints the virtual servers of the dataplane's family and
// their real servers as the table lists them, without the connection
// counters that traffic moves; never 0. ok is false when the kernel has
// no table to read.
func (d *Dataplane) tableSum() (uint64, bool, error) {
	if d.table == nil {
		return 0, false, nil
	}
	text, err := d.table()
	if err != nil {
		return 0, false, err
	}
	h := fnv.New64a()
	mine := false
	for line := range bytes.Lines(text) {
		first, rest := nextField(line)
		if len(first) == 0 {
			continue
		}
		limit := -1
		if string(first) != "->" {
			// A virtual server: IPv6 addresses are bracketed, in the
			// kernel's listing and the fake's alike.
			mine = bytes.IndexByte(line, '[') >= 0 == d.ipv6
		} else {
			limit = 4 // "->", address, forwarding method, weight
		}
		if !mine {
			continue
		}
		for f := first; len(f) > 0 && limit != 0; f, rest = nextField(rest) {
			h.Write(f)
			h.Write(space)
			limit--
		}
		h.Write(newline)
	}
	return h.Sum64() | 1, true, nil
}

var space, newline = []byte{' '}, []byte{'\n'}

// nextField splits the first field, separated by blanks, off b.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isBlank(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

// setsChanged lists the dataplane's ipsets and compares their members
// with those it programmed: the entries its services need and, in the
// set of its addresses, the addresses it bound.
func (d *Dataplane) setsChanged(context.Context) (bool, error) {
	want := make([]int, numSets)
	for se, n := range d.entries {
		if n > 0 {
			want[se.set]++
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
			if id == setIPs && d.binds[e.ip] > 0 || d.entries[setEntry{id, e}] > 0 {
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

package ipvs

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
)

// Reconcile implements dataplane.Reconciler: it diffs the kernel against
// the State of the last successful Sync, as a full Sync does, so that
// only what differs is rewritten, and returns what that was. It also
// deletes the drained real servers whose connections have ended.
func (d *Dataplane) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drain()
	if !d.valid || d.last == nil {
		return dataplane.Drift{}, nil
	}
	changes, _, err := d.fullSync(ctx, d.last)
	if err != nil {
		d.valid = false
		return dataplane.Drift{}, fmt.Errorf("ipvs: reconcile: %w", err)
	}
	d.noteCanary(ctx, moved{})
	slices.Sort(changes)
	return dataplane.Drift{Repaired: changes}, nil
}

func mapKeys[K comparable, V any](m map[K]V) iter.Seq[K] { return maps.Keys(m) }

// Leftovers counts what Cleanup would remove.
type Leftovers struct {
	// VirtualServers on addresses the dataplane bound or on its node ports.
	VirtualServers int
	// Addresses it bound to its link.
	Addresses int
	// Sets and Chains of its prefix that exist.
	Sets, Chains int
	// Link is whether its dummy link exists (left empty by a cleanup that
	// failed half-way, it holds no address).
	Link bool
}

// Empty reports whether there is nothing to remove.
func (l Leftovers) Empty() bool { return l == Leftovers{} }

// Leftovers reads what the dataplane, or an earlier process with the same
// Config, left in the kernel.
func (d *Dataplane) Leftovers(ctx context.Context) (Leftovers, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var l Leftovers
	have := map[setID]map[entry]bool{}
	for id := range numSets {
		have[id] = map[entry]bool{}
		res, err := d.nl.IpsetList(d.names.set[id])
		if err != nil {
			continue
		}
		l.Sets++
		for i := range res.Entries {
			have[id][entryFromNetlink(setSpecs[id].typ, &res.Entries[i])] = true
		}
	}
	l.Addresses = len(have[setIPs])
	if _, err := d.nl.LinkByName(d.cfg.Link); err == nil {
		l.Link = true
	}
	kernel, err := d.ipvs.GetServices()
	if err != nil {
		return l, fmt.Errorf("ipvs: list virtual servers: %w", err)
	}
	for _, ks := range kernel {
		if ks.FWMark == 0 && d.owns(have, keyOfService(ks)) {
			l.VirtualServers++
		}
	}
	for _, c := range d.owned().Chains {
		_, exists, err := d.runner.ListChain(ctx, c.Table, c.Name)
		if err != nil {
			return l, fmt.Errorf("ipvs: %w", err)
		}
		if exists {
			l.Chains++
		}
	}
	return l, nil
}

package ipvs

import (
	"context"
	"fmt"
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
	changes, _, err := d.fullSync(ctx, d.last, true)
	if err != nil {
		d.valid = false
		return dataplane.Drift{}, fmt.Errorf("ipvs: reconcile: %w", err)
	}
	d.noteCanary(ctx, false)
	slices.Sort(changes)
	return dataplane.Drift{Repaired: changes}, nil
}

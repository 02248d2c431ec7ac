package iptables

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/proxykit/proxykit/dataplane/xtables"
)

// ownedChains returns the chains of table that belong to the prefix, as
// save lists them.
func (d *Dataplane) ownedChains(table string, save []byte) []string {
	var out []string
	for _, c := range d.parseListing(table, save).chainNames() {
		if d.names.owned(table, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// cleanup unhooks the chains and deletes every chain of the prefix, in one
// restore per table, then what iptables-nft left empty
// (xtables.RemoveEmptyHooks). It goes on after errors so that as much as
// possible is removed, and returns them all.
func (d *Dataplane) cleanup(ctx context.Context) error {
	var errs []error
	for _, j := range d.jumps() {
		if err := d.runner.DeleteJump(ctx, j); err != nil {
			errs = append(errs, err)
		}
	}
	for _, table := range []string{"nat", "filter"} {
		save, err := d.runner.Save(ctx, table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := d.deleteOwnedChains(ctx, table, save); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := xtables.RemoveEmptyHooks(ctx, d.runner, d.log, table, xtables.HookedChains(d.jumps(), table)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteOwnedChains deletes the chains of the prefix that save lists.
func (d *Dataplane) deleteOwnedChains(ctx context.Context, table string, save []byte) error {
	chains := d.ownedChains(table, save)
	if len(chains) == 0 {
		return nil
	}
	var b writer
	b.line("*", table)
	for _, c := range chains {
		b.line(":", c, " - [0:0]")
	}
	for _, c := range chains {
		b.line("-X ", c)
	}
	b.line("COMMIT")
	if err := d.runner.Restore(ctx, xtables.RestoreBytes(b.Bytes())); err != nil {
		return fmt.Errorf("cleanup %s: %w", table, err)
	}
	return nil
}

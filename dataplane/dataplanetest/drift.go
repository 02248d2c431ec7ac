package dataplanetest

import (
	"context"
	"errors"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
)

// Disturbance is a change another program makes to what a dataplane
// programmed.
type Disturbance int

const (
	// FlushAll removes everything, as a firewall reload, "iptables -F" or
	// "nft flush ruleset" does: the dataplane's canary goes with it.
	FlushAll Disturbance = iota
	// RemoveOne removes or empties one object programmed for a service (a
	// chain, a map element, a virtual server).
	RemoveOne
	// AddForeign adds something the dataplane did not program inside what
	// it owns (a rule at the top of its dispatch chain, an element, a real
	// server) that changes where packets go.
	AddForeign
)

var disturbanceNames = [...]string{FlushAll: "flush all", RemoveOne: "remove one", AddForeign: "add foreign"}

func (d Disturbance) String() string {
	if d >= 0 && int(d) < len(disturbanceNames) {
		return disturbanceNames[d]
	}
	return "unknown disturbance"
}

// ErrCannotDisturb is returned by Disturb for a disturbance the harness
// cannot make; the suite then skips it.
var ErrCannotDisturb = errors.New("dataplanetest: harness cannot make this disturbance")

// ErrNotImplemented is returned by a Drifter's Reconcile or KernelChanged
// when the dataplane under test does not implement dataplane.Reconciler or
// dataplane.KernelWatcher.
var ErrNotImplemented = errors.New("dataplanetest: the dataplane does not implement this")

// Drifter is implemented by a Harness whose dataplane programs something
// other programs can change. The suite then checks the reconcile contract
// (dataplane.Reconciler): after each Disturbance, Reconcile reports drift
// and every packet goes where it went before; a second Reconcile finds
// nothing; and, when the dataplane is a dataplane.KernelWatcher, its
// canary notices every Disturbance and not a repaired kernel.
type Drifter interface {
	// Disturb changes what the dataplane programmed, behind its back.
	Disturb(ctx context.Context, d Disturbance) error
	// Reconcile calls the dataplane's Reconcile, where the dataplane runs
	// (in its network namespace, say).
	Reconcile(ctx context.Context) (dataplane.Drift, error)
	// KernelChanged calls the dataplane's KernelChanged likewise.
	KernelChanged(ctx context.Context) (bool, error)
}

// checkDrift runs the reconcile contract on a harness that has programmed
// st, for scenario s.
func checkDrift(t *testing.T, h Harness, s Scenario, st *dataplane.State) {
	d, ok := h.(Drifter)
	if !ok {
		return
	}
	ctx := t.Context()
	reconcile := func(when string) dataplane.Drift {
		t.Helper()
		drift, err := d.Reconcile(ctx)
		if errors.Is(err, ErrNotImplemented) {
			t.Fatalf("%s: the harness can disturb the dataplane, which does not implement dataplane.Reconciler: it could never repair what others change", h.Name())
		}
		if err != nil {
			t.Fatalf("%s: Reconcile %s: %v", h.Name(), when, err)
		}
		return drift
	}
	watched := func(when string, want bool) {
		t.Helper()
		got, err := d.KernelChanged(ctx)
		if errors.Is(err, ErrNotImplemented) {
			return
		}
		if err != nil {
			t.Fatalf("%s: KernelChanged %s: %v", h.Name(), when, err)
		}
		if got != want {
			t.Errorf("%s: KernelChanged %s = %v, want %v", h.Name(), when, got, want)
		}
	}
	if drift := reconcile("of an untouched dataplane"); !drift.Empty() {
		t.Errorf("%s: Reconcile right after Sync found drift: %s", h.Name(), drift)
	}
	watched("of an untouched dataplane", false)
	for _, dist := range []Disturbance{FlushAll, RemoveOne, AddForeign} {
		err := d.Disturb(ctx, dist)
		if errors.Is(err, ErrCannotDisturb) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: Disturb (%s): %v", h.Name(), dist, err)
		}
		watched("after "+dist.String(), true)
		if drift := reconcile("after " + dist.String()); drift.Empty() {
			t.Errorf("%s: Reconcile after %s found no drift", h.Name(), dist)
		}
		watched("after repairing "+dist.String(), false)
		if drift := reconcile("after repairing " + dist.String()); !drift.Empty() {
			t.Errorf("%s: a second Reconcile after %s still found drift: %s", h.Name(), dist, drift)
		}
		for _, c := range s.Packets {
			t.Run("repaired after "+dist.String()+"/"+c.Name, func(t *testing.T) {
				checkTrace(t, h, c.Packet, st.LookupMode(modeOf(h), c.Packet))
			})
		}
	}
}

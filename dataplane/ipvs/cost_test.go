package ipvs

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	v1 "k8s.io/api/core/v1"
)

// countingKernel is a Kernel of fakes that counts the reads of the whole
// IPVS table.
type countingKernel struct {
	Kernel
	reads int
}

func (k *countingKernel) Handles() handle.Handles {
	h := k.Kernel.Handles()
	table := h.Table
	h.Table = func(scan func([]byte)) error {
		k.reads++
		return table(scan)
	}
	return h
}

// TestIdleAndChangeCalls: an idle resync (a Sync of a new State with
// nothing changed, or of the same State) makes no kernel call at all, and
// neither it nor a one-endpoint change reads the whole IPVS table, which
// only the canary and full syncs do.
func TestIdleAndChangeCalls(t *testing.T) {
	ctx := t.Context()
	c, st := newCluster(50, 4, v1.ProtocolTCP)
	_, f := newFakeDataplane(t, Config{})
	k := &countingKernel{Kernel: f.kernel()}
	d, err := New(Config{Kernel: k, Runner: f.runner})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	// The first sync creates every virtual server: the table has
	// nothing to tell it.
	if k.reads != 0 {
		t.Errorf("the first sync read the table %d times, want none", k.reads)
	}
	for _, tc := range []struct {
		name string
		next func() *dataplane.State
		// calls are the IPVS and netlink calls.
		calls int
	}{
		{"idle resync", func() *dataplane.State { return c.b.Build().States[0] }, 0},
		{"idle resync of the same State", func() *dataplane.State { return st }, 0},
		// A dump of the virtual server's real servers, the deletion of
		// one, and its LOOP-BACK member removed.
		{"one endpoint removed", func() *dataplane.State { return c.withoutEndpoint(7, 1) }, 3},
	} {
		reads, calls, restores := k.reads, f.calls(), len(f.runner.Restores())
		st = tc.next()
		if err := d.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		if got := k.reads - reads; got != 0 {
			t.Errorf("%s: read the whole IPVS table %d times, want none", tc.name, got)
		}
		if got := f.calls() - calls; got != tc.calls {
			t.Errorf("%s: %d kernel calls, want %d", tc.name, got, tc.calls)
		}
		if got := len(f.runner.Restores()) - restores; got != 0 {
			t.Errorf("%s: %d iptables restores, want none", tc.name, got)
		}
		if rep := d.LastSync(); rep.Full {
			t.Errorf("%s: a full sync", tc.name)
		}
	}
	if changed, err := d.KernelChanged(ctx); err != nil || changed {
		t.Errorf("KernelChanged = %v, %v; want false", changed, err)
	}
	if k.reads != 1 {
		t.Errorf("the canary read the table %d times, want 1", k.reads)
	}
}

// TestChangeAllocationsFlat: a one-endpoint change allocates the same at
// 1,000 and 10,000 services, and an idle resync next to nothing (the
// package documentation's cost model; BenchmarkSyncEndpointChange and
// BenchmarkSyncIdle measure the same).
func TestChangeAllocationsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10k services")
	}
	ctx := t.Context()
	const runs = 20
	change := map[int]float64{}
	for _, n := range []int{1000, 10000} {
		c, st := newCluster(n, 10, v1.ProtocolTCP)
		d, _ := newFakeDataplane(t, Config{})
		if err := d.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		// The States are built outside the measured function: building
		// them is the Builder's cost. AllocsPerRun runs it once more.
		var states []*dataplane.State
		for i := range runs + 1 {
			states = append(states, c.toggleEndpoint(n/2, i+1))
		}
		i := 0
		change[n] = testing.AllocsPerRun(runs, func() {
			if err := d.Sync(ctx, states[i]); err != nil {
				t.Fatal(err)
			}
			i++
		})
		idle := c.b.Build().States[0]
		if allocs := testing.AllocsPerRun(runs, func() {
			if err := d.Sync(ctx, idle); err != nil {
				t.Fatal(err)
			}
		}); allocs > 10 {
			t.Errorf("%d services: an idle resync allocates %.0f objects, want at most 10", n, allocs)
		}
		t.Logf("%d services: a one-endpoint change allocates %.0f objects", n, change[n])
	}
	if change[10000] > change[1000]+5 {
		t.Errorf("a one-endpoint change allocates %.0f objects at 10k services, %.0f at 1k", change[10000], change[1000])
	}
}

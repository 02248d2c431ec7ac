package ipvs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// The benchmarks below run the dataplane on package ipvstest's fakes, so
// that they measure its own work (and the fakes'): BenchmarkKernelSync
// times the same operations through a real kernel. Their allocation
// counts are what the package documentation's cost model states.

var benchSizes = []int{1000, 10000}

// BenchmarkSyncFirst is the first Sync of n services of 10 endpoints on
// an empty kernel.
func BenchmarkSyncFirst(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			_, st := newCluster(n, 10, v1.ProtocolTCP)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				d, _ := newFakeDataplane(b, Config{})
				b.StartTimer()
				if err := d.Sync(b.Context(), st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSyncEndpointChange is a Sync after one endpoint of one service
// moved: it must cost the same at every size.
func BenchmarkSyncEndpointChange(b *testing.B) {
	benchSyncAfterFirst(b, func(c *cluster, _ *Dataplane, _ fakes, n, i int) *dataplane.State {
		return c.toggleEndpoint(n/2, i)
	}, nil)
}

// BenchmarkSyncIdle is a Sync of a State in which nothing changed, as the
// proxy's periodic resync builds one.
func BenchmarkSyncIdle(b *testing.B) {
	benchSyncAfterFirst(b, func(c *cluster, _ *Dataplane, _ fakes, _, _ int) *dataplane.State {
		return c.b.Build().States[0]
	}, func(b *testing.B, d *Dataplane) {
		if d.LastSync().Full {
			b.Fatal("an idle resync was a full one")
		}
	})
}

// BenchmarkSyncForcedFull is the Sync after a failed one, which diffs the
// whole of what the dataplane owns in the kernel; the failed sync carries
// a one-endpoint change, as bench/'s does.
func BenchmarkSyncForcedFull(b *testing.B) {
	benchSyncAfterFirst(b, func(c *cluster, d *Dataplane, f fakes, n, i int) *dataplane.State {
		return failedSync(b, d, f, c, n, i)
	}, func(b *testing.B, d *Dataplane) {
		if !d.LastSync().Full {
			b.Fatal("the sync after a failure was not a full one")
		}
	})
}

// benchSyncAfterFirst measures, at each size, the Sync of the State next
// prepares (untimed) on a dataplane that has programmed the cluster once,
// checking each timed Sync with check (if set).
func benchSyncAfterFirst(b *testing.B, next func(c *cluster, d *Dataplane, f fakes, n, round int) *dataplane.State, check func(*testing.B, *Dataplane)) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			c, st := newCluster(n, 10, v1.ProtocolTCP)
			d, f := newFakeDataplane(b, Config{})
			if err := d.Sync(b.Context(), st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				s := next(c, d, f, n, i)
				b.StartTimer()
				if err := d.Sync(b.Context(), s); err != nil {
					b.Fatal(err)
				}
				if check != nil {
					check(b, d)
				}
			}
		})
	}
}

// failedSync makes a Sync of a one-endpoint change fail at its first
// IPVS call and returns the State it could not program.
func failedSync(b testing.TB, d *Dataplane, f fakes, c *cluster, n, round int) *dataplane.State {
	b.Helper()
	next := c.toggleEndpoint(n/3, round)
	f.ipvs.FailNext(errors.New("injected"))
	if err := d.Sync(b.Context(), next); err == nil {
		b.Fatal("the sync meant to fail succeeded")
	}
	return next
}

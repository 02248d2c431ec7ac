//go:build !race

package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/iptables"
	pkipvs "github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	pknftables "github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// The speed check: every mode's cost, in heap allocations (which, unlike
// times, do not move with the machine's load), held to what its package
// documentation promises. It lives here, in the benchmark's module, because
// CI runs this module's tests without the race detector (.ci/run: cd bench
// && go test ./...), whose instrumentation changes allocation counts; the
// library's suite runs only under -race, and this file is left out of a
// -race build.
//
// Each mode runs on its fake kernel, as the benchmark's compute rows do:
// iptables with a Runner that takes every restore and discards it, nftables
// encoding its netlink batches and discarding them (NewEncodeOnly), IPVS
// on ipvstest's fakes of the IPVS table, the ipsets and the link, its
// iptables rules discarded, userspace in unprivileged mode with every
// frontend left unserved (Config.Listen false: its sockets are opened when
// a frontend appears and closed when it goes, never on an endpoint
// change, and 10k of them would be 10k ports of the test machine).
//
// What fails it:
//   - a one-endpoint change whose allocations grow with the cluster: at
//     costLarge services more than costFlatFactor times the objects it
//     allocates at costSmall plus costFlatSlack, or the bytes likewise
//     plus costFlatSlackBytes. A change is O(changes): at ten times the
//     services only the persistent maps behind the State are a level
//     deeper, a few objects and a kilobyte more (measured: iptables 138
//     and 140 objects, nftables 334 and 335, IPVS 72 and 74, userspace 57
//     and 59), while one allocation per service would add 9,000 objects
//     and a copy of one pointer per service 72 KiB;
//   - a first sync, a forced full resync (the sync after a failed write,
//     here after one change) or an idle resync at costLarge services
//     allocating more objects (or, the first two, bytes) than the mode's
//     bound: about 1.5 times what it allocated when the bound was set
//     (costModes; twice for the few dozen objects of an idle resync), so
//     that a regression by half fails while the allocations' own jitter
//     (a few objects) never does.
//
// go test -v -run TestCost prints the figures the packages' cost models
// quote.

// The cluster sizes compared, each service with costEndpoints endpoints.
const (
	costSmall     = 1000
	costLarge     = 10000
	costEndpoints = 10
)

// A one-endpoint change at costLarge services may allocate at most
// costFlatFactor times what it does at costSmall, plus costFlatSlack
// objects or costFlatSlackBytes bytes.
const (
	costFlatFactor     = 1.25
	costFlatSlack      = 25
	costFlatSlackBytes = 4096
)

// costMode is one mode on its fake kernel and its bounds at costLarge
// services.
type costMode struct {
	name string
	new  func(t *testing.T) *costSystem
	// firstAllocs, fullAllocs and idleAllocs bound the objects a first
	// sync, a forced full resync and an idle resync allocate; firstMB
	// and fullMB the bytes (in millions) of the first two.
	firstAllocs, fullAllocs, idleAllocs float64
	firstMB, fullMB                     float64
}

// costModes are the modes and their bounds, set on 2026-12-08 from these
// figures (first sync, forced full resync and idle resync; objects, then
// the first two's bytes): iptables 210,596, 658 and 29 objects, 60.0 and
// 5.6 MB; nftables 224,350, 32,375 and 157, 47.7 and 15.1 MB; IPVS (after
// issue 41) 221,663, 10,291 and 26, 85.3 and 28.7 MB; userspace 1,551,011,
// 90,161 and 27, 121.8 and 22.6 MB.
var costModes = []costMode{
	{name: "iptables", new: newIPTablesCost, firstAllocs: 320_000, fullAllocs: 1_000, idleAllocs: 60, firstMB: 90, fullMB: 8.5},
	{name: "nftables", new: newNFTablesCost, firstAllocs: 340_000, fullAllocs: 50_000, idleAllocs: 250, firstMB: 72, fullMB: 23},
	{name: "ipvs", new: newIPVSCost, firstAllocs: 330_000, fullAllocs: 16_000, idleAllocs: 60, firstMB: 128, fullMB: 43},
	{name: "userspace", new: newUserspaceCost, firstAllocs: 2_300_000, fullAllocs: 140_000, idleAllocs: 60, firstMB: 185, fullMB: 34},
}

// costSystem is a proxykit dataplane on its fake kernel.
type costSystem struct {
	*proxykitSystem
	// kernel returns the calls made to the fake kernel so far, and the
	// bytes handed to it.
	kernel func() (calls, bytes int)
	// forceFull makes the next sync a full one.
	forceFull func(r *costRun) error
}

// meter counts calls and bytes.
type meter struct{ calls, bytes int }

func (m *meter) add(bytes int) { m.calls, m.bytes = m.calls+1, m.bytes+bytes }

func (m *meter) totals() (int, int) { return m.calls, m.bytes }

// meteredRunner counts the calls made to an xtables.Runner and the bytes
// restored.
type meteredRunner struct {
	xtables.Runner
	m *meter
}

func (r meteredRunner) Restore(ctx context.Context, in xtables.RestoreInput) error {
	r.m.add(in.Len())
	return r.Runner.Restore(ctx, in)
}

func (r meteredRunner) Save(ctx context.Context, table string) ([]byte, error) {
	r.m.add(0)
	return r.Runner.Save(ctx, table)
}

func (r meteredRunner) EnsureJump(ctx context.Context, j xtables.Jump) error {
	r.m.add(0)
	return r.Runner.EnsureJump(ctx, j)
}

func (r meteredRunner) DeleteJump(ctx context.Context, j xtables.Jump) error {
	r.m.add(0)
	return r.Runner.DeleteJump(ctx, j)
}

func (r meteredRunner) ListChain(ctx context.Context, table, chain string) ([]string, bool, error) {
	r.m.add(0)
	return r.Runner.ListChain(ctx, table, chain)
}

// failedWrite forces a full sync as the benchmark does: the next write
// fails, with a change to write, and the sync after it is full.
func failedWrite(r *costRun) error {
	r.sys.be.failNext()
	r.change()
	if err := r.sys.sync(); err == nil {
		return fmt.Errorf("the sync meant to fail succeeded")
	}
	return nil
}

func newIPTablesCost(t *testing.T) *costSystem {
	r, m := &pkRunner{}, &meter{}
	d, err := iptables.New(iptables.Config{Runner: meteredRunner{r, m}, Sysctl: sysctl.NewFake(nil), Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return &costSystem{newProxykitSystem(d, v1.IPv4Protocol, r), m.totals, failedWrite}
}

func newNFTablesCost(t *testing.T) *costSystem {
	b, m := &encodeBackend{}, &meter{}
	d, err := pknftables.NewEncodeOnly(pknftables.Config{Logger: logr.Discard()}, func(batch []byte) error {
		m.add(len(batch))
		return b.send(batch)
	})
	if err != nil {
		t.Fatal(err)
	}
	return &costSystem{newProxykitSystem(d, v1.IPv4Protocol, b), m.totals, failedWrite}
}

// newIPVSCost counts the IPVS table's and the link's calls (the ipsets'
// are netlink calls of the link's fake) and the iptables restores, whose
// bytes are the only ones counted: the fakes take no encoded messages.
func newIPVSCost(t *testing.T) *costSystem {
	k, m := ipvstest.NewKernel(), &meter{}
	k.Netlink.SetLinkAddrs("eth0", netip.MustParseAddr(nodeIP))
	b := ipvsBackend{pkRunner: &pkRunner{}, kernel: k}
	d, err := pkipvs.New(pkipvs.Config{Kernel: k, Runner: meteredRunner{b.pkRunner, m}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	kernel := func() (int, int) { return m.calls + b.calls(), m.bytes }
	return &costSystem{newProxykitSystem(d, v1.IPv4Protocol, b), kernel, failedWrite}
}

// newUserspaceCost serves no frontend (see above), so it makes no kernel
// call. Unprivileged mode has no write to fail: what makes its sync full
// is a change of the node (or settings), here its zone.
func newUserspaceCost(t *testing.T) *costSystem {
	d, err := userspace.New(userspace.Config{
		Listen:         func(userspace.Destination) (netip.AddrPort, bool) { return netip.AddrPort{}, false },
		LocalAddresses: &userspace.FakeLocalAddresses{},
		Logger:         logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Cleanup(context.Background()) })
	zone := false
	moveNode := func(r *costRun) error {
		n := r.c.node.DeepCopy()
		if zone = !zone; zone {
			n.Labels = map[string]string{v1.LabelTopologyZone: "zone-b"}
		}
		r.sys.updateNode(n)
		return nil
	}
	return &costSystem{newProxykitSystem(d, v1.IPv4Protocol, noKernel{}), func() (int, int) { return 0, 0 }, moveNode}
}

// noKernel is the backend of a mode that writes nothing.
type noKernel struct{}

func (noKernel) failNext()          { panic("no write to fail") }
func (noKernel) beginSync()         {}
func (noKernel) written() int       { return 0 }
func (noKernel) firstInput() []byte { return nil }

// costRun is one mode at one cluster size, first sync done.
type costRun struct {
	c   *cluster
	sys *costSystem
	// changes counts the endpoint changes made, each to another service.
	changes int
}

// costFigures are one operation's cost, per operation.
type costFigures struct {
	allocs, allocBytes, calls, written float64
}

func (f costFigures) String() string {
	return fmt.Sprintf("%9.0f allocs %12.0f B  %5.1f calls %10.0f B written", f.allocs, f.allocBytes, f.calls, f.written)
}

// newCostRun makes a cluster of n services, gives it to a new system of
// mode and measures the first sync (a Build and a Sync).
func newCostRun(t *testing.T, mode costMode, n int) (*costRun, costFigures) {
	r := &costRun{c: newCluster(workload{Services: n, Endpoints: costEndpoints}), sys: mode.new(t)}
	r.sys.updateNode(r.c.node)
	for i := range r.c.services {
		r.sys.updateService(nil, r.c.services[i])
		r.sys.updateSlice(nil, r.c.slices[i])
	}
	c0, w0 := r.sys.kernel()
	s, err := measure(opFirst, r.sys.sync)
	if err != nil {
		t.Fatal(err)
	}
	c1, w1 := r.sys.kernel()
	return r, costFigures{float64(s.Allocs), float64(s.AllocBytes), float64(c1 - c0), float64(w1 - w0)}
}

// nextChange moves one endpoint of the next service, each change's
// another, and returns the updated slices.
func (r *costRun) nextChange() []sliceUpdate {
	i := (r.changes*7919 + 13) % len(r.c.services)
	r.changes++
	return r.c.changeEndpoint(i, r.changes%costEndpoints)
}

// change makes the next change and hands the Builder the slices.
func (r *costRun) change() {
	for _, u := range r.nextChange() {
		r.sys.updateSlice(u.old, u.new)
	}
}

// bench measures op with testing.Benchmark, prepare (if set) run outside
// the count before every batch ops, and requires wantFull of every sync it
// measures. (Stopping the timer reads the allocation counts, which stops
// the world: once per cheap op, it would take most of the test's time.)
func (r *costRun) bench(prepare func() error, batch int, op func() error, wantFull bool) (costFigures, error) {
	var err error
	calls, written := 0, 0
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		calls, written = 0, 0
		for i := 0; i < b.N && err == nil; i++ {
			if prepare != nil && i%batch == 0 {
				b.StopTimer()
				err = prepare()
				b.StartTimer()
			}
			c0, w0 := r.sys.kernel()
			if err == nil {
				err = op()
			}
			if err == nil && r.sys.full != wantFull {
				err = fmt.Errorf("the sync measured was full %v, want %v", r.sys.full, wantFull)
			}
			c1, w1 := r.sys.kernel()
			calls, written = calls+c1-c0, written+w1-w0
		}
	})
	if err != nil {
		return costFigures{}, err
	}
	n := float64(res.N)
	return costFigures{float64(res.MemAllocs) / n, float64(res.MemBytes) / n, float64(calls) / n, float64(written) / n}, nil
}

// endpointChange measures a one-endpoint change: the slice handed to the
// Builder, then a Build and a Sync. Making the new slices is not counted:
// costBatch of them are queued at a time, each handed over in turn.
func (r *costRun) endpointChange() (costFigures, error) {
	var queue [][]sliceUpdate
	return r.bench(func() error {
		// Topped up, never dropped: the cluster holds the changes made.
		for len(queue) < costBatch {
			queue = append(queue, r.nextChange())
		}
		return nil
	}, costBatch, func() error {
		for _, u := range queue[0] {
			r.sys.updateSlice(u.old, u.new)
		}
		queue = queue[1:]
		return r.sys.sync()
	}, false)
}

// costBatch is how many changes endpointChange makes at a time.
const costBatch = 256

// forcedFull measures a forced full resync after one change. One is made
// first, unmeasured: a full sync may re-render every service changed since
// the last full one (iptables does), and the changes measured before, as
// many as the machine's speed let testing.Benchmark make, are not part of
// it.
func (r *costRun) forcedFull() (costFigures, error) {
	if err := r.sys.forceFull(r); err != nil {
		return costFigures{}, err
	}
	if err := r.sys.sync(); err != nil {
		return costFigures{}, err
	}
	return r.bench(func() error { return r.sys.forceFull(r) }, 1, r.sys.sync, true)
}

func (r *costRun) idle() (costFigures, error) { return r.bench(nil, 1, r.sys.sync, false) }

// TestCost holds every mode to its cost: a one-endpoint change costs the
// same at costSmall and costLarge services, and a first sync, a forced
// full resync and an idle resync at costLarge stay within the mode's
// bounds.
func TestCost(t *testing.T) {
	var table strings.Builder
	for _, mode := range costModes {
		t.Run(mode.name, func(t *testing.T) {
			fig := map[string]costFigures{}
			measureCost(t, mode, costSmall, fig)
			measureCost(t, mode, costLarge, fig)
			for _, op := range costOps {
				fmt.Fprintf(&table, "%-10s %-25s %s\n", mode.name, op, fig[op])
			}
			for _, b := range breaches(mode, fig) {
				t.Error(b)
			}
		})
	}
	t.Logf("per operation, %d endpoints per service:\n%s", costEndpoints, table.String())
}

// costOps are the operations measured, as named in the figures.
var costOps = []string{
	"first sync, 1k", "one-endpoint change, 1k",
	"first sync, 10k", "one-endpoint change, 10k", "idle resync, 10k", "forced full resync, 10k",
}

// measureCost measures mode at n services into fig: the first sync and a
// one-endpoint change, and at costLarge the resyncs.
func measureCost(t *testing.T, mode costMode, n int, fig map[string]costFigures) {
	r, first := newCostRun(t, mode, n)
	size := fmt.Sprintf(", %dk", n/1000)
	fig["first sync"+size] = first
	type costOp struct {
		name string
		f    func() (costFigures, error)
	}
	ops := []costOp{{"one-endpoint change", r.endpointChange}}
	if n == costLarge {
		ops = append(ops, costOp{"idle resync", r.idle}, costOp{"forced full resync", r.forcedFull})
	}
	for _, op := range ops {
		f, err := op.f()
		if err != nil {
			t.Fatalf("%s at %d services: %v", op.name, n, err)
		}
		fig[op.name+size] = f
	}
}

// costBreach is a broken promise: what, the figure and its limit.
type costBreach struct {
	what         string
	got, allowed float64
}

func (b costBreach) String() string {
	return fmt.Sprintf("%s: %.0f, over the limit of %.0f", b.what, b.got, b.allowed)
}

// breaches lists the promises of mode that fig breaks.
func breaches(mode costMode, fig map[string]costFigures) []costBreach {
	var out []costBreach
	small, large := fig["one-endpoint change, 1k"], fig["one-endpoint change, 10k"]
	for _, c := range []struct {
		what                string
		small, large, slack float64
	}{
		{"objects a one-endpoint change allocates at 10k services", small.allocs, large.allocs, costFlatSlack},
		{"bytes a one-endpoint change allocates at 10k services", small.allocBytes, large.allocBytes, costFlatSlackBytes},
	} {
		if limit := costFlatFactor*c.small + c.slack; c.large > limit {
			out = append(out, costBreach{c.what, c.large, limit})
		}
	}
	for _, b := range []struct {
		op, key string
		bound   float64
	}{
		{"a first sync", "first sync, 10k", mode.firstAllocs},
		{"a forced full resync", "forced full resync, 10k", mode.fullAllocs},
		{"an idle resync", "idle resync, 10k", mode.idleAllocs},
	} {
		if got := fig[b.key].allocs; got > b.bound {
			out = append(out, costBreach{"objects " + b.op + " allocates at 10k services", got, b.bound})
		}
	}
	for _, b := range []struct {
		op, key string
		bound   float64
	}{
		{"a first sync", "first sync, 10k", mode.firstMB},
		{"a forced full resync", "forced full resync, 10k", mode.fullMB},
	} {
		if got := fig[b.key].allocBytes / 1e6; got > b.bound {
			out = append(out, costBreach{"megabytes " + b.op + " allocates at 10k services", got, b.bound})
		}
	}
	return out
}

// TestBreaches checks the check: a change that grows with the cluster, in
// objects or in bytes, and every bound passed are each a breach.
func TestBreaches(t *testing.T) {
	mode := costMode{firstAllocs: 1000, fullAllocs: 100, idleAllocs: 10, firstMB: 2, fullMB: 1}
	within := map[string]costFigures{
		"one-endpoint change, 1k":  {allocs: 100, allocBytes: 10000},
		"one-endpoint change, 10k": {allocs: 150, allocBytes: 16596},
		"first sync, 10k":          {allocs: 1000, allocBytes: 2e6},
		"forced full resync, 10k":  {allocs: 100, allocBytes: 1e6},
		"idle resync, 10k":         {allocs: 10},
	}
	over := map[string]costFigures{
		"one-endpoint change, 1k":  {allocs: 100, allocBytes: 10000},
		"one-endpoint change, 10k": {allocs: 151, allocBytes: 16597},
		"first sync, 10k":          {allocs: 1001, allocBytes: 2.5e6},
		"forced full resync, 10k":  {allocs: 101, allocBytes: 1.5e6},
		"idle resync, 10k":         {allocs: 11},
	}
	for _, tc := range []struct {
		name string
		fig  map[string]costFigures
		want []costBreach
	}{
		{"within", within, nil},
		{"over", over, []costBreach{
			{"objects a one-endpoint change allocates at 10k services", 151, 150},
			{"bytes a one-endpoint change allocates at 10k services", 16597, 16596},
			{"objects a first sync allocates at 10k services", 1001, 1000},
			{"objects a forced full resync allocates at 10k services", 101, 100},
			{"objects an idle resync allocates at 10k services", 11, 10},
			{"megabytes a first sync allocates at 10k services", 2.5, 2},
			{"megabytes a forced full resync allocates at 10k services", 1.5, 1},
		}},
	} {
		if diff := cmp.Diff(tc.want, breaches(mode, tc.fig), cmp.AllowUnexported(costBreach{})); diff != "" {
			t.Errorf("%s: breaches (-want +got):\n%s", tc.name, diff)
		}
	}
}

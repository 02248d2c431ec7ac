package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// inNamespace runs fn in a new network namespace.
func inNamespace(t testing.TB, fn func() error) *netns.NS {
	t.Helper()
	netns.Require(t, "nft")
	ns := netns.New(t, "nft")
	if err := ns.Do(fn); err != nil {
		t.Fatal(err)
	}
	return ns
}

// syncedInNamespace is a new Dataplane in a new namespace, synced to s.
func syncedInNamespace(t testing.TB, s *dataplane.State) (*netns.NS, *Dataplane) {
	t.Helper()
	var d *Dataplane
	ns := inNamespace(t, func() (err error) {
		if d, err = New(Config{}); err != nil {
			return err
		}
		return d.Sync(t.Context(), s)
	})
	return ns, d
}

// reconcileClean fails unless a Reconcile finds nothing to repair.
func reconcileClean(ctx context.Context, d *Dataplane) error {
	drift, err := d.Reconcile(ctx)
	if err == nil && !drift.Empty() {
		err = errors.New("drift: " + drift.String())
	}
	return err
}

// rejectingNFT runs every transaction through the real nft with one more
// line that nft rejects, while fail is set.
type rejectingNFT struct {
	knftables.Interface
	fail bool
}

func (r *rejectingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if !r.fail {
		return r.Interface.Run(ctx, tx)
	}
	bad := r.Interface.NewTransaction()
	bad.Add(&knftables.Rule{Chain: "no-such-chain", Rule: "accept"})
	// Not one transaction: the real one is checked, then a failing one
	// stands for the kernel refusing it.
	if err := r.Interface.Check(ctx, tx); err != nil {
		return err
	}
	return r.Interface.Run(ctx, bad)
}

// TestKernelSyncs runs the changes of TestSyncOperations through a real
// nft: the same operation counts, and after each sync a Reconcile (which
// reads the table back through nft's JSON) finds nothing to repair.
// Then a new Dataplane on the same table (a restart) converges with
// the fixed part only, and a rejected transaction leaves the table
// intact, is counted, and is followed by a full sync that converges.
func TestKernelSyncs(t *testing.T) {
	var d *Dataplane
	var nft *rejectingNFT
	b := newBuilder()
	for n := range 20 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 3, 1))
	}
	var s *dataplane.State
	ctx := t.Context()
	ns := inNamespace(t, func() error {
		real, err := knftables.New(knftables.IPv4Family, DefaultTable)
		if err != nil {
			return err
		}
		nft = &rejectingNFT{Interface: real}
		if d, err = New(Config{NFT: nft, StaleChainDelay: time.Millisecond}); err != nil {
			return err
		}
		s = b.Build().States[0]
		return d.Sync(ctx, s)
	})
	do := func(what string, fn func() error) {
		t.Helper()
		if err := ns.Do(fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	clean := func(what string) {
		t.Helper()
		do(what, func() error { return reconcileClean(ctx, d) })
	}
	clean("first sync")

	svc20 := clusterIPService(20)
	steps := []struct {
		name   string
		change func()
		ops    int
	}{
		{"idle resync", func() {}, 0},
		{"new service", func() { b.UpdateService(nil, svc20); b.UpdateEndpointSlice(nil, slice(20, 0, 1)) }, 7},
		// Elements only: one deleted, one added.
		{"endpoint moved", func() { b.UpdateEndpointSlice(slice(3, 3, 1), moved(slice(3, 3, 1))) }, 2},
		{"endpoint moved back", func() { b.UpdateEndpointSlice(moved(slice(3, 3, 1)), slice(3, 3, 1)) }, 2},
		// To the shared chain of three endpoints (new: add, rule) by the
		// service-ips element (delete, add), two endpoint elements
		// deleted and one added, the chain of four flushed.
		{"endpoint removed", func() { b.UpdateEndpointSlice(slice(3, 3, 1), slice(3, 2, 1)) }, 8},
		// Also the endpoint map, unused, deleted.
		{"endpoints emptied", func() { b.UpdateEndpointSlice(slice(3, 2, 1), slice(3, 0, 0)) }, 8},
		{"endpoints restored", func() { b.UpdateEndpointSlice(slice(3, 0, 0), slice(3, 2, 1)) }, 9},
		{"service deleted", func() { b.UpdateService(svc20, nil); b.UpdateEndpointSlice(slice(20, 0, 1), nil) }, 6},
	}
	for _, step := range steps {
		step.change()
		s = b.Build().States[0]
		do(step.name, func() error { return d.Sync(ctx, s) })
		if st := d.Stats(); st.Full || st.Operations != step.ops {
			t.Errorf("%s: full %v, %d operations, want a partial sync of %d", step.name, st.Full, st.Operations, step.ops)
		}
		clean(step.name)
		time.Sleep(2 * time.Millisecond) // let stale chains go
	}

	// A restart: a new Dataplane finds everything in place.
	var restarted *Dataplane
	do("restart", func() error {
		var err error
		if restarted, err = New(Config{NFT: nft.Interface}); err != nil {
			return err
		}
		return restarted.Sync(ctx, s)
	})
	static := staticOps(restarted, s)
	if got, want := restarted.Stats().Operations, static; got != want {
		t.Errorf("first sync after a restart: %d operations, want the %d of the fixed part", got, want)
	}
	// The same over netlink, which lists the endpoint maps itself.
	do("restart over netlink", func() error {
		var err error
		if restarted, err = New(Config{}); err != nil {
			return err
		}
		return restarted.Sync(ctx, s)
	})
	if got, want := restarted.Stats().Operations, static; got != want {
		t.Errorf("first sync after a restart over netlink: %d operations, want the %d of the fixed part", got, want)
	}

	// A rejected transaction.
	listing := func() string {
		out, err := ns.Run("nft", "list", "table", "ip", DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The old Dataplane deletes the chains it left stale.
	do("idle sync", func() error { return d.Sync(ctx, s) })
	before := listing()
	b.UpdateEndpointSlice(slice(5, 3, 1), slice(5, 1, 1))
	s = b.Build().States[0]
	nft.fail = true
	err := ns.Do(func() error { return d.Sync(ctx, s) })
	if err == nil || !strings.Contains(err.Error(), "no-such-chain") {
		t.Fatalf("Sync through a rejecting nft: %v, want its error", err)
	}
	if after := listing(); after != before {
		t.Errorf("a rejected transaction changed the table:\n%s\nwant\n%s", after, before)
	}
	if n := testutil.ToFloat64(d.metrics.partialFailures); n != 1 {
		t.Errorf("partial sync failures = %v, want 1", n)
	}
	nft.fail = false
	do("sync after the failure", func() error { return d.Sync(ctx, s) })
	if !d.Stats().Full {
		t.Errorf("the sync after a failure was not full: %+v", d.Stats())
	}
	clean("sync after the failure")

	do("cleanup", func() error { return d.Cleanup(ctx) })
	if out, err := ns.Run("nft", "list", "tables"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("tables after Cleanup: %q, %v", out, err)
	}
}

// TestKernelAffinityTimeoutChange: through a real nft, a new affinity
// timeout replaces the sets (deleted in the transaction that rewrote the
// rules referring to them) and a Reconcile finds nothing to repair.
func TestKernelAffinityTimeoutChange(t *testing.T) {
	sticky := func(secs int32) *v1.Service {
		s := clusterIPService(1)
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &secs}}
		return s
	}
	b := newBuilder()
	b.UpdateService(nil, sticky(60))
	b.UpdateEndpointSlice(nil, slice(1, 2, 0))
	ctx := t.Context()
	ns, d := syncedInNamespace(t, b.Build().States[0])
	b.UpdateService(sticky(60), sticky(120))
	if err := ns.Do(func() error {
		if err := d.Sync(ctx, b.Build().States[0]); err != nil {
			return err
		}
		return reconcileClean(ctx, d)
	}); err != nil {
		t.Fatal(err)
	}
	if sets := ns.MustRun("nft", "list", "sets", "ip"); !strings.Contains(sets, "timeout 2m") || strings.Contains(sets, "timeout 1m") {
		t.Errorf("affinity sets after the change:\n%s", sets)
	}
}

// TestKernelForeignElement: an element someone else put in an endpoint
// map at a key a new service needs makes nft refuse the sync; the full
// sync after it rewrites the endpoint maps and converges.
func TestKernelForeignElement(t *testing.T) {
	b := newBuilder()
	for n := range 3 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 2, 0))
	}
	ctx := t.Context()
	ns, d := syncedInNamespace(t, b.Build().States[0])
	// svc3's endpoints will be the elements "172.30.0.4 . 80 . 0" and
	// ". 1" of its shared map: take them.
	shard, _ := sharedShard("172.30.0.4 . 80", "tcp")
	m := sharedMapName(shard)
	ns.MustRun("nft", "add", "map", "ip", DefaultTable, m, "{ typeof ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport ; }")
	for i := range 2 {
		ns.MustRun("nft", "add", "element", "ip", DefaultTable, m, fmt.Sprintf("{ 172.30.0.4 . 80 . %d : 10.9.9.9 . 9 }", i))
	}
	b.UpdateService(nil, clusterIPService(3))
	b.UpdateEndpointSlice(nil, slice(3, 2, 0))
	s := b.Build().States[0]
	if err := ns.Do(func() error { return d.Sync(ctx, s) }); err == nil {
		t.Fatal("a sync over a foreign element succeeded")
	}
	if err := ns.Do(func() error { return d.Sync(ctx, s) }); err != nil {
		t.Fatalf("the full sync after the failure: %v", err)
	}
	if !d.Stats().Full {
		t.Errorf("the sync after a failure was not full: %+v", d.Stats())
	}
	if out := ns.MustRun("nft", "list", "map", "ip", DefaultTable, m); strings.Contains(out, "10.9.9.9") {
		t.Errorf("the foreign element is still there:\n%s", out)
	}
	if err := ns.Do(func() error { return reconcileClean(ctx, d) }); err != nil {
		t.Fatal(err)
	}
	listing := ns.MustRun("nft", "list", "table", "ip", DefaultTable)
	rs, err := ParseListing([]byte(listing), v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := rs.Trace(dataplane.Packet{From: dataplane.FromOutside, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddrPort("172.30.0.4:80"), Protocol: v1.ProtocolTCP}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.AddrPort{netip.MustParseAddrPort("10.1.3.1:8080"), netip.MustParseAddrPort("10.1.3.2:8080")}; !slices.Equal(v.Endpoints, want) {
		t.Errorf("svc3 reaches %v, want %v", v.Endpoints, want)
	}
}

// TestKernelLongNames: a service whose namespace and name are as long as
// Kubernetes allows gives a no-endpoint element comment longer than nft
// accepts; it is cut, and the sync goes through (it failed whole).
func TestKernelLongNames(t *testing.T) {
	long := strings.Repeat("n", 63)
	b := newBuilder()
	b.UpdateService(nil, dataplanetest.MakeService(long, strings.Repeat("s", 63), func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.9.9"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("a-port-name-xyz", v1.ProtocolSCTP, 80, 0, 0)}
	}))
	ns, _ := syncedInNamespace(t, b.Build().States[0])
	listing := ns.MustRun("nft", "list", "map", "ip", DefaultTable, mapNoEndpointServices)
	if !strings.Contains(listing, "172.30.9.9") || !strings.Contains(listing, truncated+`"`) {
		t.Errorf("no cut comment on the service's element:\n%s", listing)
	}
}

// TestKernelListTableForeignRule: a rule another program put in the table
// that ListTable cannot print is a *ForeignRuleError naming it, not a
// listing with the rule left out.
func TestKernelListTableForeignRule(t *testing.T) {
	b := newBuilder()
	b.UpdateService(nil, clusterIPService(1))
	b.UpdateEndpointSlice(nil, slice(1, 2, 0))
	ns, _ := syncedInNamespace(t, b.Build().States[0])
	ns.MustRun("nft", "insert", "rule", "ip", DefaultTable, chainServices, "meta skuid 0 counter accept")
	err := ns.Do(func() error {
		out, err := ListTable(t.Context(), v1.IPv4Protocol, DefaultTable)
		if err == nil {
			return fmt.Errorf("listed with a foreign rule:\n%s", out)
		}
		var fe *ForeignRuleError
		if !errors.As(err, &fe) || fe.Chain != chainServices || fe.Table != DefaultTable {
			return fmt.Errorf("error %v (%T), want a *ForeignRuleError for chain %s", err, err, chainServices)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKernelCanarySurvivesPartialSync: a foreign rule put atop the
// services chain between two canary polls is still reported after a
// partial sync (another service's endpoint changed) committed in
// between, which once took the generation it moved for its own; and that
// Reconcile's repair is taken for the Dataplane's own commit, so the
// canary after it reads only the generation until someone commits again.
func TestKernelCanarySurvivesPartialSync(t *testing.T) {
	b := newBuilder()
	for n := range 2 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 2, 0))
	}
	ctx := t.Context()
	ns, d := syncedInNamespace(t, b.Build().States[0])
	changed := func() bool {
		t.Helper()
		var c bool
		if err := ns.Do(func() (err error) { c, err = d.KernelChanged(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if changed() {
		t.Fatal("KernelChanged right after Sync")
	}
	ns.MustRun("nft", "insert", "rule", "ip", DefaultTable, chainServices, "return")
	b.UpdateEndpointSlice(slice(1, 2, 0), slice(1, 3, 0))
	if err := ns.Do(func() error { return d.Sync(ctx, b.Build().States[0]) }); err != nil {
		t.Fatal(err)
	}
	if d.Stats().Full {
		t.Fatalf("the endpoint change made a full sync: %+v", d.Stats())
	}
	if !changed() {
		t.Error("the foreign rule went unnoticed after a partial sync")
	}
	if err := ns.Do(func() error { _, err := d.Reconcile(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	if !d.seen {
		t.Error("the repair's generation went unrecorded: the next canary reads the table again")
	}
	if changed() {
		t.Error("KernelChanged after Reconcile")
	}
	ns.MustRun("nft", "insert", "rule", "ip", DefaultTable, chainServices, "return")
	if !changed() {
		t.Error("a foreign rule after the repair went unnoticed")
	}
}

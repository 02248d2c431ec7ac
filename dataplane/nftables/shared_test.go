package nftables

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// TestUpgradeConverges: a table the previous version wrote, a chain per
// ClusterIP port choosing through a slot of a numgen-keyed endpoint map
// (testdata/earlier-shape.dump, six services with one to three endpoints),
// becomes the table this version writes: the ports move to shared chains
// and maps, and the old chains and maps go.
func TestUpgradeConverges(t *testing.T) {
	dump, err := os.ReadFile("testdata/earlier-shape.dump")
	if err != nil {
		t.Fatal(err)
	}
	b := newBuilder()
	for n := range 6 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, n%3, 1))
	}
	s := b.Build().States[0]
	fake := newFake(false)
	if err := fake.ParseDump(string(dump)); err != nil {
		t.Fatal(err)
	}
	joinKeys(fake)
	d, clk := testDataplane(t, fake)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fake.Dump(), "add map ip proxykit dnat-") {
		t.Errorf("the numgen-keyed endpoint maps are still there:\n%s", fake.Dump())
	}
	// The old chains, flushed, go once nothing can refer to them.
	clk.Step(2 * time.Second)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if n := d.Stats().Operations; n != 0 {
		t.Errorf("a resync after the upgrade sent %d operations:\n%s", n, fake.LastTransaction)
	}
}

// joinKeys gives the elements of fake, which ParseDump splits at " . ",
// the one-string keys and values the dataplane writes, so that it finds
// the elements it deletes.
func joinKeys(fake *knftables.Fake) {
	for _, m := range fake.Table.Maps {
		for _, e := range m.Elements {
			e.Key, e.Value = []string{strings.Join(e.Key, " . ")}, []string{strings.Join(e.Value, " . ")}
		}
	}
	for _, s := range fake.Table.Sets {
		for _, e := range s.Elements {
			e.Key = []string{strings.Join(e.Key, " . ")}
		}
	}
}

// TestKernelUpgradeConverges: the same through a real kernel, the earlier
// table loaded by nft -f, then synced over netlink; a packet to each
// service then reaches its endpoints through the shared chains.
func TestKernelUpgradeConverges(t *testing.T) {
	b := newBuilder()
	for n := range 6 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, n%3, 1))
	}
	s := b.Build().States[0]
	ns := inNamespace(t, func() error { return nil })
	ns.MustRun("nft", "-f", "testdata/earlier-shape.dump")
	ctx := t.Context()
	var d *Dataplane
	if err := ns.Do(func() (err error) {
		if d, err = New(Config{StaleChainDelay: time.Millisecond}); err != nil {
			return err
		}
		return d.Sync(ctx, s)
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := ns.Do(func() error { return d.Sync(ctx, s) }); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error { return reconcileClean(ctx, d) }); err != nil {
		t.Fatal(err)
	}
	listing := ns.MustRun("nft", "list", "table", "ip", DefaultTable)
	// The old maps were "dnat-tcp-…", the old chains "service-…-ns/svcN/tcp/p80".
	if strings.Contains(listing, "map dnat-") || strings.Contains(listing, "/p80 {") {
		t.Errorf("the earlier shape's maps or chains are left:\n%s", listing)
	}
	rs, err := ParseListing([]byte(listing), v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	for n := range 6 {
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 30, 0, byte(n + 1)}), 80)
		v, _, err := rs.Trace(dataplane.Packet{From: dataplane.FromOutside, Src: netip.MustParseAddr("192.0.2.1"), Dst: dst, Protocol: v1.ProtocolTCP}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v.Action != dataplane.DNAT || len(v.Endpoints) != n%3+1 {
			t.Errorf("%v: %+v, want a DNAT to %d endpoints", dst, v, n%3+1)
		}
	}
}

// TestSharedClaimedTwice: of two simple ports claiming one cluster IP and
// port, the first by name has the service-ips element and its endpoints
// are the ones in the shared map; when it goes, the other's take their
// place by a partial sync, and come back when it does.
func TestSharedClaimedTwice(t *testing.T) {
	sameIP := func(n int) *v1.Service {
		s := clusterIPService(n)
		s.Spec.ClusterIP = "172.30.0.1"
		return s
	}
	fake := newFake(false)
	d, clk := testDataplane(t, fake)
	b := newBuilder()
	for _, n := range []int{1, 2} {
		b.UpdateService(nil, sameIP(n))
		b.UpdateEndpointSlice(nil, slice(n, n, 0))
	}
	shard, _ := sharedShard("172.30.0.1 . 80", "tcp")
	check := func(step string, s *dataplane.State, chain string, eps ...string) {
		t.Helper()
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if step != "both" && d.Stats().Full {
			t.Errorf("%s: a full sync", step)
		}
		if e := fake.Table.Maps[mapServiceIPs].FindElement("172.30.0.1 . tcp . 80"); e == nil || strings.Join(e.Value, " ") != "goto "+chain {
			t.Errorf("%s: service-ips element %+v, want one going to %s", step, e, chain)
		}
		var got []string
		for _, e := range fake.Table.Maps[sharedMapName(shard)].Elements {
			got = append(got, strings.Join(e.Key, " . ")+" : "+strings.Join(e.Value, " . "))
		}
		slices.Sort(got)
		if diff := cmp.Diff(eps, got); diff != "" {
			t.Errorf("%s: shared map elements (-want +got):\n%s", step, diff)
		}
		clk.Step(2 * time.Second)
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
			t.Errorf("%s: the table differs from a fresh full sync (-fresh +got):\n%s", step, diff)
		}
	}
	one := []string{"172.30.0.1 . 80 . 0 : 10.1.1.1 . 8080"}
	two := []string{"172.30.0.1 . 80 . 0 : 10.1.2.1 . 8080", "172.30.0.1 . 80 . 1 : 10.1.2.2 . 8080"}
	check("both", b.Build().States[0], sharedChainName(shard, 1), one...)
	b.UpdateService(sameIP(1), nil)
	check("svc1 gone", b.Build().States[0], sharedChainName(shard, 2), two...)
	b.UpdateService(nil, sameIP(1))
	check("svc1 back", b.Build().States[0], sharedChainName(shard, 1), one...)
}

// TestAllSharedKeys: the keys of a port's elements are "dest . index"
// across the powers of ten.
func TestAllSharedKeys(t *testing.T) {
	s := &sharedDef{dest: "10.0.0.1 . 80", eps: make([]string, 101)}
	var want, got []string
	elems := allShared(verbAdd, s).Elems
	for i := range s.eps {
		want = append(want, s.key(i))
		got = append(got, elems.Element(i).Key[0])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

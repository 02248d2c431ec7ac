package nftables

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// TestServiceCIDRs: the drop rule follows the ServiceCIDR objects of the
// table's family, and a change of them converges to what a fresh full sync
// writes.
func TestServiceCIDRs(t *testing.T) {
	fake := newFake(false)
	d, _ := testDataplane(t, fake)
	b := newBuilder()
	b.UpdateService(nil, clusterIPService(1))
	b.UpdateEndpointSlice(nil, slice(1, 2, 0))
	cidr := dpt.MakeServiceCIDR("kubernetes", "172.30.0.0/16", "fd00:10:96::/112")
	extra := dpt.MakeServiceCIDR("extra", "10.97.0.0/24")
	const check = "add rule ip proxykit cluster-ips-check "
	for _, step := range []struct {
		name   string
		change func()
		want   []string
	}{
		{"none", func() {}, []string{check + "ip daddr @cluster-ips reject"}},
		{"one", func() { b.UpdateServiceCIDR(nil, cidr) }, []string{
			check + "ip daddr @cluster-ips reject",
			check + "ip daddr { 172.30.0.0/16 } drop",
		}},
		{"two", func() { b.UpdateServiceCIDR(nil, extra) }, []string{
			check + "ip daddr @cluster-ips reject",
			check + "ip daddr { 10.97.0.0/24 , 172.30.0.0/16 } drop",
		}},
		{"deleted", func() { b.UpdateServiceCIDR(cidr, nil); b.UpdateServiceCIDR(extra, nil) }, []string{
			check + "ip daddr @cluster-ips reject",
		}},
	} {
		step.change()
		s := b.Build().States[0]
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		lines := dumpLines(fake)
		got := slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return len(l) < len(check) || l[:len(check)] != check })
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s: cluster-ips-check (-want +got):\n%s", step.name, diff)
		}
		if diff := cmp.Diff(freshDump(t, s), lines); diff != "" {
			t.Errorf("%s: the table differs from a fresh full sync (-fresh +got):\n%s", step.name, diff)
		}
	}
}

// TestReconcileNodePortIPs: an element of nodeport-ips deleted by another
// program is found and put back.
func TestReconcileNodePortIPs(t *testing.T) {
	fake := newFake(false)
	d, _ := testDataplane(t, fake)
	settings := dpt.DefaultSettings()
	settings.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}
	b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{v1.IPv4Protocol}, NodeName: dpt.NodeName, Settings: settings})
	b.UpdateNode(dpt.TestNode(nil))
	b.UpdateService(nil, clusterIPService(1))
	s := b.Build().States[0]
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	want := dumpLines(fake)
	elems, err := fake.ListElements(t.Context(), "set", setNodePortIPs)
	if err != nil || len(elems) == 0 {
		t.Fatalf("nodeport-ips holds %v (%v), want the node's 192.168 addresses", elems, err)
	}
	tx := fake.NewTransaction()
	tx.Delete(elems[0])
	if err := fake.Run(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	drift, err := d.Reconcile(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(drift.Repaired) != 1 || !strings.HasPrefix(drift.Repaired[0], setNodePortIPs+": ") {
		t.Errorf("Reconcile repaired %q, want the nodeport-ips set", drift.Repaired)
	}
	if diff := cmp.Diff(want, dumpLines(fake)); diff != "" {
		t.Errorf("after Reconcile (-want +got):\n%s", diff)
	}
	if drift, err := d.Reconcile(t.Context()); err != nil || len(drift.Repaired) != 0 {
		t.Errorf("second Reconcile: %v, %v; want nothing to repair", drift.Repaired, err)
	}
}

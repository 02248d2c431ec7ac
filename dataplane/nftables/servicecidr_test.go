package nftables

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
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

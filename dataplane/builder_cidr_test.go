package dataplane_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	networking "k8s.io/api/networking/v1"
)

// TestBuilderServiceCIDRs follows the union of the ServiceCIDR objects
// through adds, updates, deletes and a bad CIDR, per family, and checks
// that they never cost the States their list of changes.
func TestBuilderServiceCIDRs(t *testing.T) {
	var skips []string
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		NodeName: dpt.NodeName,
		OnSkip:   func(kind, reason string) { skips = append(skips, kind+": "+reason) },
	})
	b.Build()
	primary := dpt.MakeServiceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/112")
	extra := dpt.MakeServiceCIDR("extra", "10.97.0.1/24", "10.96.0.0/16", "not-a-cidr")
	grown := dpt.MakeServiceCIDR("kubernetes", "10.96.0.0/15", "fd00:10:96::/112")
	type want struct {
		due       bool
		v4, v6    []string
		changesOK bool
	}
	steps := []struct {
		name     string
		old, new *networking.ServiceCIDR
		want     want
	}{
		{"add primary", nil, primary, want{true, []string{"10.96.0.0/16"}, []string{"fd00:10:96::/112"}, true}},
		// Masked, deduplicated with the primary's, the bad one skipped.
		{"add extra", nil, extra, want{true, []string{"10.96.0.0/16", "10.97.0.0/24"}, []string{"fd00:10:96::/112"}, true}},
		{"same again", extra, extra, want{false, nil, nil, true}},
		// A CIDR two objects share stays while either has it.
		{"grow primary", primary, grown, want{true, []string{"10.96.0.0/15", "10.96.0.0/16", "10.97.0.0/24"}, []string{"fd00:10:96::/112"}, true}},
		{"delete extra", extra, nil, want{true, []string{"10.96.0.0/15"}, []string{"fd00:10:96::/112"}, true}},
		{"delete unknown", extra, nil, want{false, nil, nil, true}},
	}
	for _, s := range steps {
		due := b.UpdateServiceCIDR(s.old, s.new)
		if due != s.want.due {
			t.Errorf("%s: due = %v, want %v", s.name, due, s.want.due)
		}
		if !due {
			continue
		}
		build := b.Build()
		for i, w := range [][]string{s.want.v4, s.want.v6} {
			st := build.States[i]
			if diff := cmp.Diff(prefixes(w...), st.ServiceCIDRs, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("%s: %s ServiceCIDRs (-want +got):\n%s", s.name, st.Family, diff)
			}
			if _, ok := st.ChangedSince(st.Generation - 1); ok != s.want.changesOK {
				t.Errorf("%s: ChangedSince ok = %v, want %v", s.name, ok, s.want.changesOK)
			}
		}
	}
	// Once per update that carries the bad CIDR.
	bad := "ServiceCIDR: " + dataplane.SkipServiceCIDR
	if diff := cmp.Diff([]string{bad, bad}, skips); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
}

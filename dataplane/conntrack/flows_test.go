package conntrack

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestDNATFlows(t *testing.T) {
	ap := netip.MustParseAddrPort
	table := NewFakeTable(
		NewFlow(v1.ProtocolUDP, ap("10.0.0.9:4000"), ap("10.96.0.10:53"), ap("10.244.1.2:5353")),
		NewFlow(v1.ProtocolTCP, ap("10.0.0.9:4001"), ap("10.96.0.10:80"), ap("10.244.1.2:8080")),
		// Not DNATed.
		NewFlow(v1.ProtocolUDP, ap("10.0.0.9:4002"), ap("10.0.0.1:53"), ap("10.0.0.1:53")),
		NewFlow(v1.ProtocolUDP, ap("[fd00::9]:4000"), ap("[fd00:96::a]:53"), ap("[fd00:244::2]:5353")),
	)
	cases := []struct {
		family v1.IPFamily
		want   []Flow
	}{{
		family: v1.IPv4Protocol,
		want: []Flow{
			{Protocol: v1.ProtocolUDP, Client: ap("10.0.0.9:4000"), Frontend: ap("10.96.0.10:53"), Endpoint: ap("10.244.1.2:5353")},
			{Protocol: v1.ProtocolTCP, Client: ap("10.0.0.9:4001"), Frontend: ap("10.96.0.10:80"), Endpoint: ap("10.244.1.2:8080")},
		},
	}, {
		family: v1.IPv6Protocol,
		want:   []Flow{{Protocol: v1.ProtocolUDP, Client: ap("[fd00::9]:4000"), Frontend: ap("[fd00:96::a]:53"), Endpoint: ap("[fd00:244::2]:5353")}},
	}}
	for _, tc := range cases {
		got, err := DNATFlows(t.Context(), table, tc.family)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.family, diff)
		}
	}
	if _, err := DNATFlows(t.Context(), table, "IPv5"); err == nil {
		t.Error("IPv5: no error")
	}
}

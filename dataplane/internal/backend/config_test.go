package backend

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// result is what a check returns, its error as text.
type result struct {
	Value any
	Err   string
}

func resultOf[T any](v T, err error) result {
	r := result{Value: v}
	if err != nil {
		r = result{Err: err.Error()}
	}
	return r
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  result
		want result
	}{
		{"family empty", resultOf(Family("iptables", "")), result{Value: v1.IPv4Protocol}},
		{"family IPv4", resultOf(Family("iptables", v1.IPv4Protocol)), result{Value: v1.IPv4Protocol}},
		{"family IPv6", resultOf(Family("nftables", v1.IPv6Protocol)), result{Value: v1.IPv6Protocol}},
		{"family unknown", resultOf(Family("nftables", "IPv5")), result{Err: `nftables: unknown IP family "IPv5"`}},
		{"family lower case", resultOf(Family("ipvs", "ipv4")), result{Err: `ipvs: unknown IP family "ipv4"`}},
		{"bit 0 means 14", resultOf(MasqueradeBit("iptables", 0)), result{Value: 14}},
		{"bit 1", resultOf(MasqueradeBit("iptables", 1)), result{Value: 1}},
		{"bit 31", resultOf(MasqueradeBit("iptables", 31)), result{Value: 31}},
		{"bit 32", resultOf(MasqueradeBit("ipvs", 32)), result{Err: "ipvs: masquerade bit 32 out of range [0, 31]"}},
		{"bit -1", resultOf(MasqueradeBit("nftables", -1)), result{Err: "nftables: masquerade bit -1 out of range [0, 31]"}},
		{"workers 0", resultOf(RenderWorkers("iptables", 0)), result{Value: min(runtime.GOMAXPROCS(0), 4)}},
		{"workers 1", resultOf(RenderWorkers("iptables", 1)), result{Value: 1}},
		{"workers 9", resultOf(RenderWorkers("iptables", 9)), result{Value: 9}},
		{"workers -1", resultOf(RenderWorkers("nftables", -1)), result{Err: "nftables: RenderWorkers -1 is negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		family v1.IPFamily
		state  *dataplane.State
		want   string
	}{
		{"nil", v1.IPv4Protocol, nil, "iptables: nil State"},
		{"empty family is IPv4", v1.IPv4Protocol, &dataplane.State{}, ""},
		{"IPv4", v1.IPv4Protocol, &dataplane.State{Family: v1.IPv4Protocol}, ""},
		{"IPv6", v1.IPv6Protocol, &dataplane.State{Family: v1.IPv6Protocol}, ""},
		{"IPv6 into IPv4", v1.IPv4Protocol, &dataplane.State{Family: v1.IPv6Protocol}, "iptables: State is IPv6, dataplane programs IPv4"},
		{"empty into IPv6", v1.IPv6Protocol, &dataplane.State{}, "iptables: State is IPv4, dataplane programs IPv6"},
		{"invalid settings", v1.IPv4Protocol, &dataplane.State{Settings: dataplane.Settings{LocalDetector: dataplane.LocalDetector{
			Mode: dataplane.LocalModeBridgeInterface, Interface: "br0\n"}}},
			`iptables: Settings.LocalDetector.Interface: Invalid value: "br0\n": must consist of ASCII letters, digits, '-', '_' and '.' (found '\n')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fmt.Sprint(CheckState("iptables", tc.family, tc.state))
			if tc.want == "" {
				tc.want = "<nil>"
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLocalInterface(t *testing.T) {
	type result struct {
		Match string
		OK    bool
	}
	for _, tc := range []struct {
		name string
		d    dataplane.LocalDetector
		want result
	}{
		{"none", dataplane.LocalDetector{}, result{}},
		{"cluster CIDR", dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, Interface: "cbr0"}, result{}},
		{"bridge", dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"}, result{"cbr0", true}},
		{"prefix", dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "veth"}, result{"veth+", true}},
		{"bridge without a name", dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface}, result{}},
		{"injected bridge", dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "br0\n-A INPUT -j ACCEPT\n#"}, result{}},
		{"prefix with a quote", dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: `veth"`}, result{}},
		{"16-byte prefix", dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "abcdefghijklmnop"}, result{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got result
			got.Match, got.OK = LocalInterface(tc.d, "+")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

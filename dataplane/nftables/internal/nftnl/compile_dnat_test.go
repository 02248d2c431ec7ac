package nftnl

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// TestDNATMapFastPath: the endpoint-map rule's fast path compiles what
// Compile compiles, and leaves to it every text it is not sure of.
func TestDNATMapFastPath(t *testing.T) {
	rules := []string{
		"meta l4proto tcp dnat ip addr . port to numgen random mod 10 offset 655360 map @dnat-tcp-0a3",
		"meta l4proto udp dnat ip addr . port to numgen random mod 1 offset 0 map @dnat-udp-000",
		"meta l4proto sctp dnat ip addr . port to numgen random mod 4294967295 offset 4294967295 map @m",
		"meta l4proto tcp dnat ip6 addr . port to numgen random mod 3 offset 7 map @dnat-tcp-001",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 0x10 offset 0 map @m",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 010 offset 0 map @m",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 0 offset 0 map @m",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 4294967296 offset 0 map @m",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2  offset 0 map @m",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2 offset 0 map @",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2 offset 0 map @m accept",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2 offset 0 map @m{",
		"meta l4proto icmp dnat ip addr . port to numgen random mod 2 offset 0 map @m",
		"meta l4proto tcp dnat to 10.0.0.1:80",
		"meta l4proto tcp",
		"ct state new jump services",
	}
	for _, family := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		for _, r := range rules {
			var d dnatMap
			fast, ok := d.compile(family == knftables.IPv6Family, r)
			c, err := Compile(family, r)
			switch {
			case ok && err != nil:
				t.Errorf("%s %q: the fast path compiled what Compile refuses: %v", family, r, err)
			case ok && c.Anon != nil:
				t.Errorf("%s %q: the fast path compiled a rule with a set", family, r)
			case ok:
				if d := cmp.Diff(c.Exprs, fast); d != "" {
					t.Errorf("%s %q: fast path (-Compile +fast):\n%s", family, r, d)
				}
			}
		}
	}
	var d dnatMap
	if _, ok := d.compile(false, rules[0]); !ok {
		t.Errorf("the fast path refused %q", rules[0])
	}
}

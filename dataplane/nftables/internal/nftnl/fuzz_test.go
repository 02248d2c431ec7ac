package nftnl

import (
	"bytes"
	"testing"

	"sigs.k8s.io/knftables"
)

// FuzzCompile: Compile never panics, and what it compiles reads back as
// text that compiles to the same expressions.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"ct state new jump firewall-check",
		"ip daddr { 10.0.0.0/8 , 172.30.0.0/16 } drop",
		"ip daddr . meta l4proto . th dport vmap @service-ips",
		"mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random",
		`ip daddr @cluster-ips iifname != "veth*" mark set mark or 0x4000`,
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2 offset 65536 map @dnat-tcp-000",
		"numgen random mod 2 vmap { 0 : goto a , 1 : goto b }",
		"update @aff { ip saddr }",
	} {
		f.Add(false, s)
	}
	f.Fuzz(func(t *testing.T, ipv6 bool, text string) {
		family := knftables.IPv4Family
		if ipv6 {
			family = knftables.IPv6Family
		}
		c, err := Compile(family, text)
		if err != nil {
			return
		}
		back, err := Decompile(family, c.Exprs, c.Anon)
		if err != nil {
			t.Fatalf("%q compiles but does not read back: %v", text, err)
		}
		c2, err := Compile(family, back)
		if err != nil || !sameExprs(c.Exprs, c2.Exprs) || !sameAnon(c.Anon, c2.Anon) {
			t.Fatalf("%q reads back as %q, which compiles otherwise (%v)", text, back, err)
		}
	})
}

// FuzzElement: element text of each type the dataplane uses either fails
// to encode or encodes to bytes that read back as text encoding the same.
func FuzzElement(f *testing.F) {
	types := []*setType{}
	for _, c := range [][2]string{
		{"ipv4_addr . inet_proto . inet_service : verdict", ""},
		{"ipv6_addr . ipv6_addr . inet_proto . inet_service", ""},
		{"inet_proto . inet_service : verdict", ""},
		{"", "numgen random mod 1 : ip6 daddr . udp dport"},
	} {
		st, err := parseType(c[0], c[1])
		if err != nil {
			f.Fatal(err)
		}
		types = append(types, st)
	}
	f.Add(uint8(0), "10.0.0.1 . tcp . 80")
	f.Add(uint8(1), "fd00::1 . fd00::1 . udp . 53")
	f.Add(uint8(2), "sctp . 30000")
	f.Add(uint8(3), "4294967295")
	f.Fuzz(func(t *testing.T, which uint8, text string) {
		st := types[int(which)%len(types)]
		for _, ks := range [][]kind{st.key, st.data} {
			if ks == nil || ks[0] == kVerdict {
				continue
			}
			b, ok := appendValue(nil, ks, text)
			if !ok {
				continue
			}
			back, ok := valueText(ks, b)
			if !ok {
				t.Fatalf("%q encodes to %x, which does not read", text, b)
			}
			b2, ok := appendValue(nil, ks, back)
			if !ok || !bytes.Equal(b, b2) {
				t.Fatalf("%q reads back as %q, which encodes otherwise", text, back)
			}
		}
	})
}

package nftnl_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/expr"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// shapes are rules of every shape the dataplane writes, in the ip family
// (ip6Shape turns one into its ip6 twin), with what Decompile reads back
// when it differs from the text.
var shapes = []struct{ rule, canonical string }{
	{rule: "ct state new jump firewall-check"},
	{rule: "jump services"},
	{rule: "goto service-X/ns/svc/tcp/p"},
	{rule: "ip daddr @cluster-ips reject"},
	{rule: "ip daddr { 172.30.0.0/16 } drop", canonical: "ip daddr 172.30.0.0/16 drop"},
	{rule: "ip daddr { 172.30.0.0/16 , 10.0.0.0/8 } drop", canonical: "ip daddr { 10.0.0.0/8 , 172.30.0.0/16 } drop"},
	{rule: "ip daddr . meta l4proto . th dport vmap @service-ips"},
	{rule: "mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random"},
	{rule: "ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random"},
	{rule: "ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports"},
	{rule: "ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports"},
	{rule: "reject"},
	{rule: "ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x4000"},
	{rule: "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"},
	{rule: `ip daddr @cluster-ips iifname != "cbr0" mark set mark or 0x4000`},
	{rule: `ip daddr @cluster-ips iifname != "veth*" mark set mark or 0x4000`},
	{rule: "ip daddr @cluster-ips mark set mark or 0x4000"},
	{rule: "meta l4proto tcp dnat to 10.180.0.1:80"},
	{rule: "update @affinity-X { ip saddr }"},
	{rule: "fib saddr type local goto service-X"},
	{rule: "fib saddr type local mark set mark or 0x4000"},
	{rule: `iifname "cbr0" goto service-X`},
	{rule: `iifname "veth*" goto service-X`},
	{rule: "ip saddr 10.0.0.0/8 goto service-X"},
	{rule: "ip saddr 10.0.0.0/12 goto service-X"},
	{rule: "ip saddr != { 203.0.113.0/25 } drop", canonical: "ip saddr != 203.0.113.0/25 drop"},
	{rule: "ip saddr != { 203.0.113.0/25 , 192.168.0.1 } drop", canonical: "ip saddr != { 192.168.0.1 , 203.0.113.0/25 } drop"},
	{rule: "ip saddr != { 10.0.0.0/25 , 10.0.0.128/25 , 10.0.1.0/24 } drop", canonical: "ip saddr != { 10.0.0.0/24 , 10.0.1.0/24 } drop"},
	{rule: "meta l4proto sctp dnat ip addr . port to numgen random mod 2 offset 65536 map @dnat-sctp-3c2"},
	{rule: "meta l4proto udp dnat ip addr . port to numgen random mod 3 offset 0 map @dnat-udp-036"},
	{rule: "dnat ip addr . port to ip daddr . tcp dport . numgen random mod 3 map @cluster-endpoints-tcp-00"},
	{rule: "dnat ip addr . port to ip daddr . udp dport . numgen random mod 1 map @cluster-endpoints-udp-00"},
	{rule: "dnat ip addr . port to ip daddr . sctp dport . numgen random mod 65536 map @cluster-endpoints-sctp-00"},
	{rule: "ip saddr @affinity-X goto endpoint-X"},
	{rule: "numgen random mod 2 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B }"},
}

// ip6Shape is the ip6 version of an ip shape.
func ip6Shape(s string) string {
	r := strings.NewReplacer("ip ", "ip6 ", "127.0.0.0/8", "::1", "172.30.0.0/16", "fd00:172:30::/64",
		"10.0.0.0/8", "fd00:10::/48", "10.0.0.0/12", "fd00::/12", "203.0.113.0/25", "fd00:db8::/65",
		"192.168.0.1", "2001:db8::1", "10.180.0.1:80", "[fd00:10:180::1]:80",
		"10.0.0.0/25", "fd00:20::/65", "10.0.0.128/25", "fd00:20:0:0:8000::/65", "10.0.1.0/24", "fd00:20:0:1::/64", "10.0.0.0/24", "fd00:20::/64")
	return r.Replace(s)
}

type shapeCase struct {
	family          knftables.Family
	rule, canonical string
}

func shapeCases() []shapeCase {
	var out []shapeCase
	for _, s := range shapes {
		c := s.canonical
		if c == "" {
			c = s.rule
		}
		out = append(out, shapeCase{knftables.IPv4Family, s.rule, c}, shapeCase{knftables.IPv6Family, ip6Shape(s.rule), ip6Shape(c)})
	}
	return out
}

func TestCompileRoundTrip(t *testing.T) {
	for _, c := range shapeCases() {
		got, err := roundTrip(c.family, c.rule)
		if err != nil {
			t.Errorf("%s %q: %v", c.family, c.rule, err)
		} else if got != c.canonical {
			t.Errorf("%s %q: Decompile gives %q, want %q", c.family, c.rule, got, c.canonical)
		}
	}
}

func roundTrip(family knftables.Family, rule string) (string, error) {
	c, err := nftnl.Compile(family, rule)
	if err != nil {
		return "", err
	}
	return nftnl.Decompile(family, c.Exprs, c.Anon)
}

// TestCompileScenarios: every rule of every conformance-suite scenario's
// table compiles, and reads back as itself (or, with a braced set, as
// text that compiles to the same).
func TestCompileScenarios(t *testing.T) {
	for _, st := range scenarioTables(t) {
		for _, r := range rules(st.fake) {
			got, err := roundTrip(st.family, r.Rule)
			if err != nil {
				t.Errorf("%s: %v", st.name, err)
				continue
			}
			if got != r.Rule && !strings.Contains(r.Rule, "{ ") {
				t.Errorf("%s: %q reads back as %q", st.name, r.Rule, got)
			}
			if _, err := roundTrip(st.family, got); err != nil {
				t.Errorf("%s: %q reads back as %q, which does not compile: %v", st.name, r.Rule, got, err)
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, rule := range []string{
		"", "ip6 daddr @x drop", "ip daddr 10.0.0.1/8 drop", "counter", "ip daddr { 10.0.0.0/8 ", "meta l4proto icmp",
		"dnat to [fd00::1]:80", "numgen random mod 0 vmap { 0 : drop }", "mark set mark and 1", "iifname cbr0",
		"ip daddr . meta l4proto . th dport vmap", "jump", "update @a { ip daddr }",
	} {
		_, err := nftnl.Compile(knftables.IPv4Family, rule)
		var se *nftnl.SyntaxError
		if !errors.As(err, &se) || se.Rule != rule {
			t.Errorf("Compile(%q) = %v, want a *SyntaxError naming the rule", rule, err)
		}
	}
}

// BenchmarkCompile compiles the rules a service writes most: its endpoint
// choice, and a jump of the fixed chains.
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for _, c := range []struct{ name, rule string }{
		{"dnat-map", "meta l4proto tcp dnat ip addr . port to numgen random mod 10 offset 65536 map @dnat-tcp-3af"},
		{"dnat-to", "meta l4proto tcp dnat to 10.180.0.1:80"},
		{"vmap", "ip daddr . meta l4proto . th dport vmap @service-ips"},
	} {
		rule := c.rule
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := nftnl.Compile(knftables.IPv4Family, rule); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecompileRefuses: expressions Compile would not write are refused,
// even when they do what a shape does.
func TestDecompileRefuses(t *testing.T) {
	c, err := nftnl.Compile(knftables.IPv4Family, "ip daddr . meta l4proto . th dport vmap @service-ips")
	if err != nil {
		t.Fatal(err)
	}
	otherRegs := slices.Clone(c.Exprs)
	meta := *otherRegs[1].(*expr.Meta)
	meta.Register = 2 // nft puts the protocol in reg 9
	otherRegs[1] = &meta
	for name, exprs := range map[string][]expr.Any{
		"other registers":  otherRegs,
		"a counter more":   append(slices.Clone(c.Exprs), &expr.Counter{}),
		"lookup cut short": c.Exprs[:3],
		"no expressions":   nil,
	} {
		_, err := nftnl.Decompile(knftables.IPv4Family, exprs, nil)
		var de *nftnl.DecompileError
		if !errors.As(err, &de) {
			t.Errorf("%s: Decompile = %v, want a *DecompileError", name, err)
		}
	}
}

package nftnl

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"sigs.k8s.io/knftables"
)

// unhex reads hex as nft --debug=mnl prints it: in words, spaces allowed.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSetUdata: the user data of each kind of set is the bytes nft 1.0.6
// sends for it (captured with nft --debug=mnl).
func TestSetUdata(t *testing.T) {
	mustType := func(typ, typeOf string) *setType {
		st, err := parseType(typ, typeOf)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, c := range []struct {
		name string
		got  []byte
		nft  string
	}{
		{"ipv4_addr set", setUdata(mustType("ipv4_addr", ""), "Active ClusterIPs"),
			"00040200 00000712 41637469 76652043 6c757374 65724950 7300"},
		{"concatenated set", setUdata(mustType("ipv4_addr . ipv4_addr . inet_proto . inet_service", ""), "service hairpin connections"),
			"00040000 00000308 00040d00 00000100 071c7365 72766963 65206861 69727069 6e20636f 6e6e6563 74696f6e 7300"},
		{"verdict map", setUdata(mustType("ipv4_addr . inet_proto . inet_service : verdict", ""), "ClusterIP"),
			"00040000 00000104 00000000 03080004 0d000000 01000604 00000000 070a436c 75737465 72495000"},
		{"typeof map", setUdata(mustType("", "numgen random mod 1 : ip daddr . tcp dport"), "service endpoints by numgen value"),
			"00040100 00000104 00000000 031a0004 17000000 01120004 01000000 01040100 00000204 00000000 04340004 0d000000 012c0014 00040700 0000010c 00040c00 00000104 0c000000 01140004 07000000 010c0004 08000000 01040200 00000604 00000000 07227365 72766963 6520656e 64706f69 6e747320 6279206e 756d6765 6e207661 6c756500"},
		{"affinity set", setUdata(mustType("ipv4_addr", ""), ""), "00040200 0000"},
		{"numgen vmap", anonMapUdata(), "00040100 00000104 00000000 04080004 01000000 01000604 00000000"},
		{"interval set", anonIntervalUdata(typeofFields[0]), "00040200 00000204 01000000 03140004 07000000 010c0004 0c000000 01040c00 0000"},
	} {
		if d := cmp.Diff(unhex(t, c.nft), c.got); d != "" {
			t.Errorf("%s: user data differs from nft's (-nft +nftnl):\n%s", c.name, d)
		}
	}
}

func TestTypeFromUdata(t *testing.T) {
	for _, typeOf := range []string{"numgen random mod 1 : ip daddr . tcp dport", "numgen random mod 1 : ip6 daddr . sctp dport"} {
		st, err := parseType("", typeOf)
		if err != nil {
			t.Fatal(err)
		}
		got, comment, ok := typeFromUdata(setUdata(st, "c"))
		if !ok || got != typeOf || comment != "c" {
			t.Errorf("typeFromUdata of %q = %q, %q, %v", typeOf, got, comment, ok)
		}
	}
}

// TestElementBytes: element text encodes to the bytes nft sends, and
// reads back as the text nft prints.
func TestElementBytes(t *testing.T) {
	for _, c := range []struct {
		typ, typeOf, key, value, keyHex, valueHex string
	}{
		{typ: "ipv4_addr", key: "172.30.0.41", keyHex: "ac1e0029"},
		{typ: "ipv4_addr . inet_proto . inet_service : verdict", key: "172.30.0.41 . tcp . 80", keyHex: "ac1e0029 06000000 00500000"},
		{typ: "ipv4_addr . ipv4_addr . inet_proto . inet_service", key: "10.180.0.1 . 10.180.0.1 . tcp . 80", keyHex: "0ab40001 0ab40001 06000000 00500000"},
		{typ: "inet_proto . inet_service : verdict", key: "sctp . 3001", keyHex: "84000000 0bb90000"},
		{typ: "ipv6_addr . inet_proto . inet_service : verdict", key: "fd00::1 . udp . 53", keyHex: "fd000000 00000000 00000000 00000001 11000000 00350000"},
		{typeOf: "numgen random mod 1 : ip daddr . tcp dport", key: "65536", value: "10.180.0.1 . 80", keyHex: "00000100", valueHex: "0ab40001 00500000"},
		{typeOf: "numgen random mod 1 : ip6 daddr . tcp dport", key: "1", value: "fd00::2 . 8080", keyHex: "01000000", valueHex: "fd000000 00000000 00000000 00000002 1f900000"},
	} {
		st, err := parseType(c.typ, c.typeOf)
		if err != nil {
			t.Fatal(err)
		}
		check := func(ks []kind, text, want string) {
			b, ok := appendValue(nil, ks, text)
			if !ok {
				t.Errorf("%s%s: %q does not encode", c.typ, c.typeOf, text)
				return
			}
			if d := cmp.Diff(unhex(t, want), b); d != "" {
				t.Errorf("%s%s: %q encodes (-nft +nftnl):\n%s", c.typ, c.typeOf, text, d)
			}
			if back, ok := valueText(ks, b); !ok || back != text {
				t.Errorf("%s%s: %q reads back as %q", c.typ, c.typeOf, text, back)
			}
		}
		check(st.key, c.key, c.keyHex)
		if c.value != "" {
			check(st.data, c.value, c.valueHex)
		}
		if got := st.String(); got != c.typ+c.typeOf {
			t.Errorf("type %q%q prints as %q", c.typ, c.typeOf, got)
		}
	}
}

func TestParseTypeErrors(t *testing.T) {
	for _, c := range [][2]string{{"ether_addr", ""}, {"ipv4_addr : ipv4_addr", ""}, {"verdict", ""}, {"", "ip daddr : verdict"}, {"", "numgen random mod 0 : ip daddr"}} {
		if _, err := parseType(c[0], c[1]); err == nil {
			t.Errorf("parseType(%q, %q) succeeded", c[0], c[1])
		}
	}
}

// TestSameExprs: what the kernel fills in on its own does not count as a
// difference.
func TestSameExprs(t *testing.T) {
	written := []expr.Any{&expr.NAT{Type: expr.NATTypeDestNAT, Family: 2, RegAddrMin: 1, RegProtoMin: 9}, &expr.Lookup{SourceRegister: 1, SetName: "__set%d", SetID: 7}}
	read := []expr.Any{&expr.NAT{Type: expr.NATTypeDestNAT, Family: 2, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 9, RegProtoMax: 9, Specified: true}, &expr.Lookup{SourceRegister: 1, SetName: "__set3"}}
	if !sameExprs(written, read) {
		t.Error("sameExprs: kernel-filled fields count as a difference")
	}
	if sameExprs(written, read[:1]) {
		t.Error("sameExprs: lists of different lengths are the same")
	}
}

// TestLongComment: a comment nft would refuse is refused before sending.
func TestLongComment(t *testing.T) {
	long := strings.Repeat("x", maxComment+1)
	_, err := EncodeForTest(knftables.IPv4Family, "t", []Op{{Verb: Add, Obj: &knftables.Rule{Chain: "c", Rule: "drop", Comment: &long}}})
	if err == nil || !strings.Contains(err.Error(), "comment longer") {
		t.Errorf("encoding a %d-byte comment: %v", len(long), err)
	}
}

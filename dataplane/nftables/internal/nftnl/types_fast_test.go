package nftnl

import (
	"net/netip"
	"strconv"
	"testing"
)

// TestParseIPv4: the fast path reads what netip.ParseAddr reads as IPv4
// and nothing else.
func TestParseIPv4(t *testing.T) {
	for _, s := range []string{"1.2.3.4", "0.0.0.0", "255.255.255.255", "10.1.20.3", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5",
		"1..2.3", "1.2.3.4 ", "", "1.2.3.1000", "::1", "1.2.3.-4", "a.b.c.d", "1.2.3.4x"} {
		a, ok := parseIPv4(s)
		want, err := netip.ParseAddr(s)
		wantOK := err == nil && want.Is4()
		if ok && (!wantOK || want.As4() != a) {
			t.Errorf("parseIPv4(%q) = %v, true; netip says %v, %v", s, a, want, err)
		}
		if !ok && wantOK {
			t.Errorf("parseIPv4(%q) refused what netip reads as %v", s, want)
		}
	}
}

// TestParseDecimal: the fast path reads what strconv.ParseUint reads in
// base 10 up to the bound, and nothing else.
func TestParseDecimal(t *testing.T) {
	for _, s := range []string{"0", "80", "0080", "65535", "65536", "4294967295", "4294967296", "99999999999999999999999",
		"", "+1", "-1", "1_000", "0x10", " 1", "1 ", "８０"} {
		for _, bits := range []int{16, 32} {
			n, ok := parseDecimal(s, 1<<bits-1)
			want, err := strconv.ParseUint(s, 10, bits)
			if ok != (err == nil) || ok && n != want {
				t.Errorf("parseDecimal(%q, %d bits) = %d, %v; strconv says %d, %v", s, bits, n, ok, want, err)
			}
		}
	}
}

package nftnl

import (
	"net/netip"
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

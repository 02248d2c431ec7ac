package ipsetmatch

import (
	"errors"
	"net/netip"
	"testing"
)

func TestContains(t *testing.T) {
	p := Packet{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("172.30.0.10"), Proto: "tcp", DPort: 80}
	cases := []struct {
		name, typ string
		members   []string
		flags     []string
		want      bool
		err       bool
	}{
		{"ip, destination", "hash:ip", []string{"172.30.0.10"}, []string{"dst"}, true, false},
		{"ip, source", "hash:ip", []string{"172.30.0.10"}, []string{"src"}, false, false},
		{"net", "hash:net", []string{"10.0.0.0/8"}, []string{"src"}, true, false},
		{"net, a host", "hash:net", []string{"10.0.0.2"}, []string{"src"}, true, false},
		{"ip,port", "hash:ip,port", []string{"172.30.0.10,tcp:80", "172.30.0.11,udp:53"}, []string{"dst", "dst"}, true, false},
		{"ip,port, another protocol", "hash:ip,port", []string{"172.30.0.10,udp:80"}, []string{"dst", "dst"}, false, false},
		{"net,port", "hash:net,port", []string{"172.30.0.0/16,tcp:80"}, []string{"dst", "dst"}, true, false},
		{"ip,port,net", "hash:ip,port,net", []string{"172.30.0.10,tcp:80,10.0.0.0/24"}, []string{"dst", "dst", "src"}, true, false},
		{"ip,port,net, outside", "hash:ip,port,net", []string{"172.30.0.10,tcp:80,10.1.0.0/24"}, []string{"dst", "dst", "src"}, false, false},
		{"ip,port,ip", "hash:ip,port,ip", []string{"172.30.0.10,tcp:80,10.0.0.2"}, []string{"dst", "dst", "src"}, true, false},
		{"too few flags", "hash:ip,port", nil, []string{"dst"}, false, true},
		{"a source port", "hash:ip,port", nil, []string{"dst", "src"}, false, true},
		{"bitmap", "bitmap:port", []string{"80"}, []string{"dst"}, false, true},
		{"mac", "hash:mac", nil, []string{"src"}, false, true},
	}
	for _, tc := range cases {
		got, err := Contains(tc.typ, tc.members, tc.flags, p)
		if got != tc.want || (err != nil) != tc.err || err != nil && !errors.Is(err, ErrUnknown) {
			t.Errorf("%s: %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

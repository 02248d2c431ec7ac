package ipvs

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
)

func TestIPSets(t *testing.T) {
	u8 := func(v uint8) *uint8 { return &v }
	u16 := func(v uint16) *uint16 { return &v }
	got := ipSets([]netlink.IPSetResult{
		{SetName: "A", TypeName: "hash:ip,port", Entries: []netlink.IPSetEntry{
			{IP: net.ParseIP("172.30.0.11"), Protocol: u8(17), Port: u16(53)},
			{IP: net.ParseIP("172.30.0.10"), Protocol: u8(6), Port: u16(80)}}},
		{SetName: "B", TypeName: "hash:net", Entries: []netlink.IPSetEntry{{IP: net.ParseIP("10.0.0.0"), CIDR: 8}, {IP: net.ParseIP("10.1.0.1"), CIDR: 32}}},
		{SetName: "C", TypeName: "hash:ip,port,net", Entries: []netlink.IPSetEntry{
			{IP: net.ParseIP("fd00::10"), Protocol: u8(132), Port: u16(9), IP2: net.ParseIP("fd00:1::"), CIDR2: 64}}},
		{SetName: "EMPTY", TypeName: "hash:ip"},
		{SetName: "MAC", TypeName: "hash:mac", Entries: []netlink.IPSetEntry{{MAC: net.HardwareAddr{1, 2, 3, 4, 5, 6}}}},
		{SetName: "PORTS", TypeName: "bitmap:port"},
		{SetName: "ICMP", TypeName: "hash:ip,port", Entries: []netlink.IPSetEntry{{IP: net.ParseIP("1.2.3.4"), Protocol: u8(1), Port: u16(0)}}},
	})
	want := map[string]xtables.IPSet{
		"A":     {Type: "hash:ip,port", Members: []string{"172.30.0.10,tcp:80", "172.30.0.11,udp:53"}},
		"B":     {Type: "hash:net", Members: []string{"10.0.0.0/8", "10.1.0.1"}},
		"C":     {Type: "hash:ip,port,net", Members: []string{"fd00::10,sctp:9,fd00:1::/64"}},
		"EMPTY": {Type: "hash:ip", Members: []string{}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

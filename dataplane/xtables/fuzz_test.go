package xtables

import (
	"net/netip"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// FuzzParseSave: whatever iptables-save might print (or a broken file a
// user hands "explain --kernel"), ParseSave and a trace through what it
// read never panic, and a Ruleset's own Save reads back.
func FuzzParseSave(f *testing.F) {
	f.Add([]byte("*nat\n:PREROUTING ACCEPT [0:0]\n:PK-SERVICES - [0:0]\n-A PREROUTING -j PK-SERVICES\n-A PK-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.244.1.5:8080\nCOMMIT\n"))
	f.Add([]byte("*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -m mark ! --mark 0x2000/0x2000 -j TPROXY --on-port 80 --on-ip 10.96.0.10 --tproxy-mark 0x2000/0x2000\nCOMMIT\n"))
	f.Add([]byte("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n-A INPUT -m statistic --mode random --probability 0.5 -j REJECT\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, _ := ParseSave(data)
		for _, p := range []dataplane.Packet{
			{Src: netip.MustParseAddr("10.244.0.2"), Dst: netip.MustParseAddrPort("10.96.0.10:80"), Protocol: v1.ProtocolTCP, From: dataplane.FromLocalPod},
			{Src: netip.MustParseAddr("192.168.0.2"), Dst: netip.MustParseAddrPort("192.168.0.2:30080"), Protocol: v1.ProtocolUDP, From: dataplane.FromNode},
		} {
			rs.Trace(p, []netip.Addr{netip.MustParseAddr("192.168.0.2")})
		}
		for _, table := range []string{"nat", "filter", "mangle"} {
			if _, skipped := ParseSave(rs.Save(table)); len(skipped) != 0 {
				t.Errorf("%s: a Ruleset's own Save does not read back: %v", table, skipped)
			}
		}
	})
}

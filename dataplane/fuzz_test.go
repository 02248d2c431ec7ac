package dataplane_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// FuzzLookup feeds arbitrary packets to the States of the conformance
// scenarios: Lookup must never panic, must always explain itself, and its
// verdicts must be well formed and deterministic.
func FuzzLookup(f *testing.F) {
	f.Add("10.0.0.2", "172.30.0.41:80", "TCP", uint8(1), "")
	f.Add("203.0.113.130", "1.2.3.4:80", "TCP", uint8(0), "eth0")
	f.Add("127.0.0.1", "127.0.0.1:3001", "TCP", uint8(2), "")
	f.Add("fd00:10::2%eth0", "[fd00:172:30::41]:80", "UDP", uint8(1), "veth0")
	f.Add("", "1.2.3.4:0", "ICMP", uint8(9), "")

	var states []*dataplane.State
	for _, sc := range dpt.Scenarios() {
		_, st := sc.Build(f)
		states = append(states, st)
	}
	f.Fuzz(func(t *testing.T, src, dst, proto string, from uint8, iface string) {
		srcIP, _ := netip.ParseAddr(src)
		dstAP, _ := netip.ParseAddrPort(dst)
		p := dataplane.Packet{Src: srcIP, Dst: dstAP, Protocol: v1.Protocol(proto), From: dataplane.Origin(from % 4), Interface: iface}
		for _, st := range states {
			v := st.Lookup(p)
			if v.Reason == "" {
				t.Fatalf("no reason for %+v", p)
			}
			if d := dpt.DiffVerdict(v, st.Lookup(p)); d != "" {
				t.Fatalf("two Lookups of %+v differ:\n%s", p, d)
			}
			switch {
			case v.Action == dataplane.DNAT:
				if len(v.Endpoints) == 0 || !slices.IsSortedFunc(v.Endpoints, netip.AddrPort.Compare) {
					t.Fatalf("DNAT of %+v to unsorted or no endpoints %v", p, v.Endpoints)
				}
				for _, h := range v.Hairpin {
					if !slices.Contains(v.Endpoints, h) || h.Addr() != p.Src.WithZone("") {
						t.Fatalf("hairpin %v of %+v is not a candidate with the source's IP", h, p)
					}
				}
			case len(v.Endpoints) > 0 || len(v.Hairpin) > 0 || v.Masquerade || v.Affinity:
				t.Fatalf("%v verdict for %+v carries DNAT details: %+v", v.Action, p, v)
			}
			if (v.Action == dataplane.NotAService) != (v.Service == dpt.PortName("", "", "", "")) {
				t.Fatalf("%v verdict for %+v names service %v", v.Action, p, v.Service)
			}
		}
	})
}

package affinity

import (
	"fmt"
	"testing"
)

// benchEndpoints spreads n ready endpoints over three zones and n/4 nodes,
// this node hosting the first few; withHints adds the zone hints the
// EndpointSlice controller writes for PreferClose.
func benchEndpoints(n int, withHints bool) []*testEP {
	eps := make([]*testEP, n)
	for i := range eps {
		zone := fmt.Sprintf("zone-%d", i%3)
		ep := &testEP{Addr: fmt.Sprint(i), EndpointInfo: EndpointInfo{
			Ready:    i%10 != 9,
			Serving:  true,
			Local:    i%(n/4+1) == 0,
			Zone:     zone,
			NodeName: fmt.Sprintf("node-%d", i%(n/4+1)),
		}}
		if withHints {
			ep.ZoneHints = []string{zone}
		}
		eps[i] = ep
	}
	return eps
}

func BenchmarkCategorize(b *testing.B) {
	node := Node{Name: "node-0", Zone: "zone-0"}
	etp := Policy{ExternalLocal: true, ExternallyAccessible: true}
	for _, n := range []int{10, 100, 1000} {
		plain, hinted := benchEndpoints(n, false), benchEndpoints(n, true)
		for _, bc := range []struct {
			name string
			eps  []*testEP
			p    Policy
			opts Options
		}{
			{"cluster", plain, Policy{}, Options{}},
			{"zone-hints", hinted, Policy{}, Options{}},
			{"etp-local-merge", hinted, etp, Options{}},
			{"derive-same-node", plain, Policy{TrafficDistribution: "PreferSameNode"}, Options{DeriveHints: true}},
		} {
			b.Run(fmt.Sprintf("%s/%d", bc.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					Categorize(bc.eps, bc.p, node, bc.opts)
				}
			})
		}
	}
}

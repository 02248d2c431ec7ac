package endpoints

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkTrackerLargeService changes one endpoint of one slice of a
// service with many slices, then checks out. An update costs the size of
// its slice, so only the Checkout, which rebuilds the port's list, grows
// with the service.
func BenchmarkTrackerLargeService(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("slices=%d", n), func(b *testing.B) {
			var orig, changed []*discovery.EndpointSlice
			for s := range n {
				var eps []discovery.Endpoint
				for i := range 100 {
					eps = append(eps, discovery.Endpoint{
						Addresses: []string{fmt.Sprintf("10.%d.%d.%d", s/250, s%250, i+1)},
						NodeName:  ptr.To(fmt.Sprintf("node-%d", i%7)),
					})
				}
				sl := slice("ns", "big", fmt.Sprintf("big-%d", s), ports(udpPort("dns", 53)), eps...)
				c := sl.DeepCopy()
				c.Endpoints[0].Conditions.Ready = ptr.To(false)
				orig = append(orig, sl)
				changed = append(changed, c)
			}
			tr := NewTracker(Config{Family: v1.IPv4Protocol, NodeName: "node-0"})
			for _, s := range orig {
				tr.Update(nil, s)
			}
			tr.Checkout()
			flipped := make([]bool, n)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				k := i % n
				i++
				if flipped[k] {
					tr.Update(changed[k], orig[k])
				} else {
					tr.Update(orig[k], changed[k])
				}
				flipped[k] = !flipped[k]
				if _, ch := tr.Checkout(); ch.Services.Len() != 1 {
					b.Fatalf("%d services changed, want 1", ch.Services.Len())
				}
			}
		})
	}
}

package validation

import (
	"fmt"
	"testing"

	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkValidate is what the informer source adds to each change it
// hands on: one validation of the object changed.
func BenchmarkValidate(b *testing.B) {
	slice := validSlice()
	slice.Endpoints = nil
	for i := range 100 {
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{
			Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/200, i%200+1)},
			NodeName:  ptr.To(fmt.Sprintf("node-%d", i%10)),
			Zone:      ptr.To("zone-a"),
		})
	}
	svc := validService()
	b.Run("Service", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if Validate(svc, Stored) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("EndpointSlice100", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if Validate(slice, Stored) != nil {
				b.Fatal("refused")
			}
		}
	})
}

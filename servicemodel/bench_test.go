package servicemodel

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func benchService(i, port int) *v1.Service {
	return makeService("ns", fmt.Sprintf("svc-%d", i), func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8::1"}
		s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
		s.Spec.Ports = addPort(nil, "dns", v1.ProtocolUDP, int32(port), 30053, 53)
		s.Spec.Ports = addPort(s.Spec.Ports, "dns-tcp", v1.ProtocolTCP, int32(port), 30054, 53)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.1"}}
	})
}

func BenchmarkNormalize(b *testing.B) {
	svc := benchService(1, 53)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Normalize(svc, v1.IPv4Protocol, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckoutOneChange changes one service of many per Checkout; its
// cost must not grow with the number of services.
func BenchmarkCheckoutOneChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			tr := NewTracker(Config{})
			for i := range n {
				tr.Update(nil, benchService(i, 53))
			}
			tr.Checkout()
			versions := []*v1.Service{benchService(0, 53), benchService(0, 54)}
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				tr.Update(versions[k%2], versions[(k+1)%2])
				tr.Checkout()
				k++
			}
		})
	}
}

package dataplane_test

import (
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// bigBuilder returns a Builder holding n LoadBalancer services with node
// ports and ten endpoints each, already built once.
func bigBuilder(b *testing.B, n int) (*dataplane.Builder, []*v1.Service, *dataplane.State) {
	bld := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, Settings: dpt.DefaultSettings()})
	bld.UpdateNode(dpt.TestNode(nil))
	svcs := make([]*v1.Service, n)
	for i := range n {
		svcs[i] = dpt.MakeService("ns", fmt.Sprintf("svc%d", i), func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, int32(30000+i), 0)}
			s.Status.LoadBalancer.Ingress = lbIngressFor(i)
		})
		bld.UpdateService(nil, svcs[i])
		bld.UpdateEndpointSlice(nil, dpt.MakeSlice("ns", svcs[i].Name, 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 8080)}
			for j := range 10 {
				s.Endpoints = append(s.Endpoints, dpt.ReadyEndpoint(fmt.Sprintf("10.%d.%d.%d", 100+j, i/250, i%250+1), ""))
			}
		}))
	}
	return bld, svcs, bld.Build().States[0]
}

func lbIngressFor(i int) []v1.LoadBalancerIngress {
	return []v1.LoadBalancerIngress{{IP: fmt.Sprintf("100.64.%d.%d", i/250, i%250+1)}}
}

func BenchmarkLookup(b *testing.B) {
	_, _, st := bigBuilder(b, 5000)
	packets := map[string]dataplane.Packet{
		"cluster IP":  dpt.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.3.7:80", v1.ProtocolTCP),
		"node port":   dpt.MakePacket(dataplane.FromOutside, dpt.ExternalClient, dpt.NodeIP+":31234", v1.ProtocolTCP),
		"LB VIP":      dpt.MakePacket(dataplane.FromOutside, dpt.ExternalClient, "100.64.3.7:80", v1.ProtocolTCP),
		"not service": dpt.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "10.0.0.3:80", v1.ProtocolTCP),
	}
	st.Lookup(packets["cluster IP"]) // build the index outside the loop
	for name, p := range packets {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st.Lookup(p)
			}
		})
	}
}

// BenchmarkBuildOneChange measures a Build after one endpoint change among
// 5000 services: it must not grow with the number of services.
func BenchmarkBuildOneChange(b *testing.B) {
	bld, svcs, _ := bigBuilder(b, 5000)
	slice := func(ip string) *discovery.EndpointSlice {
		return dpt.MakeSlice("ns", svcs[42].Name, 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 8080)}
			s.Endpoints = []discovery.Endpoint{dpt.ReadyEndpoint(ip, "")}
		})
	}
	a, c := slice("10.200.0.1"), slice("10.200.0.2")
	b.ReportAllocs()
	flip := false
	for b.Loop() {
		if flip {
			bld.UpdateEndpointSlice(c, a)
		} else {
			bld.UpdateEndpointSlice(a, c)
		}
		flip = !flip
		bld.Build()
	}
}

// BenchmarkFirstBuild is the model's share of a first sync: 10,000
// services with ten endpoints each handed to a new Builder, then built.
func BenchmarkFirstBuild(b *testing.B) {
	const n = 10000
	svcs := make([]*v1.Service, n)
	slices := make([]*discovery.EndpointSlice, n)
	for i := range n {
		svcs[i] = dpt.MakeService("ns", fmt.Sprintf("svc%d", i), func(s *v1.Service) {
			s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
		})
		slices[i] = dpt.MakeSlice("ns", svcs[i].Name, 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 8080)}
			for j := range 10 {
				s.Endpoints = append(s.Endpoints, dpt.ReadyEndpoint(fmt.Sprintf("10.%d.%d.%d", 100+j, i/250, i%250+1), ""))
			}
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		bld := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, Settings: dpt.DefaultSettings()})
		bld.UpdateNode(dpt.TestNode(nil))
		for i := range n {
			bld.UpdateService(nil, svcs[i])
			bld.UpdateEndpointSlice(nil, slices[i])
		}
		if st := bld.Build().States[0]; st.Services.Len() != n {
			b.Fatalf("%d services", st.Services.Len())
		}
	}
}

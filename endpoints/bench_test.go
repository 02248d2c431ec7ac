package endpoints_test

// The benchmarks live in an external package so that they can drive the
// whole path through dataplane.Builder, which imports this package.

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var benchSizes = []int{1000, 10000}

const endpointsPerService = 10

// benchCluster returns n ClusterIP Services, each with one EndpointSlice
// of endpointsPerService endpoints, and for each slice a variant in which
// one endpoint stopped being ready.
func benchCluster(n int) (svcs []*v1.Service, slices, changed []*discovery.EndpointSlice) {
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: v1.ServiceSpec{
				Type:       v1.ServiceTypeClusterIP,
				ClusterIP:  fmt.Sprintf("172.30.%d.%d", i/250, i%250+1),
				ClusterIPs: []string{fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				Ports: []v1.ServicePort{{
					Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080),
				}},
			},
		})
		s := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "bench",
				Name:      name + "-abcde",
				Labels:    map[string]string{discovery.LabelServiceName: name},
			},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
		}
		for j := range endpointsPerService {
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)},
				Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				NodeName:   ptr.To(fmt.Sprintf("node-%d", j%3)),
				Zone:       ptr.To("zone-a"),
			})
		}
		c := s.DeepCopy()
		c.ResourceVersion = "2"
		c.Endpoints[0].Conditions.Ready = ptr.To(false)
		slices = append(slices, s)
		changed = append(changed, c)
	}
	return svcs, slices, changed
}

func loadBuilder(svcs []*v1.Service, slices []*discovery.EndpointSlice) *dataplane.Builder {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: "node-0"})
	for _, s := range svcs {
		b.UpdateService(nil, s)
	}
	for _, s := range slices {
		b.UpdateEndpointSlice(nil, s)
	}
	return b
}

// BenchmarkInitialLoad feeds N Services and their EndpointSlices to a new
// Builder and builds the first State. cpu-ms/op is the process's CPU time,
// which other programs on a shared machine do not inflate as they do wall
// time.
func BenchmarkInitialLoad(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			svcs, slices, _ := benchCluster(n)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				st := loadBuilder(svcs, slices).Build().States[0]
				if st.Endpoints.Len() != n {
					b.Fatalf("State has endpoints for %d services, want %d", st.Endpoints.Len(), n)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkOneChange changes one endpoint of one slice after the initial
// load and builds the next State; its cost must not grow with N.
func BenchmarkOneChange(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			svcs, slices, changed := benchCluster(n)
			bl := loadBuilder(svcs, slices)
			bl.Build()
			flipped := make([]bool, n)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				k := i % n
				i++
				if flipped[k] {
					bl.UpdateEndpointSlice(changed[k], slices[k])
				} else {
					bl.UpdateEndpointSlice(slices[k], changed[k])
				}
				flipped[k] = !flipped[k]
				build := bl.Build()
				if got := build.Changes[0].Endpoints.Services.Len(); got != 1 {
					b.Fatalf("Build reported %d changed services, want 1", got)
				}
			}
		})
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

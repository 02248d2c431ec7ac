package nftables

import (
	"fmt"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/knftables"
)

// testDataplane is an IPv4 Dataplane on a fake with a fake clock.
func testDataplane(t testing.TB, fake *knftables.Fake) (*Dataplane, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d, err := New(Config{NFT: fake, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return d, clk
}

func newBuilder() *dataplane.Builder {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol},
		NodeName: dataplanetest.NodeName,
		Settings: dataplanetest.DefaultSettings(),
	})
	b.UpdateNode(dataplanetest.TestNode(nil))
	return b
}

// clusterIPService is service svcN with cluster IP 172.30.x.y, port 80.
func clusterIPService(n int) *v1.Service {
	return dataplanetest.MakeService("ns", fmt.Sprintf("svc%d", n), func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", n/250, n%250+1)
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
	})
}

// nodePortService is clusterIPService with node port 30000+n: a port
// with chains of its own.
func nodePortService(n int) *v1.Service {
	s := clusterIPService(n)
	s.Spec.Type = v1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = int32(30000 + n)
	return s
}

// slice is the endpoints of svcN: eps remote endpoints 10.1.n/250.i, plus
// local ones 10.180.0.i.
func slice(n, eps, local int) *discovery.EndpointSlice {
	return dataplanetest.MakeSlice("ns", fmt.Sprintf("svc%d", n), 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
		for i := range eps {
			s.Endpoints = append(s.Endpoints, dataplanetest.ReadyEndpoint(fmt.Sprintf("10.1.%d.%d", n%250, i+1), "node2"))
		}
		for i := range local {
			s.Endpoints = append(s.Endpoints, dataplanetest.ReadyEndpoint(fmt.Sprintf("10.180.%d.%d", n%250, i+1), dataplanetest.NodeName))
		}
	})
}

package dataplanetest_test

import (
	"context"
	"fmt"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// Example shows the pieces a vendor's conformance test is made of. The test
// itself is one call,
//
//	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness { return newHarness(t) })
//
// which builds each scenario's State, Syncs it into a fresh harness and
// compares Trace with the table and with State.Lookup; here the Recorder
// stands in for a real dataplane.
func Example() {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName, Settings: dataplanetest.DefaultSettings()})
	b.UpdateNode(dataplanetest.TestNode(nil))
	b.UpdateService(nil, dataplanetest.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
	}))
	b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns1", "svc1", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 80)}
		s.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.180.0.1", dataplanetest.NodeName)}
	}))

	ctx := context.Background()
	rec := dataplanetest.NewRecorder("fake")
	rec.FailNext(1, nil)
	fmt.Println(rec.Sync(ctx, b.Build().States[0]))
	fmt.Println(rec.Sync(ctx, rec.Syncs()[0].State))

	v, _ := rec.Trace(ctx, dataplanetest.MakePacket(dataplane.FromOutside, dataplanetest.ExternalClient, dataplanetest.NodeIP+":3001", v1.ProtocolTCP))
	fmt.Println(v.Action, v.Service, v.Endpoints, v.Masquerade)

	kernel := dataplanetest.Filter(dataplanetest.Scenarios(), dataplanetest.HasTag(dataplanetest.TagKernelSafe))
	fmt.Println(kernel[0].Name, "is safe for a real kernel")
	// Output:
	// recorder "fake": dataplanetest: injected sync failure
	// <nil>
	// DNAT ns1/svc1:p80 [10.180.0.1:80] true
	// NoEndpointsReject is safe for a real kernel
}

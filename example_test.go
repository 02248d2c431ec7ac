package proxykit_test

import (
	"context"
	"fmt"

	"github.com/go-logr/logr/funcr"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// Assemble a proxy from a fixed set of objects and a recording dataplane,
// sync it once (as a node agent's --once does) and ask the programmed
// State where a pod's DNS query goes.
func Example() {
	svc := dataplanetest.MakeService("kube-system", "dns", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.96.0.10"
		s.Spec.ClusterIPs = []string{"10.96.0.10"}
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("dns", v1.ProtocolUDP, 53, 0, 53)}
	})
	slice := dataplanetest.MakeSlice("kube-system", "dns", 1, func(es *discovery.EndpointSlice) {
		es.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("dns", v1.ProtocolUDP, 53)}
		es.Endpoints = []discovery.Endpoint{
			dataplanetest.ReadyEndpoint("10.244.1.5", "node-a"),
			dataplanetest.ReadyEndpoint("10.244.2.9", "node-b"),
		}
	})
	rec := dataplanetest.NewRecorder("recorder")
	p, err := proxykit.New(proxykit.Config{
		NodeName:   "node-a",
		Sources:    []proxykit.Source{proxykit.NewStaticSource(svc, slice)},
		Dataplanes: []proxykit.DataplaneConfig{{Family: v1.IPv4Protocol, Dataplane: rec}},
		Logger:     funcr.New(func(string, string) {}, funcr.Options{}),
	})
	if err != nil {
		panic(err)
	}
	if err := p.RunOnce(context.Background()); err != nil {
		panic(err)
	}
	v := rec.Programmed().Lookup(dataplanetest.MakePacket(dataplane.FromLocalPod, "10.244.1.7", "10.96.0.10:53", v1.ProtocolUDP))
	fmt.Println(len(rec.Syncs()), v.Action, v.Service, v.Endpoints)
	// Output:
	// 1 DNAT kube-system/dns:dns [10.244.1.5:53 10.244.2.9:53]
}

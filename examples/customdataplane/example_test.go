package customdataplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/examples/customdataplane"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// web is a ClusterIP service with two endpoints on other nodes.
func web() (*v1.Service, *discovery.EndpointSlice) {
	svc := dataplanetest.MakeService("default", "web", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.96.0.10"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, 0, 8080)}
	})
	slice := dataplanetest.MakeSlice("default", "web", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("http", v1.ProtocolTCP, 8080)}
		s.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.244.1.5", "node-b"), dataplanetest.ReadyEndpoint("10.244.2.9", "node-c")}
	})
	return svc, slice
}

// Example syncs one State into the Dataplane and reads the table back over
// HTTP, as a datapath's loader would.
func Example() {
	svc, slice := web()
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: "node-a"})
	b.UpdateService(nil, svc)
	b.UpdateEndpointSlice(nil, slice)

	dp := customdataplane.New()
	if err := dp.Sync(context.Background(), b.Build().States[0]); err != nil {
		fmt.Println(err)
		return
	}
	printEntry(dp, "10.96.0.10:80/TCP")
	// Output: default/web:http dnat [10.244.1.5:8080 10.244.2.9:8080]
}

// Example_proxy hands the Dataplane to a proxy, which feeds it from a
// source and syncs it (here once, as a node agent's --once does).
func Example_proxy() {
	svc, slice := web()
	dp := customdataplane.New()
	p, err := proxykit.New(proxykit.Config{
		NodeName:   "node-a",
		Sources:    []source.Source{source.Static{svc, slice}},
		Dataplanes: []proxykit.DataplaneConfig{{Family: v1.IPv4Protocol, Dataplane: dp}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.RunOnce(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	printEntry(dp, "10.96.0.10:80/TCP")
	// Output: default/web:http dnat [10.244.1.5:8080 10.244.2.9:8080]
}

// printEntry fetches dp's table over HTTP and prints the first entry at
// key.
func printEntry(dp *customdataplane.Dataplane, key string) {
	srv := httptest.NewServer(dp)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var t customdataplane.Table
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		fmt.Println(err)
		return
	}
	e := t.Frontends[key][0]
	fmt.Println(e.Service, e.FromPod.Verb, e.FromPod.Backends)
}

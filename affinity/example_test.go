package affinity_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/proxykit/proxykit/affinity"
)

// backend is a caller's own endpoint type: embedding EndpointInfo is all it
// takes to be an affinity.Endpoint.
type backend struct {
	addr string
	affinity.EndpointInfo
}

func addrs(bs []*backend) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.addr)
	}
	return out
}

// A NodePort service with externalTrafficPolicy: Local and
// trafficDistribution: PreferSameZone, seen from node-1 in zone-a. The
// EndpointSlice controller has hinted every ready endpoint for its own
// zone.
func Example() {
	eps := []*backend{
		{"10.0.1.5:8080", affinity.EndpointInfo{Ready: true, Serving: true, Local: true, NodeName: "node-1", Zone: "zone-a", ZoneHints: []string{"zone-a"}}},
		{"10.0.2.7:8080", affinity.EndpointInfo{Ready: true, Serving: true, NodeName: "node-2", Zone: "zone-b", ZoneHints: []string{"zone-b"}}},
		{"10.0.3.9:8080", affinity.EndpointInfo{Ready: true, Serving: true, NodeName: "node-3", Zone: "zone-a", ZoneHints: []string{"zone-a"}}},
		{"10.0.1.6:8080", affinity.EndpointInfo{Serving: true, Terminating: true, Local: true, NodeName: "node-1", Zone: "zone-a"}},
	}
	policy := affinity.Policy{ExternalLocal: true, ExternallyAccessible: true}
	node := affinity.Node{Name: "node-1", Zone: "zone-a"}

	sel := affinity.Categorize(eps, policy, node, affinity.Options{})
	fmt.Println("topology:", affinity.TopologyMode(eps, policy, node, affinity.Options{}))
	fmt.Println("cluster: ", addrs(sel.Cluster))
	fmt.Println("local:   ", addrs(sel.Local))
	fmt.Println("all:     ", addrs(sel.AllReachable))
	fmt.Println("has any: ", sel.HasAny)

	sa, err := affinity.SessionAffinityOf(&v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityClientIP})
	fmt.Println("affinity:", sa.ClientIP, sa.Timeout, err)
	// Output:
	// topology: PreferSameZone
	// cluster:  [10.0.1.5:8080 10.0.3.9:8080]
	// local:    [10.0.1.5:8080]
	// all:      [10.0.1.5:8080 10.0.3.9:8080]
	// has any:  true
	// affinity: true 3h0m0s <nil>
}

// Without hints in the slices, Options.DeriveHints lets the service's
// trafficDistribution act as the EndpointSlice controller would have made
// it act.
func ExampleCategorize_deriveHints() {
	eps := []*backend{
		{"10.0.1.5:8080", affinity.EndpointInfo{Ready: true, NodeName: "node-1", Zone: "zone-a"}},
		{"10.0.2.7:8080", affinity.EndpointInfo{Ready: true, NodeName: "node-2", Zone: "zone-b"}},
		{"10.0.3.9:8080", affinity.EndpointInfo{Ready: true, NodeName: "node-3", Zone: "zone-a"}},
	}
	node := affinity.Node{Name: "node-3", Zone: "zone-a"}
	for _, td := range []string{"", v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode} {
		sel := affinity.Categorize(eps, affinity.Policy{TrafficDistribution: td}, node, affinity.Options{DeriveHints: true})
		fmt.Printf("%-16q %v\n", td, addrs(sel.Cluster))
	}
	// Output:
	// ""               [10.0.1.5:8080 10.0.2.7:8080 10.0.3.9:8080]
	// "PreferSameZone" [10.0.1.5:8080 10.0.3.9:8080]
	// "PreferSameNode" [10.0.3.9:8080]
}

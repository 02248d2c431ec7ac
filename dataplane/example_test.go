package dataplane_test

import (
	"fmt"
	"net/netip"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Example builds the State of a node serving one NodePort Service with
// externalTrafficPolicy Local, and asks where three packets go.
func Example() {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		NodeName: "node-a",
		Settings: dataplane.Settings{LocalDetector: dataplane.LocalDetector{
			Mode:  dataplane.LocalModeClusterCIDR,
			CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		}},
	})
	b.UpdateNode(&v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.2"}}},
	})
	b.UpdateService(nil, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeNodePort,
			ClusterIP:             "172.30.0.10",
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
			Ports: []v1.ServicePort{{
				Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080),
			}},
		},
	})
	b.UpdateEndpointSlice(nil, &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.1.0.5"}, NodeName: ptr.To("node-a")},
			{Addresses: []string{"10.2.0.7"}, NodeName: ptr.To("node-b")},
		},
	})
	st := b.Build().States[0]

	for _, p := range []dataplane.Packet{
		{From: dataplane.FromLocalPod, Src: netip.MustParseAddr("10.1.0.9"), Dst: netip.MustParseAddrPort("172.30.0.10:80"), Protocol: v1.ProtocolTCP},
		{From: dataplane.FromOutside, Src: netip.MustParseAddr("203.0.113.2"), Dst: netip.MustParseAddrPort("192.168.0.2:30080"), Protocol: v1.ProtocolTCP},
		{From: dataplane.FromNode, Src: netip.MustParseAddr("192.168.0.2"), Dst: netip.MustParseAddrPort("192.168.0.2:30080"), Protocol: v1.ProtocolTCP},
	} {
		v := st.Lookup(p)
		fmt.Printf("%s from %s: %v to %v, masquerade %v\n", p.Dst, p.From, v.Action, v.Endpoints, v.Masquerade)
	}
	// Output:
	// 172.30.0.10:80 from local-pod: DNAT to [10.1.0.5:8080 10.2.0.7:8080], masquerade false
	// 192.168.0.2:30080 from outside: DNAT to [10.1.0.5:8080], masquerade false
	// 192.168.0.2:30080 from node: DNAT to [10.1.0.5:8080 10.2.0.7:8080], masquerade true
}

// ExampleState_ChangedSince shows how a dataplane decides between a
// partial and a full sync.
func ExampleState_ChangedSince() {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: "node-a"})
	web := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       v1.ServiceSpec{ClusterIP: "172.30.0.10", Ports: []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}}},
	}
	b.UpdateService(nil, web)
	var programmed uint64 // the generation this dataplane last synced
	sync := func(st *dataplane.State) {
		if changed, ok := st.ChangedSince(programmed); ok {
			fmt.Println("partial sync of", changed.UnsortedList())
		} else {
			fmt.Println("full sync of", st.Services.Len(), "service port(s)")
		}
		programmed = st.Generation
	}
	sync(b.Build().States[0])

	moved := web.DeepCopy()
	moved.Spec.Ports[0].Port = 8080
	b.UpdateService(web, moved)
	sync(b.Build().States[0])
	// Output:
	// full sync of 1 service port(s)
	// partial sync of [shop/web]
}

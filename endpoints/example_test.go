package endpoints_test

import (
	"fmt"

	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A DNS service with two slices: one endpoint appears in both, one pod is
// terminating. After the pod is gone, the next Checkout reports exactly the
// UDP endpoint whose conntrack entries must be flushed.
func Example() {
	tracker := endpoints.NewTracker(endpoints.Config{NodeName: "node-a"})
	dns := func(name string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "kube-system",
				Name:      name,
				Labels:    map[string]string{discovery.LabelServiceName: "kube-dns"},
			},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(v1.ProtocolUDP)}},
			Endpoints:   eps,
		}
	}
	pod := func(ip, node string, terminating bool) discovery.Endpoint {
		return discovery.Endpoint{
			Addresses: []string{ip},
			NodeName:  ptr.To(node),
			Conditions: discovery.EndpointConditions{
				Ready:       ptr.To(!terminating),
				Serving:     ptr.To(true),
				Terminating: ptr.To(terminating),
			},
		}
	}
	a := dns("kube-dns-a", pod("10.0.0.11", "node-b", true), pod("10.0.0.2", "node-a", false))
	b := dns("kube-dns-b", pod("10.0.0.2", "node-a", false))
	tracker.Update(nil, a)
	tracker.Update(nil, b)

	m, changes := tracker.Checkout()
	port := servicemodel.PortName{
		NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"},
		Port:           "dns",
		Protocol:       v1.ProtocolUDP,
	}
	for _, ep := range m.Get(port) {
		fmt.Printf("%v ready=%v serving=%v terminating=%v local=%v\n", ep, ep.Ready, ep.Serving, ep.Terminating, ep.Local)
	}
	fmt.Println("changed:", changes.Services.UnsortedList(), "local ready:", m.LocalReadyEndpoints(port.NamespacedName))

	// A metadata-only update changes nothing.
	touched := b.DeepCopy()
	touched.ResourceVersion = "2"
	fmt.Println("metadata-only update is a change:", tracker.Update(b, touched))

	// The terminating pod goes away.
	gone := dns("kube-dns-a", pod("10.0.0.2", "node-a", false))
	fmt.Println("removal is a change:", tracker.Update(a, gone))
	_, changes = tracker.Checkout()
	for _, s := range changes.Stale {
		fmt.Println("stale:", s.Addr, s.Port.Protocol)
	}
	// Output:
	// 10.0.0.2:53 ready=true serving=true terminating=false local=true
	// 10.0.0.11:53 ready=false serving=true terminating=true local=false
	// changed: [kube-system/kube-dns] local ready: 1
	// metadata-only update is a change: false
	// removal is a change: true
	// stale: 10.0.0.11:53 UDP
}

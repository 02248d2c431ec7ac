package troubleshoot_test

import (
	"fmt"
	"os"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/troubleshoot"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Example asks why a Service whose pods are all being deleted does not
// answer.
func Example() {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: "node-a"})
	b.UpdateService(nil, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "172.30.0.10",
			Ports:     []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	})
	terminating := discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
	b.UpdateEndpointSlice(nil, &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.1.0.5"}, NodeName: ptr.To("node-a"), Conditions: terminating},
			{Addresses: []string{"10.2.0.7"}, NodeName: ptr.To("node-b"), Conditions: terminating},
		},
	})
	states := b.Build().States

	r := troubleshoot.Diagnose(states, types.NamespacedName{Namespace: "shop", Name: "web"}, "", troubleshoot.Config{})
	fmt.Println(r.Verdict)
	_ = troubleshoot.WriteList(os.Stdout, troubleshoot.List(states, troubleshoot.Filter{Namespace: "shop"}))
	// Output:
	// http/TCP (IPv4): no ready endpoints: 2 pods terminating, 0 serving
	// FRONTEND            TYPE       SERVICE            BACKENDS
	// 172.30.0.10:80/TCP  ClusterIP  shop/web:http/TCP  10.1.0.5:8080 (terminating, not serving, local, unused), 10.2.0.7:8080 (terminating, not serving, unused)
}

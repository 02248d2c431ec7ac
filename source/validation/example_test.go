package validation_test

import (
	"fmt"
	"strings"

	"github.com/proxykit/proxykit/source/validation"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Validate answers as the API server would: nil, or its error naming each
// field it refuses.
func Example() {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.10",
			Ports:     []v1.ServicePort{{Name: "http", Port: 80}, {Name: "metrics", Port: 0}},
		},
	}
	fmt.Println(validation.Validate(svc, validation.Create))

	svc.Name = strings.Repeat("web", 30)
	svc.Spec.Ports[1].Port = 9090
	fmt.Println(validation.Service(svc, validation.Create))

	slice := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.244.1.5"}}, {Addresses: []string{"169.254.169.254"}}},
	}
	fmt.Println(validation.Validate(slice, validation.Stored))
	// Output:
	// Service "web" is invalid: spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive
	// [metadata.name: Invalid value: "webwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebwebweb": must be no more than 63 characters]
	// EndpointSlice.discovery.k8s.io "web-1" is invalid: endpoints[1].addresses[0]: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)
}

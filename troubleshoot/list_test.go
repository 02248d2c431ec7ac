package troubleshoot

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

func TestList(t *testing.T) {
	states := build(t,
		web(func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.6.7.8"}}
		}),
		webSlice(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode), dt.Endpoint("10.1.0.9", otherNode, false, true, true)),
		dt.MakeService("kube-system", "dns", func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.53", []string{"172.30.0.53", "fd00:30::53"}
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
			s.Spec.Ports = []v1.ServicePort{dt.ServicePort("dns", v1.ProtocolUDP, 53, 0, 0)}
		}),
		dt.MakeSlice("kube-system", "dns", 1, func(s *discovery.EndpointSlice) {
			s.AddressType = discovery.AddressTypeIPv6
			s.Ports = []discovery.EndpointPort{dt.SlicePort("dns", v1.ProtocolUDP, 53)}
			s.Endpoints = []discovery.Endpoint{dt.ReadyEndpoint("fd00:10::53", otherNode)}
		}),
	)
	cases := []struct {
		name   string
		filter Filter
		want   []string
	}{
		{name: "all", want: []string{"172.30.0.10:80/TCP", "5.6.7.8:80/TCP", ":30080/TCP", "172.30.0.53:53/UDP", "[fd00:30::53]:53/UDP"}},
		{name: "namespace", filter: Filter{Namespace: "kube-system"}, want: []string{"172.30.0.53:53/UDP", "[fd00:30::53]:53/UDP"}},
		{name: "name", filter: Filter{Name: "web"}, want: []string{"172.30.0.10:80/TCP", "5.6.7.8:80/TCP", ":30080/TCP"}},
		{name: "type", filter: Filter{Type: "nodeport"}, want: []string{":30080/TCP"}},
		{name: "nothing", filter: Filter{Namespace: "default", Name: "dns"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range List(states, tc.filter) {
				got = append(got, r.Frontend)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("frontends (-want +got):\n%s", diff)
			}
		})
	}
	var b bytes.Buffer
	if err := WriteList(&b, List(states, Filter{})); err != nil {
		t.Fatal(err)
	}
	golden(t, "list.txt", b.String())
}

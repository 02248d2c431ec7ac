package validation

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// validService is a Service as the API server stores it.
func validService() *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeClusterIP,
			ClusterIP:             "10.96.0.10",
			ClusterIPs:            []string{"10.96.0.10"},
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(v1.IPFamilyPolicySingleStack),
			SessionAffinity:       v1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(v1.ServiceInternalTrafficPolicyCluster),
			Selector:              map[string]string{"app": "web"},
			Ports: []v1.ServicePort{
				{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")},
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
			},
		},
	}
}

func loadBalancer(s *v1.Service) {
	s.Spec.Type = v1.ServiceTypeLoadBalancer
	s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	s.Spec.HealthCheckNodePort = 30100
	s.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
	s.Spec.Ports[0].NodePort = 30080
	s.Spec.Ports[1].NodePort = 30053
	s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.10", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}
}

func validSlice() *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-abcde", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("node-a"), Zone: ptr.To("zone-a"),
				Hints: &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "zone-a"}}}},
			{Addresses: []string{"10.244.2.9"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(false)}},
		},
		Ports: []discovery.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("dns"), Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To[int32](5353)},
		},
	}
}

func validNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{v1.LabelTopologyZone: "zone-a"}},
		Spec: v1.NodeSpec{
			PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"},
			Taints:   []v1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: v1.TaintEffectNoSchedule}},
		},
	}
}

func messages(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

var long200 = strings.Repeat("a", 200)

func TestService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   Mode
		modify func(*v1.Service)
		want   []string
	}{
		{name: "valid", modify: func(*v1.Service) {}},
		{name: "valid load balancer", modify: loadBalancer},
		{name: "name of 63 characters", modify: func(s *v1.Service) { s.Name = strings.Repeat("a", 63) }},
		{name: "name starting with a digit (RelaxedServiceNameValidation)", modify: func(s *v1.Service) { s.Name = "1web" }},
		{name: "defaults left to the API server", modify: func(s *v1.Service) {
			s.Spec.Type, s.Spec.SessionAffinity, s.Spec.InternalTrafficPolicy = "", "", nil
			s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = nil, nil, nil
			s.Spec.Ports[0].Protocol, s.Spec.Ports[0].TargetPort = "", intstr.IntOrString{}
		}},
		{name: "headless", modify: func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.Ports = v1.ClusterIPNone, []string{v1.ClusterIPNone}, nil
		}},
		{name: "name of 200 characters", modify: func(s *v1.Service) { s.Name = long200 },
			want: []string{`metadata.name: Invalid value: "` + long200 + `": must be no more than 63 characters`}},
		{name: "name not a DNS label", modify: func(s *v1.Service) { s.Name = "Web_1" },
			want: []string{`metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{name: "label value", modify: func(s *v1.Service) { s.Labels["app"] = "a b" },
			want: []string{`metadata.labels: Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`}},
		{name: "annotations over 256 KiB", modify: func(s *v1.Service) { s.Annotations = map[string]string{"a": strings.Repeat("x", 256<<10)} },
			want: []string{`metadata.annotations: Too long: may not be more than 262144 bytes`}},
		{name: "port 0", modify: func(s *v1.Service) { s.Spec.Ports[0].Port = 0 },
			want: []string{`spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`}},
		{name: "port 65536", modify: func(s *v1.Service) { s.Spec.Ports[0].Port = 65536 },
			want: []string{`spec.ports[0].port: Invalid value: 65536: must be between 1 and 65535, inclusive`}},
		{name: "protocol", modify: func(s *v1.Service) { s.Spec.Ports[0].Protocol = "ICMP" },
			want: []string{`spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"`}},
		{name: "port name of 64 characters", modify: func(s *v1.Service) { s.Spec.Ports[0].Name = strings.Repeat("p", 64) },
			want: []string{`spec.ports[0].name: Invalid value: "` + strings.Repeat("p", 64) + `": must be no more than 63 characters`}},
		{name: "port names missing", modify: func(s *v1.Service) { s.Spec.Ports[1].Name = "" },
			want: []string{`spec.ports[1].name: Required value`}},
		{name: "duplicate port name", modify: func(s *v1.Service) { s.Spec.Ports[1].Name = "http" },
			want: []string{`spec.ports[1].name: Duplicate value: "http"`}},
		{name: "duplicate port", modify: func(s *v1.Service) { s.Spec.Ports[1].Protocol = v1.ProtocolTCP; s.Spec.Ports[1].Port = 80 },
			want: []string{`spec.ports[1]: Duplicate value: {"Name":"","Protocol":"TCP","AppProtocol":null,"Port":80,"TargetPort":0,"NodePort":0}`}},
		{name: "target port", modify: func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(70000) },
			want: []string{`spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive`}},
		{name: "node port on a ClusterIP service", modify: func(s *v1.Service) { s.Spec.Ports[0].NodePort = 30080 },
			want: []string{"spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"}},
		{name: "node port out of range", modify: func(s *v1.Service) { loadBalancer(s); s.Spec.Ports[0].NodePort = 70000 },
			want: []string{`spec.ports[0].nodePort: Invalid value: 70000: must be between 1 and 65535, inclusive`}},
		{name: "cluster IP", modify: func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.300", []string{"10.96.0.300"} },
			want: []string{`spec.clusterIPs[0]: Invalid value: "10.96.0.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{name: "cluster IP with leading zeros", modify: func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "010.96.0.10", nil },
			want: []string{`spec.clusterIPs[0]: Invalid value: "010.96.0.10": must not have leading 0s`}},
		{name: "cluster IP with leading zeros, stored", mode: Stored, modify: func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "010.96.0.10", nil }},
		{name: "cluster IPs of one family", modify: func(s *v1.Service) {
			s.Spec.ClusterIPs, s.Spec.IPFamilies = []string{"10.96.0.10", "10.96.0.11"}, nil
		}, want: []string{`spec.clusterIPs: Invalid value: ["10.96.0.10","10.96.0.11"]: may specify no more than one IP for each IP family`}},
		{name: "cluster IP of another family than ipFamilies", modify: func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol} },
			want: []string{"spec.clusterIPs[0]: Invalid value: \"10.96.0.10\": expected an IPv6 value as indicated by `ipFamilies[0]`"}},
		{name: "external IP at the metadata service", modify: func(s *v1.Service) { s.Spec.ExternalIPs = []string{"169.254.169.254"} },
			want: []string{`spec.externalIPs[0]: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)`}},
		{name: "source range", modify: func(s *v1.Service) { loadBalancer(s); s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/33"} },
			want: []string{`spec.LoadBalancerSourceRanges[0]: Invalid value: "10.0.0.0/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{name: "affinity timeout", modify: func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86401)}}
		}, want: []string{`spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400`}},
		{name: "health check node port without Local", modify: func(s *v1.Service) { s.Spec.HealthCheckNodePort = 30100 },
			want: []string{"spec.healthCheckNodePort: Invalid value: 30100: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"}},
		{name: "ingress IP", modify: func(s *v1.Service) { loadBalancer(s); s.Status.LoadBalancer.Ingress[0].IP = "192.0.2" },
			want: []string{`status.loadBalancer.ingress[0].ip: Invalid value: "192.0.2": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{name: "traffic distribution", modify: func(s *v1.Service) { s.Spec.TrafficDistribution = ptr.To("Nearby") },
			want: []string{`spec.trafficDistribution: Unsupported value: "Nearby": supported values: "PreferClose", "PreferSameZone", "PreferSameNode"`}},
		{name: "type", modify: func(s *v1.Service) { s.Spec.Type = "Internal" },
			want: []string{`spec.type: Unsupported value: "Internal": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validService()
			tc.modify(s)
			if diff := cmp.Diff(tc.want, messages(Service(s, tc.mode))); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEndpointSlice(t *testing.T) {
	many := func(n int) []discovery.Endpoint {
		eps := make([]discovery.Endpoint, n)
		for i := range eps {
			eps[i].Addresses = []string{"10.244.1.5"}
		}
		return eps
	}
	for _, tc := range []struct {
		name   string
		mode   Mode
		modify func(*discovery.EndpointSlice)
		want   []string
	}{
		{name: "valid", modify: func(*discovery.EndpointSlice) {}},
		{name: "1000 endpoints", modify: func(s *discovery.EndpointSlice) { s.Endpoints = many(1000) }},
		{name: "port numbers are not checked", modify: func(s *discovery.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](0) }},
		{name: "defaults left to the API server", modify: func(s *discovery.EndpointSlice) { s.Ports[0].Name, s.Ports[0].Protocol = nil, nil }},
		{name: "1001 endpoints", modify: func(s *discovery.EndpointSlice) { s.Endpoints = many(1001) },
			want: []string{`endpoints: Too many: 1001: must have at most 1000 items`}},
		{name: "loopback", modify: func(s *discovery.EndpointSlice) { s.Endpoints[1].Addresses[0] = "127.0.0.1" },
			want: []string{`endpoints[1].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`}},
		{name: "loopback, stored", mode: Stored, modify: func(s *discovery.EndpointSlice) { s.Endpoints[1].Addresses[0] = "127.0.0.1" },
			want: []string{`endpoints[1].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`}},
		{name: "metadata service", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "169.254.169.254" },
			want: []string{`endpoints[0].addresses[0]: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)`}},
		{name: "link-local multicast", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "224.0.0.1" },
			want: []string{`endpoints[0].addresses[0]: Invalid value: "224.0.0.1": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)`}},
		{name: "unspecified", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "0.0.0.0" },
			want: []string{`endpoints[0].addresses[0]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)`}},
		{name: "not an address", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "pod-a" },
			want: []string{`endpoints[0].addresses[0]: Invalid value: "pod-a": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{name: "IPv6 in an IPv4 slice", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "fd00::5" },
			want: []string{`endpoints[0].addresses: Invalid value: "fd00::5": must be an IPv4 address`}},
		{name: "IPv6 not canonical", modify: func(s *discovery.EndpointSlice) {
			s.AddressType, s.Endpoints = discovery.AddressTypeIPv6, []discovery.Endpoint{{Addresses: []string{"FD00::5"}}}
		}, want: []string{`endpoints[0].addresses[0]: Invalid value: "FD00::5": must be in canonical form ("fd00::5")`}},
		{name: "IPv6 not canonical, stored", mode: Stored, modify: func(s *discovery.EndpointSlice) {
			s.AddressType, s.Endpoints = discovery.AddressTypeIPv6, []discovery.Endpoint{{Addresses: []string{"FD00::5"}}}
		}},
		{name: "no address", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses = nil },
			want: []string{`endpoints[0].addresses: Required value: must contain at least 1 address`}},
		{name: "address type", modify: func(s *discovery.EndpointSlice) { s.AddressType = "IP" },
			want: []string{`addressType: Unsupported value: "IP": supported values: "FQDN", "IPv4", "IPv6"`}},
		{name: "protocol", modify: func(s *discovery.EndpointSlice) { s.Ports[0].Protocol = ptr.To[v1.Protocol]("tcp") },
			want: []string{`ports[0].protocol: Unsupported value: "tcp": supported values: "SCTP", "TCP", "UDP"`}},
		{name: "duplicate port name", modify: func(s *discovery.EndpointSlice) { s.Ports[1].Name = ptr.To("http") },
			want: []string{`ports[1].name: Duplicate value: "http"`}},
		{name: "node name", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].NodeName = ptr.To("Node A") },
			want: []string{`endpoints[0].nodeName: Invalid value: "Node A": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{name: "zone hint", modify: func(s *discovery.EndpointSlice) { s.Endpoints[0].Hints.ForZones[0].Name = "zone a" },
			want: []string{`endpoints[0].hints.forZones[0].name: Invalid value: "zone a": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`}},
		{name: "service-name label of 200 characters", modify: func(s *discovery.EndpointSlice) { s.Labels[discovery.LabelServiceName] = long200 },
			want: []string{`metadata.labels: Invalid value: "` + long200 + `": must be no more than 63 bytes`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSlice()
			tc.modify(s)
			if diff := cmp.Diff(tc.want, messages(EndpointSlice(s, tc.mode))); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*v1.Node)
		want   []string
	}{
		{name: "valid", modify: func(*v1.Node) {}},
		{name: "pod CIDR", modify: func(n *v1.Node) { n.Spec.PodCIDRs[0] = "10.244.1.0/40" },
			want: []string{`spec.podCIDRs[0]: Invalid value: "10.244.1.0/40": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{name: "pod CIDRs of one family", modify: func(n *v1.Node) { n.Spec.PodCIDRs[1] = "10.244.2.0/24" },
			want: []string{`spec.podCIDRs: Invalid value: ["10.244.1.0/24","10.244.2.0/24"]: may specify no more than one CIDR for each IP family`}},
		{name: "zone label", modify: func(n *v1.Node) { n.Labels[v1.LabelTopologyZone] = "zone/a" },
			want: []string{`metadata.labels: Invalid value: "zone/a": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`}},
		{name: "namespaced", modify: func(n *v1.Node) { n.Namespace = "ns" },
			want: []string{`metadata.namespace: Forbidden: not allowed on this type`}},
		{name: "taint effect", modify: func(n *v1.Node) { n.Spec.Taints[0].Effect = "" },
			want: []string{`metadata.taints[0].effect: Required value`}},
		{name: "duplicate taint", modify: func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, n.Spec.Taints[0]) },
			want: []string{`metadata.taints[1]: Duplicate value: {"Key":"ToBeDeletedByClusterAutoscaler","Value":"","Effect":"NoSchedule","TimeAdded":null}: taints must be unique by key and effect pair`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := validNode()
			tc.modify(n)
			if diff := cmp.Diff(tc.want, messages(Node(n, Create))); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServiceCIDR(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cidrs []string
		want  []string
	}{
		{name: "dual-stack", cidrs: []string{"10.96.0.0/16", "fd00:10:96::/112"}},
		{name: "none", want: []string{`spec.cidrs: Required value: at least one CIDR required`}},
		{name: "not canonical", cidrs: []string{"10.96.0.1/16"},
			want: []string{`spec.cidrs[0]: Invalid value: "10.96.0.1/16": must not have bits set beyond the prefix length`}},
		{name: "one family twice", cidrs: []string{"10.96.0.0/16", "10.97.0.0/16"},
			want: []string{`spec.cidrs: Invalid value: ["10.96.0.0/16","10.97.0.0/16"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networking.ServiceCIDRSpec{CIDRs: tc.cidrs}}
			if diff := cmp.Diff(tc.want, messages(ServiceCIDR(sc, Stored))); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	s := validService()
	s.Spec.Ports[0].Port = 0
	err := Validate(s, Create)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("Validate = %v, want an Invalid status error", err)
	}
	want := `Service "web" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`
	if err.Error() != want {
		t.Errorf("Validate = %q, want %q", err, want)
	}
	es := validSlice()
	es.Endpoints[0].Addresses[0] = "127.0.0.1"
	want = `EndpointSlice.discovery.k8s.io "web-abcde" is invalid: endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`
	if err := Validate(es, Create); err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q", err, want)
	}
	for _, o := range []runtime.Object{validService(), validSlice(), validNode(), &v1.Pod{}} {
		if err := Validate(o, Create); err != nil {
			t.Errorf("Validate(%T) = %v", o, err)
		}
	}
}

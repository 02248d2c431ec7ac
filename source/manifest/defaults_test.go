package manifest

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// defaulted is a Service with every default already applied: each case
// below removes one field and expects it back.
func defaulted(edit func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeClusterIP,
			ClusterIP:             "172.30.0.1",
			ClusterIPs:            []string{"172.30.0.1"},
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(v1.IPFamilyPolicySingleStack),
			SessionAffinity:       v1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(v1.ServiceInternalTrafficPolicyCluster),
			Ports: []v1.ServicePort{{
				Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(80),
			}},
		},
	}
	if edit != nil {
		edit(s)
	}
	return s
}

func loadBalancer(s *v1.Service) {
	s.Spec.Type = v1.ServiceTypeLoadBalancer
	s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	s.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
	s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)}}
}

func slice(edit func(*discovery.EndpointSlice)) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1"},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To[int32](8080)}},
	}
	edit(es)
	return es
}

// TestDefaults has one case per field the API server defaults: the input
// lacks it, the output is the whole object as the API server stores it.
func TestDefaults(t *testing.T) {
	// both: f undoes a default that must come back; same: f sets a value
	// that must stay.
	both := func(f func(*v1.Service)) [2]*v1.Service { return [2]*v1.Service{defaulted(f), defaulted(nil)} }
	same := func(f func(*v1.Service)) [2]*v1.Service { return [2]*v1.Service{defaulted(f), defaulted(f)} }
	services := map[string][2]*v1.Service{
		"type ClusterIP":         both(func(s *v1.Service) { s.Spec.Type = "" }),
		"sessionAffinity None":   both(func(s *v1.Service) { s.Spec.SessionAffinity = "" }),
		"port protocol TCP":      both(func(s *v1.Service) { s.Spec.Ports[0].Protocol = "" }),
		"targetPort is port":     both(func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.IntOrString{} }),
		"empty named targetPort": both(func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("") }),
		"internalTrafficPolicy Cluster": both(func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = nil
		}),
		"clusterIPs from clusterIP":  both(func(s *v1.Service) { s.Spec.ClusterIPs = nil }),
		"ipFamilies from clusterIPs": both(func(s *v1.Service) { s.Spec.IPFamilies = nil }),
		"ipFamilyPolicy SingleStack": both(func(s *v1.Service) { s.Spec.IPFamilyPolicy = nil }),
		"affinity config dropped with None": both(func(s *v1.Service) {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}),
		"ClientIP timeout 10800": {
			defaulted(func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP }),
			defaulted(func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10800)}}
			}),
		},
		"ClientIP timeout kept": same(func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}),
		"externalTrafficPolicy Cluster for NodePort": {
			defaulted(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }),
			defaulted(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			}),
		},
		"externalTrafficPolicy Cluster for LoadBalancer": {
			defaulted(func(s *v1.Service) { loadBalancer(s); s.Spec.ExternalTrafficPolicy = "" }),
			defaulted(loadBalancer),
		},
		"externalTrafficPolicy Cluster for external IPs": {
			defaulted(func(s *v1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.9"} }),
			defaulted(func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"192.0.2.9"}
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			}),
		},
		"allocateLoadBalancerNodePorts true": {
			defaulted(func(s *v1.Service) { loadBalancer(s); s.Spec.AllocateLoadBalancerNodePorts = nil }),
			defaulted(loadBalancer),
		},
		"load-balancer ingress ipMode VIP": {
			defaulted(func(s *v1.Service) { loadBalancer(s); s.Status.LoadBalancer.Ingress[0].IPMode = nil }),
			defaulted(loadBalancer),
		},
		"IPv6 family": {
			defaulted(func(s *v1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "fd00::1", nil, nil
			}),
			defaulted(func(s *v1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "fd00::1", []string{"fd00::1"}, []v1.IPFamily{v1.IPv6Protocol}
			}),
		},
		"dual-stack families": {
			defaulted(func(s *v1.Service) {
				s.Spec.ClusterIPs = []string{"172.30.0.1", "fd00::1"}
				s.Spec.IPFamilies = nil
				s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
			}),
			defaulted(func(s *v1.Service) {
				s.Spec.ClusterIPs = []string{"172.30.0.1", "fd00::1"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
				s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
			}),
		},
		"headless without selector RequireDualStack": {
			defaulted(func(s *v1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = v1.ClusterIPNone, nil, nil, nil
			}),
			defaulted(func(s *v1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = v1.ClusterIPNone, []string{v1.ClusterIPNone}, nil
				s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
			}),
		},
		"ExternalName left alone": {
			{Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "example.com"}},
			{Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "example.com", SessionAffinity: v1.ServiceAffinityNone}},
		},
	}
	cases := map[string][2]runtime.Object{}
	for name, c := range services {
		cases["Service "+name] = [2]runtime.Object{c[0], c[1]}
	}
	cases["EndpointSlice port name empty"] = [2]runtime.Object{
		slice(func(es *discovery.EndpointSlice) { es.Ports[0].Name = nil }),
		slice(func(es *discovery.EndpointSlice) { es.Ports[0].Name = ptr.To("") }),
	}
	cases["EndpointSlice port protocol TCP"] = [2]runtime.Object{
		slice(func(es *discovery.EndpointSlice) { es.Ports[0].Protocol = nil }),
		slice(func(es *discovery.EndpointSlice) { es.Ports[0].Protocol = ptr.To(v1.ProtocolTCP) }),
	}
	capacity := v1.ResourceList{v1.ResourcePods: resource.MustParse("110")}
	cases["Node allocatable from capacity"] = [2]runtime.Object{
		&v1.Node{Status: v1.NodeStatus{Capacity: capacity}},
		&v1.Node{Status: v1.NodeStatus{Capacity: capacity, Allocatable: capacity}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := c[0].DeepCopyObject()
			switch o := got.(type) {
			case *v1.Service:
				defaultService(o)
			case *discovery.EndpointSlice:
				defaultEndpointSlice(o)
			case *v1.Node:
				defaultNode(o)
			}
			if diff := cmp.Diff(c[1], got); diff != "" {
				t.Errorf("defaulted (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeDefaultsUnnamedPort is the end to end case: a manifest whose
// Service port and EndpointSlice port are both written without name or
// protocol serves the service port, as it would applied to a cluster.
func TestDecodeDefaultsUnnamedPort(t *testing.T) {
	objs, err := Decode("dns.yaml", []byte(`apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 172.30.0.10
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- port: 8080
endpoints:
- addresses: [10.0.0.1]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{v1.IPv4Protocol}})
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			b.UpdateService(nil, o)
		case *discovery.EndpointSlice:
			b.UpdateEndpointSlice(nil, o)
		}
	}
	st := b.Build().States[0]
	v := st.Lookup(dataplane.Packet{
		Src:      netip.MustParseAddr("10.0.0.9"),
		Dst:      netip.MustParseAddrPort("172.30.0.10:80"),
		Protocol: v1.ProtocolTCP,
		From:     dataplane.FromLocalPod,
	})
	want := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:8080")}
	if v.Action != dataplane.DNAT || !cmp.Equal(want, v.Endpoints, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })) {
		t.Errorf("Lookup = %v %v, want DNAT to %v", v.Action, v.Endpoints, want)
	}
}

// TestDecodeReusesUnchangedDocuments: decoding a file again with the
// documents of the last decode known decodes only the documents whose bytes
// changed; the others' objects are the very objects decoded before.
func TestDecodeReusesUnchangedDocuments(t *testing.T) {
	svc := func(name, port string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  clusterIP: 10.96.0.1\n  ports:\n  - port: " + port + "\n"
	}
	d := newDecoder()
	first, known, err := d.decode("f.yaml", []byte(svc("a", "80")+"---\n"+svc("b", "80")), nil)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := d.decode("f.yaml", []byte(svc("a", "80")+"---\n"+svc("b", "81")), known)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 2 {
		t.Fatalf("decoded %d and %d objects, want 2 each", len(first), len(second))
	}
	if first[0] != second[0] {
		t.Error("the unchanged document was decoded again")
	}
	if first[1] == second[1] {
		t.Error("the changed document was not decoded again")
	}
	if got := second[1].(*v1.Service).Spec.Ports[0].Port; got != 81 {
		t.Errorf("changed port = %d, want 81", got)
	}
}

package main

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The node every system runs on, and the cluster's pod CIDR (local
// traffic is detected by it, in every system).
const (
	nodeName    = "bench-node"
	nodeIP      = "192.168.0.2"
	clusterCIDR = "10.0.0.0/8"
)

// workload is one cluster shape every system is given.
type workload struct {
	Name      string
	Services  int
	Endpoints int
	// Mix makes a fifth of the services each ClusterIP, NodePort,
	// LoadBalancer with source ranges, NodePort with
	// externalTrafficPolicy Local, and ClusterIP with ClientIP affinity.
	Mix bool
}

func (w workload) String() string {
	s := fmt.Sprintf("%s × %d", w.Name, w.Endpoints)
	if w.Mix {
		s += " mix"
	}
	return s
}

// quickWorkloads are the -quick set; defaultWorkloads the full one.
var (
	quickWorkloads = []workload{
		{Name: "1k", Services: 1000, Endpoints: 10},
		{Name: "10k", Services: 10000, Endpoints: 10},
	}
	defaultWorkloads = []workload{
		{Name: "1k", Services: 1000, Endpoints: 10},
		{Name: "5k", Services: 5000, Endpoints: 10},
		{Name: "10k", Services: 10000, Endpoints: 10},
		{Name: "50k", Services: 50000, Endpoints: 10},
		{Name: "1k", Services: 1000, Endpoints: 100},
		{Name: "10k", Services: 10000, Endpoints: 100},
		{Name: "10k", Services: 10000, Endpoints: 10, Mix: true},
	}
)

// cluster is the Kubernetes objects of a workload, and how to change them.
type cluster struct {
	w        workload
	node     *v1.Node
	services []*v1.Service
	slices   []*discovery.EndpointSlice
	// rv numbers the objects' resource versions, so that an update is an
	// update to every tracker.
	rv int
}

func newCluster(w workload) *cluster {
	c := &cluster{w: w, node: &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec:       v1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24"}},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeIP}}},
	}}
	for i := range w.Services {
		svc, sl := c.service(i)
		c.services = append(c.services, svc)
		c.slices = append(c.slices, sl)
	}
	return c
}

// addr4 is the i-th address of a /16 (skipping .0 and .251 to .255 of
// each /24), so that 50k services fit.
func addr4(a, b byte, i int) string {
	return netip.AddrFrom4([4]byte{a, b + byte(i/250/256), byte(i / 250 % 256), byte(i%250 + 1)}).String()
}

// service returns Service i and its one EndpointSlice.
func (c *cluster) service(i int) (*v1.Service, *discovery.EndpointSlice) {
	c.rv++
	ns, name := fmt.Sprintf("ns%d", i%10), fmt.Sprintf("svc%d", i)
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: fmt.Sprint(c.rv)},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  addr4(172, 30, i),
			ClusterIPs: []string{addr4(172, 30, i)},
			Ports: []v1.ServicePort{{
				Name: "p80", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
	if c.w.Mix {
		switch i % 5 {
		case 1:
			svc.Spec.Type = v1.ServiceTypeNodePort
		case 2:
			svc.Spec.Type = v1.ServiceTypeLoadBalancer
			svc.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24", "198.51.100.0/24"}
			svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: addr4(5, 6, i)}}
		case 3:
			svc.Spec.Type = v1.ServiceTypeNodePort
			svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		case 4:
			svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			timeout := int32(10800)
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
		}
		if svc.Spec.Type != v1.ServiceTypeClusterIP {
			// Unique, so that no two services claim one node port.
			svc.Spec.Ports[0].NodePort = int32(20000 + i)
		}
	}
	ready := true
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name + "-0", ResourceVersion: fmt.Sprint(c.rv),
			Labels: map[string]string{discovery.LabelServiceName: name},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("p80"), Protocol: ptr(v1.ProtocolTCP), Port: ptr(int32(8080))}},
	}
	for k := range c.w.Endpoints {
		ep := discovery.Endpoint{
			Addresses:  []string{addr4(10, byte(1+k), i)},
			Conditions: discovery.EndpointConditions{Ready: &ready},
		}
		if c.w.Mix && k == 0 {
			ep.NodeName = ptr(nodeName)
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return svc, sl
}

func ptr[T any](v T) *T { return &v }

// changeEndpoint moves endpoint k of service i to another address and
// returns the old and new slice.
func (c *cluster) changeEndpoint(i, k int) (old, upd *discovery.EndpointSlice) {
	old = c.slices[i]
	upd = old.DeepCopy()
	a := netip.MustParseAddr(upd.Endpoints[k].Addresses[0]).As4()
	a[1] ^= 0x80
	upd.Endpoints[k].Addresses = []string{netip.AddrFrom4(a).String()}
	c.rv++
	upd.ResourceVersion = fmt.Sprint(c.rv)
	c.slices[i] = upd
	return old, upd
}

// addService returns a new service and its slice, numbered after the
// existing ones.
func (c *cluster) addService() (*v1.Service, *discovery.EndpointSlice) {
	svc, sl := c.service(len(c.services))
	c.services = append(c.services, svc)
	c.slices = append(c.slices, sl)
	return svc, sl
}

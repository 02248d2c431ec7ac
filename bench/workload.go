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
	nodeName      = "bench-node"
	nodeIP        = "192.168.0.2"
	nodeIPv6      = "fd00::2"
	clusterCIDR   = "10.0.0.0/8"
	clusterCIDRv6 = "fd10::/64"
)

// familyNodeIP and familyClusterCIDR are the node IP and cluster CIDR of
// one family.
func familyNodeIP(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return nodeIPv6
	}
	return nodeIP
}

func familyClusterCIDR(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return clusterCIDRv6
	}
	return clusterCIDR
}

// workload is one cluster shape every system is given.
type workload struct {
	Name      string
	Services  int
	Endpoints int
	// Mix makes a fifth of the services each ClusterIP, NodePort,
	// LoadBalancer with source ranges, NodePort with
	// externalTrafficPolicy Local, and ClusterIP with ClientIP affinity.
	Mix bool
	// DualStack gives every service an IPv6 cluster IP and an IPv6
	// EndpointSlice as well, and every system runs one proxier or
	// dataplane per family.
	DualStack bool
	// Kernel measures first syncs and one-endpoint changes into real
	// kernels as well; only the single-stack ClusterIP workloads the
	// targets name have it, as their kernel rows dominate a run (a 10k
	// first sync through nft takes about ten seconds, twice per system
	// and run).
	Kernel bool
	// Reps, when set, caps the repetitions of each later operation in a
	// child process: one each still gives five samples over the runs, and
	// three at every workload beyond -quick's would take a default run
	// past 20 minutes.
	Reps int
}

// families are the IP families a workload's systems run.
func (w workload) families() []v1.IPFamily {
	if w.DualStack {
		return []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	}
	return []v1.IPFamily{v1.IPv4Protocol}
}

// title is the workload's heading in the table.
func (w workload) title() string {
	s := fmt.Sprintf("%d services × %d endpoints", w.Services, w.Endpoints)
	if w.Mix {
		s += ", mixed types"
	}
	if w.DualStack {
		s += ", dual-stack"
	}
	return s
}

func (w workload) String() string { return fmt.Sprintf("%s × %d", w.Name, w.Endpoints) }

// quickWorkloads are the -quick set; defaultWorkloads the full one.
var (
	quickWorkloads = []workload{
		{Name: "1k", Services: 1000, Endpoints: 10, Kernel: true},
		{Name: "10k", Services: 10000, Endpoints: 10, Kernel: true},
	}
	defaultWorkloads = []workload{
		{Name: "1k", Services: 1000, Endpoints: 10, Kernel: true},
		{Name: "5k", Services: 5000, Endpoints: 10},
		{Name: "10k", Services: 10000, Endpoints: 10, Kernel: true},
		{Name: "50k", Services: 50000, Endpoints: 10, Reps: 1},
		{Name: "100k", Services: 100000, Endpoints: 10, Kernel: true, Reps: 2},
		{Name: "1k", Services: 1000, Endpoints: 100},
		{Name: "10k", Services: 10000, Endpoints: 100, Reps: 1},
		{Name: "10k-mix", Services: 10000, Endpoints: 10, Mix: true, Reps: 1},
		{Name: "10k-dual", Services: 10000, Endpoints: 10, DualStack: true, Reps: 1},
	}
)

// cluster is the Kubernetes objects of a workload, and how to change them.
type cluster struct {
	w        workload
	node     *v1.Node
	services []*v1.Service
	slices   []*discovery.EndpointSlice
	// slices6 are the IPv6 slices of a dual-stack workload.
	slices6 []*discovery.EndpointSlice
	// rv numbers the objects' resource versions, so that an update is an
	// update to every tracker.
	rv int
}

func newCluster(w workload) *cluster {
	c := &cluster{w: w, node: &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec:       v1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: nodeIP}, {Type: v1.NodeInternalIP, Address: nodeIPv6},
		}},
	}}
	for range w.Services {
		c.addService()
	}
	return c
}

// addr4 is the i-th address of a /16 (skipping .0 and .251 to .255 of
// each /24), so that 50k services fit.
func addr4(a, b byte, i int) string {
	return netip.AddrFrom4([4]byte{a, b + byte(i/250/256), byte(i / 250 % 256), byte(i%250 + 1)}).String()
}

// addr6 is address i of a /64 prefix, with k in the last but one group.
func addr6(prefix string, k, i int) string {
	return fmt.Sprintf("%s%x:%x", prefix, k, i)
}

// service returns Service i and its one EndpointSlice (per family).
func (c *cluster) service(i int) (*v1.Service, *discovery.EndpointSlice, *discovery.EndpointSlice) {
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
	if !c.w.DualStack {
		return svc, sl, nil
	}
	svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, addr6("fd30::", 0, i))
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	svc.Spec.IPFamilyPolicy = ptr(v1.IPFamilyPolicyRequireDualStack)
	sl6 := sl.DeepCopy()
	sl6.Name, sl6.AddressType = name+"-6", discovery.AddressTypeIPv6
	for k := range sl6.Endpoints {
		sl6.Endpoints[k].Addresses = []string{addr6("fd10::", 1+k, i)}
	}
	return svc, sl, sl6
}

func ptr[T any](v T) *T { return &v }

// sliceUpdate is an EndpointSlice before and after a change.
type sliceUpdate struct{ old, new *discovery.EndpointSlice }

// changeEndpoint moves endpoint k of service i to another address, in
// every family's slice, and returns the updates.
func (c *cluster) changeEndpoint(i, k int) []sliceUpdate {
	var ups []sliceUpdate
	for _, list := range [][]*discovery.EndpointSlice{c.slices, c.slices6} {
		if list == nil {
			continue
		}
		upd := list[i].DeepCopy()
		a := netip.MustParseAddr(upd.Endpoints[k].Addresses[0])
		b := a.AsSlice()
		b[1] ^= 0x80
		a, _ = netip.AddrFromSlice(b)
		upd.Endpoints[k].Addresses = []string{a.String()}
		c.rv++
		upd.ResourceVersion = fmt.Sprint(c.rv)
		ups = append(ups, sliceUpdate{list[i], upd})
		list[i] = upd
	}
	return ups
}

// addService makes a new service and its slices, numbered after the
// existing ones, and returns it and its slices.
func (c *cluster) addService() (*v1.Service, []*discovery.EndpointSlice) {
	svc, sl, sl6 := c.service(len(c.services))
	c.services = append(c.services, svc)
	c.slices = append(c.slices, sl)
	if sl6 == nil {
		return svc, []*discovery.EndpointSlice{sl}
	}
	c.slices6 = append(c.slices6, sl6)
	return svc, []*discovery.EndpointSlice{sl, sl6}
}

// slicesOf returns the slices of service i.
func (c *cluster) slicesOf(i int) []*discovery.EndpointSlice {
	if c.slices6 == nil {
		return []*discovery.EndpointSlice{c.slices[i]}
	}
	return []*discovery.EndpointSlice{c.slices[i], c.slices6[i]}
}

package manifest

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The API server defaults every object it stores, and a proxy fed by
// informers only ever sees defaulted objects: an EndpointSlice port
// without a name is stored with name "", which is how it matches an
// unnamed service port. Manifests are read as written, so the defaults
// are applied here. They follow the SetDefaults_* functions of
// k8s.io/kubernetes pkg/apis/core/v1 and pkg/apis/discovery/v1, plus the
// IP-family fields the Service registry fills in on create.

func defaultService(svc *v1.Service) {
	spec := &svc.Spec
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = v1.ServiceAffinityNone
	}
	switch spec.SessionAffinity {
	case v1.ServiceAffinityNone:
		spec.SessionAffinityConfig = nil
	case v1.ServiceAffinityClientIP:
		if c := spec.SessionAffinityConfig; c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			spec.SessionAffinityConfig = &v1.SessionAffinityConfig{
				ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(v1.DefaultClientIPServiceAffinitySeconds)},
			}
		}
	}
	if spec.Type == "" {
		spec.Type = v1.ServiceTypeClusterIP
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	externallyAccessible := spec.Type == v1.ServiceTypeLoadBalancer || spec.Type == v1.ServiceTypeNodePort ||
		(spec.Type == v1.ServiceTypeClusterIP && len(spec.ExternalIPs) > 0)
	if externallyAccessible && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
	if spec.InternalTrafficPolicy == nil {
		switch spec.Type {
		case v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer:
			spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyCluster)
		}
	}
	if spec.Type == v1.ServiceTypeLoadBalancer {
		if spec.AllocateLoadBalancerNodePorts == nil {
			spec.AllocateLoadBalancerNodePorts = ptr.To(true)
		}
		for i := range svc.Status.LoadBalancer.Ingress {
			ing := &svc.Status.LoadBalancer.Ingress[i]
			if ing.IP != "" && ing.IPMode == nil {
				ing.IPMode = ptr.To(v1.LoadBalancerIPModeVIP)
			}
		}
	}
	defaultIPFamilies(spec)
}

// defaultIPFamilies fills in what the Service registry does on create:
// clusterIPs from a lone clusterIP, ipFamilyPolicy, and ipFamilies from
// clusterIPs. What it would allocate (a cluster IP, the cluster's default
// family for a headless service) has no source here and stays unset.
func defaultIPFamilies(spec *v1.ServiceSpec) {
	if spec.Type == v1.ServiceTypeExternalName {
		return
	}
	if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	if spec.IPFamilyPolicy == nil {
		policy := v1.IPFamilyPolicySingleStack
		if spec.ClusterIP == v1.ClusterIPNone && len(spec.Selector) == 0 {
			policy = v1.IPFamilyPolicyRequireDualStack
		}
		spec.IPFamilyPolicy = &policy
	}
	for i, ip := range spec.ClusterIPs {
		if ip == v1.ClusterIPNone {
			break
		}
		if i < len(spec.IPFamilies) {
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			// Invalid: the proxy skips it and says why; guessing a
			// family here would only hide that.
			break
		}
		f := v1.IPv4Protocol
		if a.Unmap().Is6() {
			f = v1.IPv6Protocol
		}
		spec.IPFamilies = append(spec.IPFamilies, f)
	}
}

func defaultEndpointSlice(es *discovery.EndpointSlice) {
	for i := range es.Ports {
		p := &es.Ports[i]
		if p.Name == nil {
			p.Name = ptr.To("")
		}
		if p.Protocol == nil {
			p.Protocol = ptr.To(v1.ProtocolTCP)
		}
	}
}

func defaultNode(n *v1.Node) {
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	}
}

package dataplane

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// frontendKind is which kind of service address a frontend is.
type frontendKind uint8

const (
	kindClusterIP frontendKind = iota
	kindExternalIP
	kindLoadBalancer
)

func (k frontendKind) String() string {
	switch k {
	case kindClusterIP:
		return "cluster IP"
	case kindExternalIP:
		return "external IP"
	default:
		return "load balancer IP"
	}
}

type frontendKey struct {
	addr  netip.Addr
	port  uint16
	proto v1.Protocol
}

type frontend struct {
	port *servicemodel.ServicePort
	kind frontendKind
}

type nodePortKey struct {
	port  uint16
	proto v1.Protocol
}

// lookupIndex finds the service ports a packet may be addressed to. Every
// list is in a fixed order (port name, then address kind), so that where
// upstream's winner depends on map iteration order ours does not.
type lookupIndex struct {
	frontends map[frontendKey][]frontend
	nodePorts map[nodePortKey][]*servicemodel.ServicePort
	// healthChecks maps a health-check node port to the first port (by
	// name) of the service that owns it.
	healthChecks map[uint16]*servicemodel.ServicePort
	// clusterIPs maps each cluster IP to a port on it, to explain packets
	// to a cluster IP on a port it does not serve.
	clusterIPs map[netip.Addr]*servicemodel.ServicePort
	// addrs maps every service address (cluster IP, external IP, VIP) to
	// the first port on it: IPVS mode binds them all to the node.
	addrs map[netip.Addr]*servicemodel.ServicePort
}

func (s *State) lookupIndex() *lookupIndex {
	s.indexOnce.Do(func() { s.index = newLookupIndex(s.Services) })
	return s.index
}

func newLookupIndex(m servicemodel.Map) *lookupIndex {
	idx := &lookupIndex{
		frontends:    make(map[frontendKey][]frontend, m.Len()),
		nodePorts:    map[nodePortKey][]*servicemodel.ServicePort{},
		healthChecks: map[uint16]*servicemodel.ServicePort{},
		clusterIPs:   make(map[netip.Addr]*servicemodel.ServicePort, m.Len()),
		addrs:        make(map[netip.Addr]*servicemodel.ServicePort, m.Len()),
	}
	add := func(addr netip.Addr, sp *servicemodel.ServicePort, kind frontendKind) {
		k := frontendKey{addr, sp.Port, sp.Protocol}
		idx.frontends[k] = append(idx.frontends[k], frontend{sp, kind})
		if cur, ok := idx.addrs[addr]; !ok || comparePorts(sp, cur) < 0 {
			idx.addrs[addr] = sp
		}
	}
	for sp := range m.All() {
		add(sp.ClusterIP, sp, kindClusterIP)
		for _, ip := range sp.ExternalIPs {
			add(ip, sp, kindExternalIP)
		}
		for _, ip := range sp.LoadBalancerVIPs {
			add(ip, sp, kindLoadBalancer)
		}
		if sp.NodePort != 0 {
			k := nodePortKey{sp.NodePort, sp.Protocol}
			idx.nodePorts[k] = append(idx.nodePorts[k], sp)
		}
		if hc := sp.HealthCheckNodePort; hc != 0 {
			if cur, ok := idx.healthChecks[hc]; !ok || comparePorts(sp, cur) < 0 {
				idx.healthChecks[hc] = sp
			}
		}
		if cur, ok := idx.clusterIPs[sp.ClusterIP]; !ok || comparePorts(sp, cur) < 0 {
			idx.clusterIPs[sp.ClusterIP] = sp
		}
	}
	for _, list := range idx.frontends {
		slices.SortFunc(list, func(a, b frontend) int {
			return cmp.Or(comparePorts(a.port, b.port), cmp.Compare(a.kind, b.kind))
		})
	}
	for _, list := range idx.nodePorts {
		slices.SortFunc(list, comparePorts)
	}
	return idx
}

func comparePorts(a, b *servicemodel.ServicePort) int {
	return cmp.Or(
		cmp.Compare(a.Name.Namespace, b.Name.Namespace),
		cmp.Compare(a.Name.Name, b.Name.Name),
		cmp.Compare(a.Name.Port, b.Name.Port),
		cmp.Compare(a.Name.Protocol, b.Name.Protocol),
	)
}

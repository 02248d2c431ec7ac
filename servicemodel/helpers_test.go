package servicemodel

import (
	"net/netip"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/affinity"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var cmpOpts = []cmp.Option{
	cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}, affinity.SessionAffinity{}),
	cmpopts.EquateEmpty(),
}

func makeService(ns, name string, fn func(*v1.Service)) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}}}
	if fn != nil {
		fn(svc)
	}
	return svc
}

func addPort(ports []v1.ServicePort, name string, proto v1.Protocol, port, nodePort int32, targetPort int) []v1.ServicePort {
	return append(ports, v1.ServicePort{
		Name:       name,
		Protocol:   proto,
		Port:       port,
		NodePort:   nodePort,
		TargetPort: intstr.FromInt32(int32(targetPort)),
	})
}

func nsn(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func portName(ns, name, port string, proto v1.Protocol) PortName {
	return PortName{NamespacedName: nsn(ns, name), Port: port, Protocol: proto}
}

func wantPort(name PortName, clusterIP string, port uint16, fns ...func(*ServicePort)) *ServicePort {
	p := &ServicePort{
		Name:      name,
		ClusterIP: netip.MustParseAddr(clusterIP),
		Port:      port,
		Protocol:  name.Protocol,
	}
	for _, fn := range fns {
		fn(p)
	}
	return p
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func ptr[T any](v T) *T { return &v }

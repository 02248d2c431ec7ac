package dataplane_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// TestBuilderWarnsClaimConflicts checks that two services claiming one
// destination are warned about once, when that appears: not again on later
// Builds or updates that keep it, and again once it was resolved and comes
// back.
func TestBuilderWarnsClaimConflicts(t *testing.T) {
	const msg = `"level"=0 "msg"="Several services claim the same destination; its traffic reaches only one of them" `
	svc := func(name, clusterIP string, mutate func(*v1.Service)) *v1.Service {
		return dpt.MakeService("ns", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = clusterIP
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
			if mutate != nil {
				mutate(s)
			}
		})
	}
	withExternalIP := func(s *v1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }
	withLB := func(ip string, port int32) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].Port = port
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
		}
	}
	withNodePort := func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}
	dualStack := func(clusterIPv6 string) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.ClusterIPs = []string{s.Spec.ClusterIP, clusterIPv6}
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		}
	}
	a, b, c := svc("a", "172.30.0.1", withExternalIP), svc("b", "172.30.0.2", withExternalIP), svc("c", "172.30.0.3", withExternalIP)
	bFixed := svc("b", "172.30.0.2", nil)
	warnAB := msg + `"destination"="192.0.2.1:80" "protocol"="TCP" "services"=["ns/a" "ns/b"]`

	type step struct {
		add, del []*v1.Service
		want     []string
	}
	for _, tc := range []struct {
		name     string
		families []v1.IPFamily
		steps    []step
	}{{
		name: "external IP: once, again after a fix",
		steps: []step{
			{add: []*v1.Service{a, b}, want: []string{warnAB}},
			{},
			{add: []*v1.Service{a, b}},
			{add: []*v1.Service{svc("a", "172.30.0.1", func(s *v1.Service) { withExternalIP(s); s.Labels = map[string]string{"x": "y"} })}},
			{add: []*v1.Service{bFixed}},
			{},
			{add: []*v1.Service{b}, want: []string{warnAB}},
			{},
		},
	}, {
		name: "a deleted service resolves it",
		steps: []step{
			{add: []*v1.Service{a, b}, want: []string{warnAB}},
			{del: []*v1.Service{b}},
			{add: []*v1.Service{b}, want: []string{warnAB}},
		},
	}, {
		name: "a third service joins",
		steps: []step{
			{add: []*v1.Service{a, b}, want: []string{warnAB}},
			{add: []*v1.Service{c}, want: []string{msg + `"destination"="192.0.2.1:80" "protocol"="TCP" "services"=["ns/a" "ns/b" "ns/c"]`}},
			{del: []*v1.Service{c}},
			{add: []*v1.Service{c}, want: []string{msg + `"destination"="192.0.2.1:80" "protocol"="TCP" "services"=["ns/a" "ns/b" "ns/c"]`}},
		},
	}, {
		name: "cluster IP",
		steps: []step{
			{add: []*v1.Service{svc("a", "172.30.0.1", nil), svc("b", "172.30.0.1", nil)},
				want: []string{msg + `"destination"="172.30.0.1:80" "protocol"="TCP" "services"=["ns/a" "ns/b"]`}},
		},
	}, {
		name: "external IP on another's cluster IP",
		steps: []step{
			{add: []*v1.Service{svc("a", "172.30.0.1", nil), svc("b", "172.30.0.2", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"172.30.0.1"} })},
				want: []string{msg + `"destination"="172.30.0.1:80" "protocol"="TCP" "services"=["ns/a" "ns/b"]`}},
		},
	}, {
		name: "load balancer IP, same port",
		steps: []step{
			{add: []*v1.Service{svc("a", "172.30.0.1", withLB("198.51.100.1", 443)), svc("b", "172.30.0.2", withLB("198.51.100.1", 443))},
				want: []string{msg + `"destination"="198.51.100.1:443" "protocol"="TCP" "services"=["ns/a" "ns/b"]`}},
		},
	}, {
		name:     "node port, once for a dual-stack pair",
		families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		steps: []step{
			{add: []*v1.Service{
				svc("a", "172.30.0.1", func(s *v1.Service) { withNodePort(s); dualStack("fd00::1")(s) }),
				svc("b", "172.30.0.2", func(s *v1.Service) { withNodePort(s); dualStack("fd00::2")(s) }),
			}, want: []string{msg + `"nodePort"=30080 "protocol"="TCP" "services"=["ns/a" "ns/b"]`}},
		},
	}, {
		name: "several destinations, in order",
		steps: []step{
			{add: []*v1.Service{
				svc("a", "172.30.0.1", func(s *v1.Service) { withExternalIP(s); withNodePort(s) }),
				svc("b", "172.30.0.2", func(s *v1.Service) { withExternalIP(s); withNodePort(s) }),
			}, want: []string{
				msg + `"nodePort"=30080 "protocol"="TCP" "services"=["ns/a" "ns/b"]`,
				warnAB,
			}},
		},
	}, {
		name: "many services: five named",
		steps: []step{
			{add: func() []*v1.Service {
				var list []*v1.Service
				for i := range 7 {
					list = append(list, svc(fmt.Sprintf("s%d", i), fmt.Sprintf("172.30.0.%d", i+1), withExternalIP))
				}
				return list
			}(), want: []string{msg + `"destination"="192.0.2.1:80" "protocol"="TCP" "services"=["ns/s0" "ns/s1" "ns/s2" "ns/s3" "ns/s4"] "moreServices"=2`}},
		},
	}, {
		name: "no conflict",
		steps: []step{
			{add: []*v1.Service{
				// Another port, another protocol.
				svc("a", "172.30.0.1", withLB("198.51.100.1", 443)),
				svc("b", "172.30.0.2", withLB("198.51.100.1", 444)),
				svc("c", "172.30.0.3", func(s *v1.Service) { withLB("198.51.100.1", 443)(s); s.Spec.Ports[0].Protocol = v1.ProtocolUDP }),
				// One service claiming one destination twice.
				svc("d", "172.30.0.4", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"172.30.0.4"} }),
			}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var rec logLines
			bld := dataplane.NewBuilder(dataplane.BuilderConfig{Families: tc.families, NodeName: dpt.NodeName, Logger: rec.logger()})
			for i, s := range tc.steps {
				for _, svc := range s.add {
					bld.UpdateService(nil, svc)
				}
				for _, svc := range s.del {
					bld.UpdateService(svc, nil)
				}
				bld.Build()
				if diff := cmp.Diff(s.want, rec.take()); diff != "" {
					t.Errorf("step %d: log lines (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

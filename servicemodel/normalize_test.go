package servicemodel

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// skipStrings renders what Normalize skipped as "reason field" lines, with
// a "service: " prefix when the whole service was skipped.
func skipStrings(err error) []string {
	var out []string
	_, whole := err.(*SkipError)
	for _, se := range Skips(err) {
		s := se.Reason + " " + se.Field
		if whole {
			s = "service: " + s
		}
		out = append(out, s)
	}
	return out
}

// TestServiceToServiceMap covers upstream's test of the same name, case by
// case, comparing every field rather than a subset.
func TestServiceToServiceMap(t *testing.T) {
	const (
		clusterIPv4   = "10.0.0.1"
		externalIPv4  = "8.8.8.8"
		sourceRangev4 = "0.0.0.0/1"
		clusterIPv6   = "2001:db8:85a3:0:0:8a2e:370:7334"
		externalIPv6  = "2001:db8:85a3:0:0:8a2e:370:7335"
		sourceRangev6 = "2001:db8::/32"
	)
	vip := func(ips ...string) func(*ServicePort) {
		return func(p *ServicePort) { p.LoadBalancerVIPs = addrs(ips...) }
	}
	nodePort := func(n uint16) func(*ServicePort) {
		return func(p *ServicePort) { p.NodePort = n }
	}
	dualStatus := v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: externalIPv4}, {IP: externalIPv6}}}}
	oneTCP := []v1.ServicePort{{Name: "testPort", Port: 12345, Protocol: v1.ProtocolTCP}}

	tests := []struct {
		name      string
		family    v1.IPFamily
		svc       *v1.Service
		want      []*ServicePort
		wantSkips []string
	}{
		{
			name:   "nothing",
			family: v1.IPv4Protocol,
		},
		{
			name:   "headless service",
			family: v1.IPv4Protocol,
			svc: makeService("ns2", "headless", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = v1.ClusterIPNone
				s.Spec.Ports = addPort(s.Spec.Ports, "rpc", "UDP", 1234, 0, 0)
			}),
			wantSkips: []string{"service: headless spec.clusterIP"},
		},
		{
			name:   "headless sctp service",
			family: v1.IPv4Protocol,
			svc: makeService("ns2", "headless", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = v1.ClusterIPNone
				s.Spec.Ports = addPort(s.Spec.Ports, "sip", "SCTP", 7777, 0, 0)
			}),
			wantSkips: []string{"service: headless spec.clusterIP"},
		},
		{
			name:   "headless service without port",
			family: v1.IPv4Protocol,
			svc: makeService("ns2", "headless-without-port", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = v1.ClusterIPNone
			}),
			wantSkips: []string{"service: headless spec.clusterIP"},
		},
		{
			name:   "cluster ip service",
			family: v1.IPv4Protocol,
			svc: makeService("ns2", "cluster-ip", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ClusterIP = "172.16.55.4"
				s.Spec.Ports = addPort(s.Spec.Ports, "p1", "UDP", 1234, 4321, 0)
				s.Spec.Ports = addPort(s.Spec.Ports, "p2", "UDP", 1235, 5321, 0)
			}),
			// Node ports are kept whatever the type, as upstream does.
			want: []*ServicePort{
				wantPort(portName("ns2", "cluster-ip", "p1", v1.ProtocolUDP), "172.16.55.4", 1234, nodePort(4321)),
				wantPort(portName("ns2", "cluster-ip", "p2", v1.ProtocolUDP), "172.16.55.4", 1235, nodePort(5321)),
			},
		},
		{
			name:   "nodeport service",
			family: v1.IPv4Protocol,
			svc: makeService("ns2", "node-port", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ClusterIP = "172.16.55.10"
				s.Spec.Ports = addPort(s.Spec.Ports, "port1", "UDP", 345, 678, 0)
				s.Spec.Ports = addPort(s.Spec.Ports, "port2", "TCP", 344, 677, 0)
			}),
			want: []*ServicePort{
				wantPort(portName("ns2", "node-port", "port1", v1.ProtocolUDP), "172.16.55.10", 345, nodePort(678)),
				wantPort(portName("ns2", "node-port", "port2", v1.ProtocolTCP), "172.16.55.10", 344, nodePort(677)),
			},
		},
		{
			name:   "load balancer service",
			family: v1.IPv4Protocol,
			svc: makeService("ns1", "load-balancer", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ClusterIP = "172.16.55.11"
				s.Spec.LoadBalancerIP = "5.6.7.8"
				s.Spec.Ports = addPort(s.Spec.Ports, "port3", "UDP", 8675, 30061, 7000)
				s.Spec.Ports = addPort(s.Spec.Ports, "port4", "UDP", 8676, 30062, 7001)
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.4"}}
			}),
			want: []*ServicePort{
				wantPort(portName("ns1", "load-balancer", "port3", v1.ProtocolUDP), "172.16.55.11", 8675, nodePort(30061), vip("10.1.2.4")),
				wantPort(portName("ns1", "load-balancer", "port4", v1.ProtocolUDP), "172.16.55.11", 8676, nodePort(30062), vip("10.1.2.4")),
			},
		},
		{
			name:   "load balancer service ipMode VIP",
			family: v1.IPv4Protocol,
			svc: makeService("ns1", "load-balancer", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ClusterIP = "172.16.55.11"
				s.Spec.Ports = addPort(s.Spec.Ports, "port3", "UDP", 8675, 30061, 7000)
				s.Spec.Ports = addPort(s.Spec.Ports, "port4", "UDP", 8676, 30062, 7001)
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.4", IPMode: ptr(v1.LoadBalancerIPModeVIP)}}
			}),
			want: []*ServicePort{
				wantPort(portName("ns1", "load-balancer", "port3", v1.ProtocolUDP), "172.16.55.11", 8675, nodePort(30061), vip("10.1.2.4")),
				wantPort(portName("ns1", "load-balancer", "port4", v1.ProtocolUDP), "172.16.55.11", 8676, nodePort(30062), vip("10.1.2.4")),
			},
		},
		{
			name:   "load balancer service ipMode Proxy",
			family: v1.IPv4Protocol,
			svc: makeService("ns1", "load-balancer", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ClusterIP = "172.16.55.11"
				s.Spec.Ports = addPort(s.Spec.Ports, "port3", "UDP", 8675, 30061, 7000)
				s.Spec.Ports = addPort(s.Spec.Ports, "port4", "UDP", 8676, 30062, 7001)
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.4", IPMode: ptr(v1.LoadBalancerIPModeProxy)}}
			}),
			want: []*ServicePort{
				wantPort(portName("ns1", "load-balancer", "port3", v1.ProtocolUDP), "172.16.55.11", 8675, nodePort(30061)),
				wantPort(portName("ns1", "load-balancer", "port4", v1.ProtocolUDP), "172.16.55.11", 8676, nodePort(30062)),
			},
		},
		{
			name:   "load balancer service with only local traffic policy",
			family: v1.IPv4Protocol,
			svc: makeService("ns1", "only-local-load-balancer", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ClusterIP = "172.16.55.12"
				s.Spec.Ports = addPort(s.Spec.Ports, "portx", "UDP", 8677, 30063, 7002)
				s.Spec.Ports = addPort(s.Spec.Ports, "porty", "UDP", 8678, 30064, 7003)
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.3"}}
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 345
			}),
			want: []*ServicePort{
				wantPort(portName("ns1", "only-local-load-balancer", "portx", v1.ProtocolUDP), "172.16.55.12", 8677, nodePort(30063), vip("10.1.2.3"), func(p *ServicePort) {
					p.ExternalPolicyLocal = true
					p.HealthCheckNodePort = 345
				}),
				wantPort(portName("ns1", "only-local-load-balancer", "porty", v1.ProtocolUDP), "172.16.55.12", 8678, nodePort(30064), vip("10.1.2.3"), func(p *ServicePort) {
					p.ExternalPolicyLocal = true
					p.HealthCheckNodePort = 345
				}),
			},
		},
		{
			name:   "external name service",
			family: v1.IPv4Protocol,
			svc: makeService("ns2", "external-name", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeExternalName
				s.Spec.ClusterIP = "172.16.55.4"
				s.Spec.ExternalName = "foo2.bar.com"
				s.Spec.Ports = addPort(s.Spec.Ports, "portz", "UDP", 1235, 5321, 0)
			}),
			wantSkips: []string{"service: external-name spec.type"},
		},
		{
			name:   "ipv6 clusterIP under ipv4 mode",
			family: v1.IPv4Protocol,
			svc: makeService("test", "invalidIPv6InIPV4Mode", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv6
				s.Spec.Ports = oneTCP
				s.Status = dualStatus
			}),
			wantSkips: []string{"service: other-family spec.clusterIP"},
		},
		{
			name:   "ipv4 clusterIP under ipv6 mode",
			family: v1.IPv6Protocol,
			svc: makeService("test", "invalidIPv4InIPV6Mode", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv4
				s.Spec.Ports = oneTCP
				s.Status = dualStatus
			}),
			wantSkips: []string{"service: other-family spec.clusterIP"},
		},
		{
			name:   "ipv4 configurations under ipv4 mode",
			family: v1.IPv4Protocol,
			svc: makeService("test", "validIPv4", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv4
				s.Spec.ExternalIPs = []string{externalIPv4}
				s.Spec.LoadBalancerSourceRanges = []string{sourceRangev4}
				s.Spec.Ports = oneTCP
				s.Status = dualStatus
			}),
			want: []*ServicePort{
				wantPort(portName("test", "validIPv4", "testPort", v1.ProtocolTCP), clusterIPv4, 12345, vip(externalIPv4), func(p *ServicePort) {
					p.ExternalIPs = addrs(externalIPv4)
					p.LoadBalancerSourceRanges = prefixes(sourceRangev4)
				}),
			},
		},
		{
			name:   "ipv6 configurations under ipv6 mode",
			family: v1.IPv6Protocol,
			svc: makeService("test", "validIPv6", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv6
				s.Spec.ExternalIPs = []string{externalIPv6}
				s.Spec.LoadBalancerSourceRanges = []string{sourceRangev6}
				s.Spec.Ports = oneTCP
				s.Status = dualStatus
			}),
			want: []*ServicePort{
				wantPort(portName("test", "validIPv6", "testPort", v1.ProtocolTCP), clusterIPv6, 12345, vip(externalIPv6), func(p *ServicePort) {
					p.ExternalIPs = addrs(externalIPv6)
					p.LoadBalancerSourceRanges = prefixes(sourceRangev6)
				}),
			},
		},
		{
			name:   "both families under ipv4 mode, ipv6 fields filtered",
			family: v1.IPv4Protocol,
			svc: makeService("test", "filterIPv6InIPV4Mode", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv4
				s.Spec.ExternalIPs = []string{externalIPv4, externalIPv6}
				s.Spec.LoadBalancerSourceRanges = []string{sourceRangev4, sourceRangev6}
				s.Spec.Ports = oneTCP
				s.Status = dualStatus
			}),
			want: []*ServicePort{
				wantPort(portName("test", "filterIPv6InIPV4Mode", "testPort", v1.ProtocolTCP), clusterIPv4, 12345, vip(externalIPv4), func(p *ServicePort) {
					p.ExternalIPs = addrs(externalIPv4)
					p.LoadBalancerSourceRanges = prefixes(sourceRangev4)
				}),
			},
		},
		{
			name:   "both families under ipv6 mode, ipv4 fields filtered",
			family: v1.IPv6Protocol,
			svc: makeService("test", "filterIPv4InIPV6Mode", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv6
				s.Spec.ExternalIPs = []string{externalIPv4, externalIPv6}
				s.Spec.LoadBalancerSourceRanges = []string{sourceRangev4, sourceRangev6}
				s.Spec.Ports = oneTCP
				s.Status = dualStatus
			}),
			want: []*ServicePort{
				wantPort(portName("test", "filterIPv4InIPV6Mode", "testPort", v1.ProtocolTCP), clusterIPv6, 12345, vip(externalIPv6), func(p *ServicePort) {
					p.ExternalIPs = addrs(externalIPv6)
					p.LoadBalancerSourceRanges = prefixes(sourceRangev6)
				}),
			},
		},
		{
			name:   "extra space in LoadBalancerSourceRanges",
			family: v1.IPv4Protocol,
			svc: makeService("test", "extra-space", func(s *v1.Service) {
				s.Spec.ClusterIP = clusterIPv4
				s.Spec.LoadBalancerSourceRanges = []string{" 10.1.2.0/28"}
				s.Spec.Ports = oneTCP
			}),
			want: []*ServicePort{
				wantPort(portName("test", "extra-space", "testPort", v1.ProtocolTCP), clusterIPv4, 12345, func(p *ServicePort) {
					p.LoadBalancerSourceRanges = prefixes("10.1.2.0/28")
				}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.svc, tt.family, "")
			if diff := cmp.Diff(tt.want, got, cmpOpts...); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkips, skipStrings(err), cmpOpts...); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNormalize covers the rows of the service-ingestion and
// service-port-attribute behaviour tables, and bad input.
func TestNormalize(t *testing.T) {
	name := portName("ns", "svc", "p", v1.ProtocolTCP)
	svc := func(fn func(*v1.Service)) *v1.Service {
		return makeService("ns", "svc", func(s *v1.Service) {
			s.Spec.ClusterIP = "10.0.0.1"
			s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 0, 8080)
			fn(s)
		})
	}
	one := func(fns ...func(*ServicePort)) []*ServicePort {
		return []*ServicePort{wantPort(name, "10.0.0.1", 80, fns...)}
	}
	withPorts := func(ports ...v1.ServicePort) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.Ports = ports }
	}

	tests := []struct {
		name      string
		family    v1.IPFamily
		proxyName string
		svc       *v1.Service
		want      []*ServicePort
		wantSkips []string
	}{
		// A2: services that are not proxied.
		{
			name: "no cluster IP",
			svc:  svc(func(s *v1.Service) { s.Spec.ClusterIP = "" }),
			wantSkips: []string{
				"service: no-cluster-ip spec.clusterIP",
			},
		},
		{
			name: "ExternalName without cluster IP",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeExternalName
				s.Spec.ClusterIP = ""
			}),
			wantSkips: []string{"service: external-name spec.type"},
		},
		{
			name:      "invalid cluster IP",
			svc:       svc(func(s *v1.Service) { s.Spec.ClusterIP = "10.0.0.256" }),
			wantSkips: []string{"service: invalid-cluster-ip spec.clusterIP"},
		},
		{
			name:      "invalid cluster IP in the IPv6 tracker too",
			family:    v1.IPv6Protocol,
			svc:       svc(func(s *v1.Service) { s.Spec.ClusterIP = "bogus" }),
			wantSkips: []string{"service: invalid-cluster-ip spec.clusterIP"},
		},
		{
			name:      "unspecified cluster IP",
			svc:       svc(func(s *v1.Service) { s.Spec.ClusterIP = "0.0.0.0" }),
			wantSkips: []string{"service: invalid-cluster-ip spec.clusterIP"},
		},
		{
			name: "cluster IP with leading zeros",
			svc:  svc(func(s *v1.Service) { s.Spec.ClusterIP = "010.000.000.001" }),
			want: one(),
		},
		{
			name: "IPv4-mapped cluster IP is IPv4",
			svc:  svc(func(s *v1.Service) { s.Spec.ClusterIP = "::ffff:10.0.0.1" }),
			want: one(),
		},
		// A3: the cluster IP of the family.
		{
			name: "dual stack, IPv6 primary, IPv4 tracker",
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIP = "fd00::1"
				s.Spec.ClusterIPs = []string{"fd00::1", "10.0.0.1"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			}),
			want: one(),
		},
		{
			name:   "dual stack, IPv6 primary, IPv6 tracker",
			family: v1.IPv6Protocol,
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIP = "fd00::1"
				s.Spec.ClusterIPs = []string{"fd00::1", "10.0.0.1"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			}),
			want: []*ServicePort{wantPort(name, "fd00::1", 80)},
		},
		{
			name: "ipFamilies name the family but clusterIPs are short",
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIP = "fd00::1"
				s.Spec.ClusterIPs = []string{"fd00::1"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			}),
			wantSkips: []string{"service: other-family spec.ipFamilies"},
		},
		{
			name: "ipFamilies set: spec.clusterIP is not consulted",
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIPs = []string{"fd00::1"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
			}),
			wantSkips: []string{"service: other-family spec.ipFamilies"},
		},
		{
			name: "ipFamilies disagree with the address",
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIPs = []string{"fd00::1"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
			}),
			wantSkips: []string{"service: invalid-cluster-ip spec.clusterIPs[0]"},
		},
		{
			name: "invalid entry in clusterIPs",
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIPs = []string{"fd00::1", "None"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			}),
			wantSkips: []string{"service: invalid-cluster-ip spec.clusterIPs[1]"},
		},
		// A1/A2: the service-proxy-name label, filtered here.
		{
			name:      "label, no proxy name",
			svc:       svc(func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} }),
			wantSkips: []string{"service: other-proxy metadata.labels[service.kubernetes.io/service-proxy-name]"},
		},
		{
			name:      "empty label, no proxy name",
			svc:       svc(func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: ""} }),
			wantSkips: []string{"service: other-proxy metadata.labels[service.kubernetes.io/service-proxy-name]"},
		},
		{
			name:      "label names another proxy",
			proxyName: "mine",
			svc:       svc(func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} }),
			wantSkips: []string{"service: other-proxy metadata.labels[service.kubernetes.io/service-proxy-name]"},
		},
		{
			name:      "label names this proxy",
			proxyName: "mine",
			svc:       svc(func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "mine"} }),
			want:      one(),
		},
		{
			name:      "no label, named proxy",
			proxyName: "mine",
			svc:       svc(func(s *v1.Service) { s.Labels = map[string]string{"app": "x"} }),
			want:      one(),
		},
		// A4: protocol is part of the port's identity.
		{
			name: "same port name for TCP and UDP",
			svc: svc(withPorts(
				v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53},
				v1.ServicePort{Name: "dns", Protocol: v1.ProtocolTCP, Port: 53},
			)),
			want: []*ServicePort{
				wantPort(portName("ns", "svc", "dns", v1.ProtocolTCP), "10.0.0.1", 53),
				wantPort(portName("ns", "svc", "dns", v1.ProtocolUDP), "10.0.0.1", 53),
			},
		},
		{
			name: "unnamed port, empty protocol is TCP",
			svc:  svc(withPorts(v1.ServicePort{Port: 80})),
			want: []*ServicePort{wantPort(portName("ns", "svc", "", v1.ProtocolTCP), "10.0.0.1", 80)},
		},
		{
			name: "no ports",
			svc:  svc(withPorts()),
		},
		// B1: ports.
		{
			name: "invalid ports are dropped, the rest kept",
			svc: svc(withPorts(
				v1.ServicePort{Name: "zero", Protocol: v1.ProtocolTCP, Port: 0},
				v1.ServicePort{Name: "big", Protocol: v1.ProtocolTCP, Port: 70000},
				v1.ServicePort{Name: "neg", Protocol: v1.ProtocolTCP, Port: -1},
				v1.ServicePort{Name: "np", Protocol: v1.ProtocolTCP, Port: 81, NodePort: 70000},
				v1.ServicePort{Name: "npneg", Protocol: v1.ProtocolTCP, Port: 82, NodePort: -5},
				v1.ServicePort{Name: "lower", Protocol: "tcp", Port: 83},
				v1.ServicePort{Name: "icmp", Protocol: "ICMP", Port: 84},
				v1.ServicePort{Name: "bad name", Protocol: v1.ProtocolTCP, Port: 85},
				v1.ServicePort{Name: "p", Protocol: v1.ProtocolTCP, Port: 80},
				v1.ServicePort{Name: "max", Protocol: v1.ProtocolSCTP, Port: 65535, NodePort: 65535},
			)),
			want: []*ServicePort{
				wantPort(portName("ns", "svc", "max", v1.ProtocolSCTP), "10.0.0.1", 65535, func(p *ServicePort) { p.NodePort = 65535 }),
				wantPort(name, "10.0.0.1", 80),
			},
			wantSkips: []string{
				"invalid-port spec.ports[0].port",
				"invalid-port spec.ports[1].port",
				"invalid-port spec.ports[2].port",
				"invalid-node-port spec.ports[3].nodePort",
				"invalid-node-port spec.ports[4].nodePort",
				"invalid-protocol spec.ports[5].protocol",
				"invalid-protocol spec.ports[6].protocol",
				"invalid-name spec.ports[7].name",
			},
		},
		{
			name: "every port invalid",
			svc:  svc(withPorts(v1.ServicePort{Name: "zero", Port: 0})),
			wantSkips: []string{
				"invalid-port spec.ports[0].port",
			},
		},
		{
			name: "duplicates: the first wins",
			svc: svc(withPorts(
				v1.ServicePort{Name: "p", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080},
				v1.ServicePort{Name: "p", Protocol: v1.ProtocolTCP, Port: 81},
				v1.ServicePort{Name: "q", Protocol: v1.ProtocolTCP, Port: 80},
				v1.ServicePort{Name: "r", Protocol: v1.ProtocolTCP, Port: 82, NodePort: 30080},
				v1.ServicePort{Name: "p", Protocol: v1.ProtocolUDP, Port: 80, NodePort: 30080},
			)),
			want: []*ServicePort{
				wantPort(name, "10.0.0.1", 80, func(p *ServicePort) { p.NodePort = 30080 }),
				wantPort(portName("ns", "svc", "p", v1.ProtocolUDP), "10.0.0.1", 80, func(p *ServicePort) { p.NodePort = 30080 }),
			},
			wantSkips: []string{
				"duplicate-port spec.ports[1].name",
				"duplicate-port spec.ports[2].port",
				"duplicate-port spec.ports[3].nodePort",
			},
		},
		{
			name:      "invalid service name",
			svc:       svc(func(s *v1.Service) { s.Name = `svc"; drop` }),
			wantSkips: []string{"service: invalid-name metadata.name"},
		},
		{
			name:      "empty service name",
			svc:       svc(func(s *v1.Service) { s.Name = "" }),
			wantSkips: []string{"service: invalid-name metadata.name"},
		},
		{
			name:      "invalid namespace",
			svc:       svc(func(s *v1.Service) { s.Namespace = "a\nb" }),
			wantSkips: []string{"service: invalid-name metadata.namespace"},
		},
		{
			name: "namespace, name and port name at the API server's 63 characters",
			svc: makeService(strings.Repeat("n", 63), strings.Repeat("s", 63), func(s *v1.Service) {
				s.Spec.ClusterIP = "10.0.0.1"
				s.Spec.Ports = addPort(nil, strings.Repeat("p", 63), v1.ProtocolTCP, 80, 0, 8080)
			}),
			want: []*ServicePort{wantPort(portName(strings.Repeat("n", 63), strings.Repeat("s", 63), strings.Repeat("p", 63), v1.ProtocolTCP), "10.0.0.1", 80)},
		},
		{
			name:      "service name of 64 characters, which no API server stores",
			svc:       svc(func(s *v1.Service) { s.Name = strings.Repeat("s", 64) }),
			wantSkips: []string{"service: invalid-name metadata.name"},
		},
		{
			name:      "namespace of 64 characters",
			svc:       svc(func(s *v1.Service) { s.Namespace = strings.Repeat("n", 64) }),
			wantSkips: []string{"service: invalid-name metadata.namespace"},
		},
		{
			name:      "port name of 64 characters",
			svc:       svc(withPorts(v1.ServicePort{Name: strings.Repeat("p", 64), Protocol: v1.ProtocolTCP, Port: 80})),
			wantSkips: []string{"invalid-name spec.ports[0].name"},
		},
		// B3: external IPs.
		{
			name: "external IPs: sloppy, filtered, sorted, de-duplicated",
			svc: svc(func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{
					"172.30.0.041", "", "  ", "1.2.3.4", "fd00::5", "not-an-ip",
					"172.30.0.41", "1.2.3.4", "127.0.0.1", "0.0.0.0", "169.254.1.1", "224.0.0.1", " 5.6.7.8",
				}
			}),
			want: one(func(p *ServicePort) { p.ExternalIPs = addrs("1.2.3.4", "172.30.0.41") }),
			wantSkips: []string{
				"invalid-external-ip spec.externalIPs[5]",
				"invalid-external-ip spec.externalIPs[8]",
				"invalid-external-ip spec.externalIPs[9]",
				"invalid-external-ip spec.externalIPs[10]",
				"invalid-external-ip spec.externalIPs[11]",
				"invalid-external-ip spec.externalIPs[12]",
			},
		},
		{
			name:   "external IPs of IPv6",
			family: v1.IPv6Protocol,
			svc: svc(func(s *v1.Service) {
				s.Spec.ClusterIP = "fd00::1"
				s.Spec.ExternalIPs = []string{"1.2.3.4", "2001:DB8::0:1", "2001:db8::1", "::1", "fe80::1"}
			}),
			want: []*ServicePort{wantPort(name, "fd00::1", 80, func(p *ServicePort) { p.ExternalIPs = addrs("2001:db8::1") })},
			wantSkips: []string{
				"invalid-external-ip spec.externalIPs[3]",
				"invalid-external-ip spec.externalIPs[4]",
			},
		},
		// B4: source ranges.
		{
			name: "source ranges: trimmed, masked, sorted, de-duplicated",
			svc: svc(func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{" 10.1.2.3/24 ", "10.1.2.0/24", "010.0.0.0/8", "fd00::/8", "1.2.3.4", "", "192.168.0.0/33", "0.0.0.0/1"}
			}),
			want: one(func(p *ServicePort) { p.LoadBalancerSourceRanges = prefixes("0.0.0.0/1", "10.0.0.0/8", "10.1.2.0/24") }),
			wantSkips: []string{
				"invalid-source-range spec.loadBalancerSourceRanges[4]",
				"invalid-source-range spec.loadBalancerSourceRanges[6]",
			},
		},
		{
			name: "source range of prefix 0 allows all",
			svc: svc(func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8", "0.0.0.0/0", "fd00::/8"}
			}),
			want: one(),
		},
		{
			name: "prefix 0 of the other family does not matter",
			svc: svc(func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8", "::/0"}
			}),
			want: one(func(p *ServicePort) { p.LoadBalancerSourceRanges = prefixes("10.0.0.0/8") }),
		},
		{
			name: "IPv4-mapped source ranges are IPv4",
			svc: svc(func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"::ffff:10.1.0.0/112", "::ffff:1.2.3.4/64"}
			}),
			want: one(func(p *ServicePort) { p.LoadBalancerSourceRanges = prefixes("10.1.0.0/16") }),
		},
		// B5: load-balancer VIPs.
		{
			name: "VIPs: hostname-only and Proxy skipped, filtered, sorted, de-duplicated",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
					{IP: "5.6.7.8"},
					{Hostname: "lb.example.com"},
					{IP: "9.9.9.9", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
					{IP: "1.1.1.1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
					{IP: "fd00::9"},
					{IP: "5.6.7.8", Hostname: "lb.example.com"},
					{IP: "bogus"},
					{IP: "bogus", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
					{IP: "2.2.2.2", IPMode: ptr(v1.LoadBalancerIPMode("Unknown"))},
				}
			}),
			want:      one(func(p *ServicePort) { p.LoadBalancerVIPs = addrs("1.1.1.1", "5.6.7.8") }),
			wantSkips: []string{"invalid-ingress-ip status.loadBalancer.ingress[6].ip"},
		},
		{
			name: "VIPs of a NodePort service",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.6.7.8"}}
			}),
			want: one(func(p *ServicePort) { p.LoadBalancerVIPs = addrs("5.6.7.8") }),
		},
		// B6: traffic policies.
		{
			name: "eTP Local on an internal-only ClusterIP service is not local",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			want: one(),
		},
		{
			name: "eTP Local on a ClusterIP service with external IPs",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeClusterIP
				s.Spec.ExternalIPs = []string{"1.2.3.4"}
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			want: one(func(p *ServicePort) {
				p.ExternalIPs = addrs("1.2.3.4")
				p.ExternalPolicyLocal = true
			}),
		},
		{
			name: "eTP Local, untyped service with external IPs of the other family only",
			svc: svc(func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"fd00::4"}
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			want: one(func(p *ServicePort) { p.ExternalPolicyLocal = true }),
		},
		{
			name: "eTP Local on a NodePort service: no health check",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30999
			}),
			want: one(func(p *ServicePort) {
				p.NodePort = 30080
				p.ExternalPolicyLocal = true
			}),
		},
		{
			name: "iTP Local",
			svc: svc(func(s *v1.Service) {
				s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
			}),
			want: one(func(p *ServicePort) { p.InternalPolicyLocal = true }),
		},
		{
			name: "iTP Cluster",
			svc: svc(func(s *v1.Service) {
				s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyCluster)
			}),
			want: one(),
		},
		// B7: health-check node port.
		{
			name: "LoadBalancer with eTP Local but no health-check node port",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			want:      one(func(p *ServicePort) { p.ExternalPolicyLocal = true }),
			wantSkips: []string{"invalid-health-check-node-port spec.healthCheckNodePort"},
		},
		{
			name: "LoadBalancer with eTP Local and a huge health-check node port",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 65536
			}),
			want:      one(func(p *ServicePort) { p.ExternalPolicyLocal = true }),
			wantSkips: []string{"invalid-health-check-node-port spec.healthCheckNodePort"},
		},
		{
			name: "LoadBalancer with eTP Cluster keeps no health-check node port",
			svc: svc(func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.HealthCheckNodePort = 30999
			}),
			want: one(),
		},
		// B8: session affinity.
		{
			name: "ClientIP affinity",
			svc: svc(func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](300)}}
			}),
			want: one(func(p *ServicePort) {
				p.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: 300 * time.Second}
			}),
		},
		{
			name: "ClientIP affinity without config takes the default",
			svc: svc(func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			}),
			want: one(func(p *ServicePort) {
				p.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: affinity.DefaultClientIPTimeout}
			}),
		},
		{
			name: "ClientIP affinity with a timeout beyond the maximum",
			svc: svc(func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](86401)}}
			}),
			wantSkips: []string{"service: invalid-session-affinity spec.sessionAffinityConfig.clientIP.timeoutSeconds"},
		},
		{
			name:      "unknown session affinity",
			svc:       svc(func(s *v1.Service) { s.Spec.SessionAffinity = "Cookie" }),
			wantSkips: []string{"service: invalid-session-affinity spec.sessionAffinity"},
		},
		{
			name: "traffic distribution",
			svc:  svc(func(s *v1.Service) { s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferClose) }),
			want: one(func(p *ServicePort) { p.TrafficDistribution = v1.ServiceTrafficDistributionPreferClose }),
		},
		{
			name: "topology-mode Auto overrides traffic distribution",
			svc: svc(func(s *v1.Service) {
				s.Annotations = map[string]string{v1.AnnotationTopologyMode: "Auto"}
				s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferClose)
			}),
			want: one(func(p *ServicePort) {}),
		},
		{
			name: "deprecated topology annotation takes precedence",
			svc: svc(func(s *v1.Service) {
				s.Annotations = map[string]string{v1.AnnotationTopologyMode: "Auto", v1.DeprecatedAnnotationTopologyAwareHints: "disabled"}
				s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferSameNode)
			}),
			want: one(func(p *ServicePort) { p.TrafficDistribution = v1.ServiceTrafficDistributionPreferSameNode }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.svc.DeepCopy()
			got, err := Normalize(tt.svc, tt.family, tt.proxyName)
			if diff := cmp.Diff(tt.want, got, cmpOpts...); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkips, skipStrings(err), cmpOpts...); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			if !apiequality.Semantic.DeepEqual(before, tt.svc) {
				t.Errorf("Normalize modified its input")
			}
		})
	}
}

func TestNormalizeSessionAffinityErrorWraps(t *testing.T) {
	svc := makeService("ns", "svc", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.0.0.1"
		s.Spec.SessionAffinity = "Cookie"
	})
	_, err := Normalize(svc, v1.IPv4Protocol, "")
	if !errors.Is(err, affinity.ErrInvalidSessionAffinity) {
		t.Errorf("Normalize error %v does not wrap affinity.ErrInvalidSessionAffinity", err)
	}
	var se *SkipError
	if !errors.As(err, &se) || se.Reason != ReasonInvalidSessionAffinity {
		t.Errorf("Normalize error %v is not a *SkipError with reason %q", err, ReasonInvalidSessionAffinity)
	}
}

// TestNormalizeNilFields feeds services whose optional fields are all nil or
// empty; none of them may panic.
func TestNormalizeNilFields(t *testing.T) {
	tests := []struct {
		name string
		svc  *v1.Service
		want int
	}{
		{"zero service", &v1.Service{}, 0},
		{"only a cluster IP", &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1.ServiceSpec{ClusterIP: "10.0.0.1"}}, 0},
		{"ClientIP without config", &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1.ServiceSpec{
			ClusterIP: "10.0.0.1", SessionAffinity: v1.ServiceAffinityClientIP,
			SessionAffinityConfig: &v1.SessionAffinityConfig{},
			Ports:                 []v1.ServicePort{{Port: 1}},
		}}, 1},
		{"ClientIP with nil timeout", &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1.ServiceSpec{
			ClusterIP: "10.0.0.1", SessionAffinity: v1.ServiceAffinityClientIP,
			SessionAffinityConfig: &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{}},
			Ports:                 []v1.ServicePort{{Port: 1}},
		}}, 1},
		{"empty ingress entries", &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1.ServiceSpec{
			ClusterIP: "10.0.0.1", Ports: []v1.ServicePort{{Port: 1}},
		}, Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: make([]v1.LoadBalancerIngress, 3)}}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Normalize(tt.svc, "", "")
			if len(got) != tt.want {
				t.Errorf("Normalize returned %d ports, want %d", len(got), tt.want)
			}
		})
	}
}

// TestNormalizeHuge checks that large objects are handled whole and that
// an absurdly long address is merely dropped.
func TestNormalizeHuge(t *testing.T) {
	const n = 20000
	svc := makeService("ns", "huge", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.0.0.1"
		for i := range n {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: v1.ProtocolUDP, Port: int32(i%65535 + 1)})
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, fmt.Sprintf("11.%d.%d.1", i/256%256, i%256))
			s.Spec.LoadBalancerSourceRanges = append(s.Spec.LoadBalancerSourceRanges, fmt.Sprintf("12.%d.%d.0/24", i/256%256, i%256))
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: fmt.Sprintf("13.%d.%d.1", i/256%256, i%256)})
		}
		s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, strings.Repeat("1", 1<<20))
	})
	got, err := Normalize(svc, v1.IPv4Protocol, "")
	if len(got) != n {
		t.Fatalf("got %d ports, want %d", len(got), n)
	}
	if diff := cmp.Diff([]string{"invalid-external-ip spec.externalIPs[20000]"}, skipStrings(err)); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
	for _, p := range got[:1] {
		if len(p.ExternalIPs) != n || len(p.LoadBalancerVIPs) != n || len(p.LoadBalancerSourceRanges) != n {
			t.Errorf("got %d external IPs, %d VIPs, %d ranges; want %d each", len(p.ExternalIPs), len(p.LoadBalancerVIPs), len(p.LoadBalancerSourceRanges), n)
		}
	}
}

func TestServicePortMethods(t *testing.T) {
	v4 := wantPort(portName("ns", "svc", "dns", v1.ProtocolUDP), "10.0.0.1", 53)
	v6 := wantPort(portName("ns", "svc", "", v1.ProtocolTCP), "fd00::1", 80, func(p *ServicePort) {
		p.InternalPolicyLocal = true
		p.TrafficDistribution = "PreferClose"
	})
	np := wantPort(portName("ns", "svc", "np", v1.ProtocolTCP), "10.0.0.1", 80, func(p *ServicePort) {
		p.NodePort = 30080
		p.ExternalPolicyLocal = true
	})
	ext := wantPort(portName("ns", "svc", "ext", v1.ProtocolTCP), "10.0.0.1", 80, func(p *ServicePort) { p.ExternalIPs = addrs("1.2.3.4") })
	lb := wantPort(portName("ns", "svc", "lb", v1.ProtocolTCP), "10.0.0.1", 80, func(p *ServicePort) { p.LoadBalancerVIPs = addrs("1.2.3.4") })

	type summary struct {
		Name, String         string
		Family               v1.IPFamily
		ExternallyAccessible bool
		Policy               affinity.Policy
	}
	sum := func(p *ServicePort) summary {
		return summary{p.Name.String(), p.String(), p.Family(), p.ExternallyAccessible(), p.Policy()}
	}
	tests := []struct {
		port *ServicePort
		want summary
	}{
		{v4, summary{"ns/svc:dns", "10.0.0.1:53/UDP", v1.IPv4Protocol, false, affinity.Policy{}}},
		{v6, summary{"ns/svc", "[fd00::1]:80/TCP", v1.IPv6Protocol, false, affinity.Policy{InternalLocal: true, TrafficDistribution: "PreferClose"}}},
		{np, summary{"ns/svc:np", "10.0.0.1:80/TCP", v1.IPv4Protocol, true, affinity.Policy{ExternalLocal: true, ExternallyAccessible: true}}},
		{ext, summary{"ns/svc:ext", "10.0.0.1:80/TCP", v1.IPv4Protocol, true, affinity.Policy{ExternallyAccessible: true}}},
		{lb, summary{"ns/svc:lb", "10.0.0.1:80/TCP", v1.IPv4Protocol, true, affinity.Policy{ExternallyAccessible: true}}},
		{&ServicePort{}, summary{"/", "invalid AddrPort/", v1.IPFamilyUnknown, false, affinity.Policy{}}},
	}
	for _, tt := range tests {
		t.Run(tt.want.String, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, sum(tt.port)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestServicePortEqual(t *testing.T) {
	base := func() *ServicePort {
		return wantPort(portName("ns", "svc", "p", v1.ProtocolUDP), "10.0.0.1", 53, func(p *ServicePort) {
			p.ExternalIPs = addrs("1.2.3.4")
			p.LoadBalancerVIPs = addrs("5.6.7.8")
			p.LoadBalancerSourceRanges = prefixes("10.0.0.0/8")
		})
	}
	mutations := map[string]func(*ServicePort){
		"name":            func(p *ServicePort) { p.Name.Port = "q" },
		"protocol":        func(p *ServicePort) { p.Protocol = v1.ProtocolTCP },
		"cluster IP":      func(p *ServicePort) { p.ClusterIP = netip.MustParseAddr("10.0.0.2") },
		"port":            func(p *ServicePort) { p.Port = 54 },
		"node port":       func(p *ServicePort) { p.NodePort = 1 },
		"external IPs":    func(p *ServicePort) { p.ExternalIPs = nil },
		"VIPs":            func(p *ServicePort) { p.LoadBalancerVIPs = addrs("5.6.7.9") },
		"source ranges":   func(p *ServicePort) { p.LoadBalancerSourceRanges = prefixes("10.0.0.0/9") },
		"iTP":             func(p *ServicePort) { p.InternalPolicyLocal = true },
		"eTP":             func(p *ServicePort) { p.ExternalPolicyLocal = true },
		"health check":    func(p *ServicePort) { p.HealthCheckNodePort = 1 },
		"affinity":        func(p *ServicePort) { p.SessionAffinity.ClientIP = true },
		"distribution":    func(p *ServicePort) { p.TrafficDistribution = "PreferClose" },
		"affinity length": func(p *ServicePort) { p.SessionAffinity.Timeout = time.Second },
	}
	if !base().Equal(base()) {
		t.Errorf("equal ports compare unequal")
	}
	var nilPort *ServicePort
	if !nilPort.Equal(nil) || nilPort.Equal(base()) || base().Equal(nil) {
		t.Errorf("nil ports compare wrongly")
	}
	for name, mutate := range mutations {
		p := base()
		mutate(p)
		if p.Equal(base()) || base().Equal(p) {
			t.Errorf("ports differing in %s compare equal", name)
		}
	}
}

// TestParseAgreesWithSloppy pins the allocation-free parsers to upstream's
// sloppy ones on the inputs where they are most likely to differ.
func TestParseAgreesWithSloppy(t *testing.T) {
	inputs := []string{
		"", " ", "1.2.3.4", "1.2.3.4 ", "01.2.3.4", "1.2.3", "1.2.3.4.5", "256.1.1.1",
		"::ffff:1.2.3.4", "::ffff:0102:0304", "::1", "[::1]", "fe80::1%eth0", "2001:DB8::1",
		"1.2.3.4/24", "1.2.3.4/024", "1.2.3.4/33", "01.2.3.4/8", "0.0.0.0/0", "::/0", "2001:db8::/129",
		"::ffff:10.0.0.0/104", "::ffff:1.2.3.4/120", "::ffff:1.2.3.4/95", "::ffff:1.2.3.4/64", "fe80::/10%eth0",
	}
	for _, s := range inputs {
		ip, ok := parseIP(s)
		wantIP, wantOK := parseIPSloppy(s)
		if ip != wantIP || ok != wantOK {
			t.Errorf("parseIP(%q) = %v, %v; sloppy parser says %v, %v", s, ip, ok, wantIP, wantOK)
		}
		p, ok := parsePrefix(s)
		wantP, wantOK := parsePrefixSloppy(s)
		if p != wantP || ok != wantOK {
			t.Errorf("parsePrefix(%q) = %v, %v; sloppy parser says %v, %v", s, p, ok, wantP, wantOK)
		}
	}
}

// TestPolicyEndpointUse covers B10 through Normalize and Policy: which
// endpoint sets a port's traffic uses.
func TestPolicyEndpointUse(t *testing.T) {
	base := func(fn func(*v1.Service)) *v1.Service {
		return makeService("ns", "svc", func(s *v1.Service) {
			s.Spec.ClusterIP = "10.0.0.1"
			s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 0, 80)
			fn(s)
		})
	}
	type uses struct{ Cluster, Local bool }
	tests := []struct {
		name string
		svc  *v1.Service
		want uses
	}{
		{"ClusterIP", base(func(s *v1.Service) {}), uses{Cluster: true}},
		{"iTP Local, internal only", base(func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}), uses{Local: true}},
		{"iTP Local with a node port", base(func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}), uses{Cluster: true, Local: true}},
		{"eTP Local LoadBalancer", base(func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 30999
		}), uses{Cluster: true, Local: true}},
		{"eTP Local, external IPs only of the other family", base(func(s *v1.Service) {
			s.Spec.ExternalIPs = []string{"fd00::1"}
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}), uses{Cluster: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ports, err := Normalize(tt.svc, v1.IPv4Protocol, "")
			if err != nil || len(ports) != 1 {
				t.Fatalf("Normalize = %v, %v", ports, err)
			}
			pol := ports[0].Policy()
			if diff := cmp.Diff(tt.want, uses{pol.UsesClusterEndpoints(), pol.UsesLocalEndpoints()}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

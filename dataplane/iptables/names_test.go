package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestChainNames(t *testing.T) {
	// Upstream's hashes, recomputed in the reference notes.
	n, err := newChainNames("KUBEX-")
	if err != nil {
		t.Fatal(err)
	}
	if got := n.serviceChain(kindSVC, "ns1/svc1:p80tcp"); got != "KUBEX-SVC-XPGD46QRK7WJZT7O" {
		t.Errorf("service chain = %s", got)
	}
	if got := n.endpointChain("ns1/svc1:p80tcp", "10.180.0.1:80"); got != "KUBEX-SEP-SXIVWICOYRO3J4NJ" {
		t.Errorf("endpoint chain = %s", got)
	}
	if got := string(n.appendEndpointChain([]byte("x"), "ns1/svc1:p80tcp", netip.MustParseAddrPort("10.180.0.1:80"))); got != "xKUBEX-SEP-SXIVWICOYRO3J4NJ" {
		t.Errorf("appended endpoint chain = %s", got)
	}
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true}, {"PK-", true}, {"ABCDEFGHIJK", true}, {"ABCDEFGHIJKL", false},
		{"KUBE-", false}, {"pk-", false}, {"P K", false},
	} {
		n, err := newChainNames(tc.prefix)
		if (err == nil) != tc.ok {
			t.Errorf("prefix %q: err = %v, want ok %v", tc.prefix, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		for _, c := range []string{n.externalServices, n.proxyFirewall, n.serviceChain(kindSVC, "x"), n.endpointChain("x", "y")} {
			if len(c) > maxChainName {
				t.Errorf("prefix %q: chain %s is longer than %d", tc.prefix, c, maxChainName)
			}
		}
		if !n.isServiceChain(n.serviceChain(kindFW, "x")) || n.isServiceChain(n.services) || n.isServiceChain("KUBE-SVC-XPGD46QRK7WJZT7O") {
			t.Errorf("prefix %q: isServiceChain is wrong", tc.prefix)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{Family: "IPv5", Runner: xtables.NewFakeRunner()},
		{MasqueradeBit: 32, Runner: xtables.NewFakeRunner()},
		{ChainPrefix: "KUBE-", Runner: xtables.NewFakeRunner()},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	d, err := New(Config{MasqueradeBit: 3, Runner: xtables.NewFakeRunner()})
	if err != nil || d.mark != "0x00000008" {
		t.Errorf("mark = %q, %v", d.mark, err)
	}
	if err := d.Sync(t.Context(), &dataplane.State{Family: v1.IPv6Protocol}); err == nil {
		t.Errorf("an IPv4 dataplane accepted an IPv6 State")
	}
}

// TestRuleCounts checks the per-service rule counts of upstream's
// TestNumberIptablesRules (less the nfacct-only localhost rule, which is
// not written here).
func TestRuleCounts(t *testing.T) {
	for _, tc := range []struct {
		name           string
		lb             bool
		eps            int
		nat, filterExt int
	}{
		{"ClusterIP, 1 endpoint", false, 1, 2 + 3, 0},
		{"ClusterIP, 10 endpoints", false, 10, 2 + 30, 0},
		{"ClusterIP, no endpoints", false, 0, 0, 1},
		{"LoadBalancer, 1 endpoint", true, 1, 9 + 3, 1},
		{"LoadBalancer, 10 endpoints", true, 10, 9 + 30, 1},
		{"LoadBalancer, no endpoints", true, 0, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Port: "p80", Protocol: v1.ProtocolTCP}
			sp := &servicemodel.ServicePort{Name: name, ClusterIP: netip.MustParseAddr("172.30.0.41"), Port: 80, Protocol: v1.ProtocolTCP}
			if tc.lb {
				sp.NodePort = 3001
				sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("192.168.99.11")}
				sp.LoadBalancerVIPs = []netip.Addr{netip.MustParseAddr("1.2.3.4")}
				sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/25")}
			}
			var eps []*endpoints.Endpoint
			for i := range tc.eps {
				eps = append(eps, &endpoints.Endpoint{Addr: netip.MustParseAddrPort(fmt.Sprintf("10.180.0.%d:80", i+1)),
					EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}})
			}
			s := &dataplane.State{
				Node:      dataplane.Node{IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
				Settings:  dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}},
				Services:  servicemodel.NewMap(sp),
				Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{name: eps}),
			}
			d, fake := newFake(t, Config{})
			if err := d.Sync(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			rs := fake.Ruleset()
			nat, filter := 0, 0
			for _, c := range rs.Chains("nat") {
				if c == d.names.services || c == d.names.nodePorts || d.names.isServiceChain(c) {
					nat += len(rs.Rules("nat", c))
				}
			}
			nat -= len(d.nodePortJumps(d.prog.view))
			for _, c := range []string{d.names.services, d.names.externalServices, d.names.nodePorts, d.names.proxyFirewall} {
				filter += len(rs.Rules("filter", c))
			}
			if nat != tc.nat || filter != tc.filterExt {
				t.Errorf("nat %d, filter %d rules; want %d, %d\n%s", nat, filter, tc.nat, tc.filterExt, dump(fake))
			}
		})
	}
}

// TestLongestNamesFitComments programs a port whose namespace, name and
// port name are as long as the API server allows (63 characters each) in
// every rule shape that writes a name into a comment (a load balancer with
// source ranges, externalTrafficPolicy Local, a health-check node port of
// a non-TCP port, IPv6 endpoints), with the longest chain prefix: every
// comment must fit in the 255 bytes xt_comment holds (the fake, like
// iptables-restore, refuses a longer one; iptables itself cuts it, which
// would read back as drift).
func TestLongestNamesFitComments(t *testing.T) {
	label := func(word string) string { return word + strings.Repeat("x", 63-len(word)) }
	ns, name, port := label("namespace"), label("service"), label("port")
	svc := dataplanetest.MakeService(ns, name, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "fd00:172:30::41"
		s.Spec.ClusterIPs = []string{"fd00:172:30::41"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30000
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort(port, v1.ProtocolSCTP, 80, 3001, 65535)}
		s.Spec.LoadBalancerSourceRanges = []string{"2001:db8:ffff::/48"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"}}
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	})
	slice := dataplanetest.MakeSlice(ns, name, 1, func(s *discovery.EndpointSlice) {
		s.AddressType = discovery.AddressTypeIPv6
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort(port, v1.ProtocolSCTP, 65535)}
		s.Endpoints = []discovery.Endpoint{
			dataplanetest.ReadyEndpoint("fd00:10:ffff:ffff:ffff:ffff:ffff:fff1", dataplanetest.NodeName),
			dataplanetest.ReadyEndpoint("fd00:10:ffff:ffff:ffff:ffff:ffff:fff2", "remote"),
		}
	})
	b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{v1.IPv6Protocol}, NodeName: dataplanetest.NodeName,
		Settings: dataplanetest.DefaultSettings(), OnSkip: func(kind, reason string) { t.Errorf("Builder skipped a %s: %s", kind, reason) }})
	b.UpdateNode(dataplanetest.TestNode(nil))
	b.UpdateService(nil, svc)
	b.UpdateEndpointSlice(nil, slice)
	s := b.Build().States[0]

	var skipped []string
	d, fake := newFake(t, Config{Family: v1.IPv6Protocol, ChainPrefix: "ABCDEFGHIJK", OnSkip: func(reason string) { skipped = append(skipped, reason) }})
	if err := d.Sync(context.Background(), s); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if len(skipped) > 0 {
		t.Errorf("skipped: %q", skipped)
	}
	longest, named := 0, 0
	for _, m := range regexp.MustCompile(`--comment ("[^"]*"|\S+)`).FindAllStringSubmatch(dump(fake), -1) {
		c := strings.Trim(m[1], `"`)
		longest = max(longest, len(c))
		if strings.Contains(c, ns+"/"+name+":"+port) {
			named++
		}
	}
	if longest > 255 {
		t.Errorf("longest comment has %d bytes, more than 255", longest)
	}
	if named == 0 {
		t.Error("no rule names the port")
	}
	t.Logf("longest comment: %d bytes; %d rules name the port", longest, named)
}

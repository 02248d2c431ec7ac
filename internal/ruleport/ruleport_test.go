package ruleport

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestCheck(t *testing.T) {
	// named sets the namespace and service name when not "", and the port
	// name.
	named := func(ns, name, port string) func(*servicemodel.ServicePort) {
		return func(sp *servicemodel.ServicePort) {
			if ns != "" {
				sp.Name.Namespace = ns
			}
			if name != "" {
				sp.Name.Name = name
			}
			sp.Name.Port = port
		}
	}
	good := func(edit func(*servicemodel.ServicePort)) *servicemodel.ServicePort {
		sp := &servicemodel.ServicePort{
			Name:      servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Port: "p", Protocol: v1.ProtocolUDP},
			Protocol:  v1.ProtocolUDP,
			ClusterIP: netip.MustParseAddr("10.0.0.1"),
			Port:      53,
		}
		if edit != nil {
			edit(sp)
		}
		return sp
	}
	for _, tc := range []struct {
		name    string
		sp      *servicemodel.ServicePort
		want    *Port
		reason  string
		dropped []string
	}{
		{name: "nil", reason: "nil service port"},
		{name: "valid", sp: good(nil), want: &Port{Proto: "udp"}},
		// A service port name is a DNS label (63 characters), not a
		// container port's IANA name (15): upstream's e2e names one
		// "mutable-named-port".
		{name: "port name of 15", sp: good(named("", "", strings.Repeat("p", 15))), want: &Port{Proto: "udp"}},
		{name: "port name of 16", sp: good(named("", "", strings.Repeat("p", 16))), want: &Port{Proto: "udp"}},
		{name: "upstream e2e's port name", sp: good(named("", "", "mutable-named-port")), want: &Port{Proto: "udp"}},
		{name: "port name of 63", sp: good(named("", "", strings.Repeat("p", 63))), want: &Port{Proto: "udp"}},
		{name: "port name of 64", sp: good(named("", "", strings.Repeat("p", 64))), reason: "service or port name not usable in a rule"},
		{name: "no port name", sp: good(named("", "", "")), want: &Port{Proto: "udp"}},
		{name: "namespace of 63", sp: good(named(strings.Repeat("n", 63), "", "")), want: &Port{Proto: "udp"}},
		{name: "namespace of 64", sp: good(named(strings.Repeat("n", 64), "", "")), reason: "service or port name not usable in a rule"},
		{name: "no namespace", sp: good(func(sp *servicemodel.ServicePort) { sp.Name.Namespace = "" }), reason: "service or port name not usable in a rule"},
		{name: "name of 63", sp: good(named("", strings.Repeat("s", 63), "")), want: &Port{Proto: "udp"}},
		{name: "name of 64", sp: good(named("", strings.Repeat("s", 64), "")), reason: "service or port name not usable in a rule"},
		{name: "every name of 63", sp: good(named(strings.Repeat("n", 63), strings.Repeat("s", 63), strings.Repeat("p", 63))), want: &Port{Proto: "udp"}},
		{name: "quote in port name", sp: good(func(sp *servicemodel.ServicePort) { sp.Name.Port = `p"` }), reason: "service or port name not usable in a rule"},
		{name: "unknown protocol", sp: good(func(sp *servicemodel.ServicePort) { sp.Protocol, sp.Name.Protocol = "ICMP", "ICMP" }), reason: "unsupported protocol"},
		{name: "protocol unlike the name's", sp: good(func(sp *servicemodel.ServicePort) { sp.Protocol = v1.ProtocolTCP }), reason: "unsupported protocol"},
		{name: "IPv6 cluster IP", sp: good(func(sp *servicemodel.ServicePort) { sp.ClusterIP = netip.MustParseAddr("fd00::1") }), reason: "cluster IP missing or of another family"},
		{name: "port 0", sp: good(func(sp *servicemodel.ServicePort) { sp.Port = 0 }), reason: "port 0"},
		{name: "affinity too long", sp: good(func(sp *servicemodel.ServicePort) {
			sp.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: 86401 * time.Second}
		}), reason: "session affinity timeout out of range"},
		{name: "addresses filtered, everything-range drops the firewall", sp: good(func(sp *servicemodel.ServicePort) {
			sp.LoadBalancerVIPs = []netip.Addr{netip.MustParseAddr("192.0.2.1"), {}}
			sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("10.1.2.3/16"), netip.MustParsePrefix("0.0.0.0/0")}
			sp.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: 30 * time.Second}
		}), want: &Port{Proto: "udp", LBVIPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, AffinitySeconds: 30},
			dropped: []string{"load balancer IP invalid or of another family", "source range invalid or of another family"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dropped []string
			got, reason := Check(tc.sp, false, func(r string) { dropped = append(dropped, r) })
			if tc.want != nil {
				tc.want.SP = tc.sp
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("Port (-want +got):\n%s", diff)
			}
			if reason != tc.reason {
				t.Errorf("reason = %q, want %q", reason, tc.reason)
			}
			if diff := cmp.Diff(tc.dropped, dropped); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
		})
	}
}

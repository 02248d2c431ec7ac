package endpoints

// One test per row of the upstream behaviour table (core.md §1.C and §1.D)
// that belongs to this package, plus this package's own improvements.

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

// slice builds slice name of service ns/svc with the given ports and
// endpoints.
func slice(ns, svc, name string, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels:    map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func tcpPort(name string, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(v1.ProtocolTCP)}
}

func ports(p ...discovery.EndpointPort) []discovery.EndpointPort { return p }

// skipCounter records OnSkip calls.
type skipCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *skipCounter) onSkip(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[reason]++
}

func (c *skipCounter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		return map[string]int{}
	}
	return c.counts
}

// C1: one address type per tracker.
func TestAddressTypes(t *testing.T) {
	v4 := slice("ns", "svc", "s", ports(tcpPort("", 80)), addr("10.0.0.1"))
	v6 := slice("ns", "svc", "s6", ports(tcpPort("", 80)), addr("fd00::1"))
	v6.AddressType = discovery.AddressTypeIPv6
	fqdn := slice("ns", "svc", "sf", ports(tcpPort("", 80)), addr("example.com"))
	fqdn.AddressType = discovery.AddressTypeFQDN
	bogus := slice("ns", "svc", "sb", ports(tcpPort("", 80)), addr("10.0.0.1"))
	bogus.AddressType = "IPv5"
	pn := portName("ns", "svc", "", v1.ProtocolTCP)
	tests := []struct {
		name      string
		family    v1.IPFamily
		slice     *discovery.EndpointSlice
		want      bool
		wantMap   map[servicemodel.PortName][]*Endpoint
		wantSkips map[string]int
	}{
		{"IPv4 slice, IPv4 tracker", "", v4, true, map[servicemodel.PortName][]*Endpoint{pn: {e("10.0.0.1:80", R|S, "")}}, map[string]int{}},
		{"IPv4 slice, explicit IPv4 tracker", v1.IPv4Protocol, v4, true, map[servicemodel.PortName][]*Endpoint{pn: {e("10.0.0.1:80", R|S, "")}}, map[string]int{}},
		{"IPv6 slice, IPv6 tracker", v1.IPv6Protocol, v6, true, map[servicemodel.PortName][]*Endpoint{pn: {e("[fd00::1]:80", R|S, "")}}, map[string]int{}},
		{"IPv6 slice, IPv4 tracker: another family, not bad input", "", v6, false, map[servicemodel.PortName][]*Endpoint{}, map[string]int{}},
		{"IPv4 slice, IPv6 tracker", v1.IPv6Protocol, v4, false, map[servicemodel.PortName][]*Endpoint{}, map[string]int{}},
		{"FQDN slice", "", fqdn, false, map[servicemodel.PortName][]*Endpoint{}, map[string]int{SkipAddressType: 1}},
		{"FQDN slice, IPv6 tracker", v1.IPv6Protocol, fqdn, false, map[servicemodel.PortName][]*Endpoint{}, map[string]int{SkipAddressType: 1}},
		{"unknown address type", "", bogus, false, map[servicemodel.PortName][]*Endpoint{}, map[string]int{SkipAddressType: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, tc.slice)
			var skips skipCounter
			tr := newTestTracker(t, Config{Family: tc.family, OnSkip: skips.onSkip})
			if got := tr.Update(nil, tc.slice); got != tc.want {
				t.Errorf("Update() = %v, want %v", got, tc.want)
			}
			m, _ := checkout(t, tr)
			if diff := cmp.Diff(tc.wantMap, contents(m), cmpOpts); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSkips, skips.get()); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			if got := tr.Update(tc.slice, nil); got != tc.want {
				t.Errorf("deleting: Update() = %v, want %v", got, tc.want)
			}
		})
	}
}

// C2: cache keys.
func TestSliceKeys(t *testing.T) {
	valid := func() *discovery.EndpointSlice {
		return slice("ns", "svc", "s", ports(tcpPort("", 80)), addr("10.0.0.1"))
	}
	noLabel := valid()
	noLabel.Labels = nil
	emptyLabel := valid()
	emptyLabel.Labels[discovery.LabelServiceName] = ""
	noNamespace := valid()
	noNamespace.Namespace = ""
	noName := valid()
	noName.Name = ""
	otherLabels := valid()
	otherLabels.Labels = map[string]string{"app": "svc"}
	tests := []struct {
		name  string
		slice *discovery.EndpointSlice
		want  bool
		skips map[string]int
	}{
		{"valid", valid(), true, map[string]int{}},
		{"no labels", noLabel, false, map[string]int{SkipNoServiceName: 1}},
		{"empty service-name label", emptyLabel, false, map[string]int{SkipNoServiceName: 1}},
		{"other labels only", otherLabels, false, map[string]int{SkipNoServiceName: 1}},
		{"no namespace", noNamespace, false, map[string]int{SkipNoName: 1}},
		{"no name", noName, false, map[string]int{SkipNoName: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, tc.slice)
			var skips skipCounter
			tr := newTestTracker(t, Config{OnSkip: skips.onSkip})
			if got := tr.Update(nil, tc.slice); got != tc.want {
				t.Errorf("Update() = %v, want %v", got, tc.want)
			}
			if diff := cmp.Diff(tc.skips, skips.get()); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			m, _ := checkout(t, tr)
			if tc.want {
				if got := m.Service(nsn("ns", "svc")); got == nil {
					t.Errorf("service ns/svc missing")
				}
			} else if m.Len() != 0 {
				t.Errorf("Map has %d services, want none", m.Len())
			}
		})
	}
}

// Not upstream: a slice is tracked by namespace and name, so one whose
// service label changes moves, and one that loses the label is dropped,
// rather than lingering under the old service.
func TestServiceLabelChange(t *testing.T) {
	a := slice("ns", "a", "s", ports(udpPort("", 53)), addr("10.0.0.1"))
	b := a.DeepCopy()
	b.Labels[discovery.LabelServiceName] = "b"
	unlabeled := a.DeepCopy()
	unlabeled.Labels = nil
	guard(t, a, b, unlabeled)
	pnA, pnB := portName("ns", "a", "", v1.ProtocolUDP), portName("ns", "b", "", v1.ProtocolUDP)
	ep := e("10.0.0.1:53", R|S, "")

	tr := newTestTracker(t, Config{})
	tr.Update(nil, a)
	checkout(t, tr)

	if !tr.Update(a, b) {
		t.Errorf("moving the slice to another service reported no change")
	}
	m, ch := checkout(t, tr)
	if diff := cmp.Diff(map[servicemodel.PortName][]*Endpoint{pnB: {ep}}, contents(m), cmpOpts); diff != "" {
		t.Errorf("after the move (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sets.New(nsn("ns", "a"), nsn("ns", "b")), ch.Services); diff != "" {
		t.Errorf("changed services (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]StaleEndpoint{{Port: pnA, Addr: ep.Addr}}, ch.Stale, cmpOpts); diff != "" {
		t.Errorf("stale (-want +got):\n%s", diff)
	}

	if !tr.Update(b, unlabeled) {
		t.Errorf("dropping the service label reported no change")
	}
	m, _ = checkout(t, tr)
	if m.Len() != 0 {
		t.Errorf("Map has %d services after the label was removed, want none", m.Len())
	}
	if diff := cmp.Diff(clearedState{}, stateOf(tr)); diff != "" {
		t.Errorf("tracker not cleared (-want +got):\n%s", diff)
	}
}

// C5: ports.
func TestPorts(t *testing.T) {
	svc := nsn("ns", "svc")
	tests := []struct {
		name  string
		ports []discovery.EndpointPort
		want  map[servicemodel.PortName][]*Endpoint
		skips map[string]int
	}{{
		name:  "nil name is skipped",
		ports: ports(discovery.EndpointPort{Port: ptr.To[int32](80), Protocol: ptr.To(v1.ProtocolTCP)}),
		want:  map[servicemodel.PortName][]*Endpoint{},
		skips: map[string]int{SkipPortName: 1},
	}, {
		name:  "empty name is an unnamed port",
		ports: ports(tcpPort("", 80)),
		want:  map[servicemodel.PortName][]*Endpoint{portName("ns", "svc", "", v1.ProtocolTCP): {e("10.0.0.1:80", R|S, "")}},
		skips: map[string]int{},
	}, {
		name:  "nil port number is skipped",
		ports: ports(discovery.EndpointPort{Name: ptr.To("p"), Protocol: ptr.To(v1.ProtocolTCP)}),
		want:  map[servicemodel.PortName][]*Endpoint{},
		skips: map[string]int{SkipPortNumber: 1},
	}, {
		name:  "port 0, negative and above 65535 are skipped",
		ports: ports(tcpPort("a", 0), tcpPort("b", -1), tcpPort("c", 65536)),
		want:  map[servicemodel.PortName][]*Endpoint{},
		skips: map[string]int{SkipPortNumber: 3},
	}, {
		name:  "1 and 65535 are kept",
		ports: ports(tcpPort("a", 1), tcpPort("b", 65535)),
		want: map[servicemodel.PortName][]*Endpoint{
			portName("ns", "svc", "a", v1.ProtocolTCP): {e("10.0.0.1:1", R|S, "")},
			portName("ns", "svc", "b", v1.ProtocolTCP): {e("10.0.0.1:65535", R|S, "")},
		},
		skips: map[string]int{},
	}, {
		// Upstream panics; the API server defaults a missing protocol to TCP.
		name:  "nil protocol is TCP",
		ports: ports(discovery.EndpointPort{Name: ptr.To("p"), Port: ptr.To[int32](80)}),
		want:  map[servicemodel.PortName][]*Endpoint{portName("ns", "svc", "p", v1.ProtocolTCP): {e("10.0.0.1:80", R|S, "")}},
		skips: map[string]int{},
	}, {
		name:  "unknown protocol is skipped",
		ports: ports(discovery.EndpointPort{Name: ptr.To("p"), Port: ptr.To[int32](80), Protocol: ptr.To(v1.Protocol("ICMP"))}),
		want:  map[servicemodel.PortName][]*Endpoint{},
		skips: map[string]int{SkipProtocol: 1},
	}, {
		name: "protocol is part of the port name",
		ports: ports(tcpPort("dns", 53), udpPort("dns", 53),
			discovery.EndpointPort{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(v1.ProtocolSCTP)}),
		want: map[servicemodel.PortName][]*Endpoint{
			portName("ns", "svc", "dns", v1.ProtocolTCP):  {e("10.0.0.1:53", R|S, "")},
			portName("ns", "svc", "dns", v1.ProtocolUDP):  {e("10.0.0.1:53", R|S, "")},
			portName("ns", "svc", "dns", v1.ProtocolSCTP): {e("10.0.0.1:53", R|S, "")},
		},
		skips: map[string]int{},
	}, {
		name:  "two entries with one name and protocol feed one port",
		ports: ports(tcpPort("p", 8080), tcpPort("p", 80)),
		want: map[servicemodel.PortName][]*Endpoint{
			portName("ns", "svc", "p", v1.ProtocolTCP): {e("10.0.0.1:80", R|S, ""), e("10.0.0.1:8080", R|S, "")},
		},
		skips: map[string]int{},
	}, {
		name:  "bad ports do not stop good ones",
		ports: ports(tcpPort("bad", 0), tcpPort("good", 80)),
		want:  map[servicemodel.PortName][]*Endpoint{portName("ns", "svc", "good", v1.ProtocolTCP): {e("10.0.0.1:80", R|S, "")}},
		skips: map[string]int{SkipPortNumber: 1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := slice(svc.Namespace, svc.Name, "s", tc.ports, addr("10.0.0.1"))
			guard(t, s)
			var skips skipCounter
			tr := newTestTracker(t, Config{OnSkip: skips.onSkip})
			tr.Update(nil, s)
			m, _ := checkout(t, tr)
			if diff := cmp.Diff(tc.want, contents(m), cmpOpts); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skips, skips.get()); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
		})
	}
}

// C6: addresses.
func TestAddresses(t *testing.T) {
	tests := []struct {
		name   string
		family v1.IPFamily
		ep     discovery.Endpoint
		want   string // "" when skipped
		str    string
		skips  map[string]int
	}{
		{name: "plain IPv4", ep: addr("10.0.0.1"), want: "10.0.0.1:80", str: "10.0.0.1:80", skips: map[string]int{}},
		{name: "leading zeros are decimal", ep: addr("010.001.000.001"), want: "10.1.0.1:80", str: "10.1.0.1:80", skips: map[string]int{}},
		{name: "IPv4-mapped IPv6 is IPv4", ep: addr("::ffff:10.0.0.1"), want: "10.0.0.1:80", str: "10.0.0.1:80", skips: map[string]int{}},
		{name: "only the first address counts", ep: discovery.Endpoint{Addresses: []string{"10.0.0.1", "10.0.0.2"}}, want: "10.0.0.1:80", str: "10.0.0.1:80", skips: map[string]int{}},
		{name: "a bad second address is ignored", ep: discovery.Endpoint{Addresses: []string{"10.0.0.1", "bogus"}}, want: "10.0.0.1:80", str: "10.0.0.1:80", skips: map[string]int{}},
		{name: "no addresses", ep: discovery.Endpoint{}, skips: map[string]int{SkipNoAddress: 1}},
		{name: "invalid", ep: addr("10.0.0.256"), skips: map[string]int{SkipInvalidAddress: 1}},
		{name: "empty string", ep: addr(""), skips: map[string]int{SkipInvalidAddress: 1}},
		{name: "hostname", ep: addr("pod.example.com"), skips: map[string]int{SkipInvalidAddress: 1}},
		{name: "CIDR", ep: addr("10.0.0.1/32"), skips: map[string]int{SkipInvalidAddress: 1}},
		{name: "IPv6 zone", family: v1.IPv6Protocol, ep: addr("fe80::1%eth0"), skips: map[string]int{SkipInvalidAddress: 1}},
		{name: "IPv6 in an IPv4 slice", ep: addr("fd00::1"), skips: map[string]int{SkipWrongFamily: 1}},
		{name: "IPv4 in an IPv6 slice", family: v1.IPv6Protocol, ep: addr("10.0.0.1"), skips: map[string]int{SkipWrongFamily: 1}},
		{name: "IPv4-mapped in an IPv6 slice is IPv4", family: v1.IPv6Protocol, ep: addr("::ffff:10.0.0.1"), skips: map[string]int{SkipWrongFamily: 1}},
		{name: "IPv6 is normalized", family: v1.IPv6Protocol, ep: addr("FD00:0:0::0001"), want: "[fd00::1]:80", str: "[fd00::1]:80", skips: map[string]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := slice("ns", "svc", "s", ports(tcpPort("", 80)), tc.ep)
			if tc.family == v1.IPv6Protocol {
				s.AddressType = discovery.AddressTypeIPv6
			}
			guard(t, s)
			var skips skipCounter
			tr := newTestTracker(t, Config{Family: tc.family, OnSkip: skips.onSkip})
			tr.Update(nil, s)
			m, _ := checkout(t, tr)
			want := map[servicemodel.PortName][]*Endpoint{}
			if tc.want != "" {
				want[portName("ns", "svc", "", v1.ProtocolTCP)] = []*Endpoint{e(tc.want, R|S, "")}
			}
			got := contents(m)
			if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skips, skips.get()); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			for _, list := range got {
				if s := list[0].String(); s != tc.str {
					t.Errorf("String() = %q, want %q", s, tc.str)
				}
			}
		})
	}
}

// C7: conditions.
func TestConditions(t *testing.T) {
	tf := []*bool{nil, ptr.To(true), ptr.To(false)}
	show := func(b *bool) string {
		if b == nil {
			return "nil"
		}
		return fmt.Sprint(*b)
	}
	for _, ready := range tf {
		for _, serving := range tf {
			for _, terminating := range tf {
				c := discovery.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}
				name := fmt.Sprintf("ready=%s,serving=%s,terminating=%s", show(ready), show(serving), show(terminating))
				t.Run(name, func(t *testing.T) {
					s := slice("ns", "svc", "s", ports(tcpPort("", 80)), discovery.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: c})
					guard(t, s)
					tr := newTestTracker(t, Config{})
					tr.Update(nil, s)
					m, _ := checkout(t, tr)
					want := affinity.EndpointInfo{
						Ready:       ready == nil || *ready,
						Serving:     serving == nil || *serving,
						Terminating: terminating != nil && *terminating,
					}
					got := m.Get(portName("ns", "svc", "", v1.ProtocolTCP))
					if len(got) != 1 {
						t.Fatalf("got %d endpoints, want 1", len(got))
					}
					if diff := cmp.Diff(want, got[0].EndpointInfo); diff != "" {
						t.Errorf("conditions (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}

// C8: locality comes from nodeName alone; C9: zone and hints.
func TestLocalityZoneHints(t *testing.T) {
	tests := []struct {
		name     string
		nodeName string
		ep       discovery.Endpoint
		want     affinity.EndpointInfo
	}{{
		name:     "matching node is local",
		nodeName: "node-a",
		ep:       discovery.Endpoint{NodeName: ptr.To("node-a")},
		want:     affinity.EndpointInfo{Ready: true, Serving: true, Local: true, NodeName: "node-a"},
	}, {
		name:     "other node",
		nodeName: "node-a",
		ep:       discovery.Endpoint{NodeName: ptr.To("node-b")},
		want:     affinity.EndpointInfo{Ready: true, Serving: true, NodeName: "node-b"},
	}, {
		name:     "no node name",
		nodeName: "node-a",
		ep:       discovery.Endpoint{},
		want:     affinity.EndpointInfo{Ready: true, Serving: true},
	}, {
		name: "empty node name never matches an unset tracker node",
		ep:   discovery.Endpoint{NodeName: ptr.To("")},
		want: affinity.EndpointInfo{Ready: true, Serving: true},
	}, {
		name: "tracker without a node name has no local endpoints",
		ep:   discovery.Endpoint{NodeName: ptr.To("node-a")},
		want: affinity.EndpointInfo{Ready: true, Serving: true, NodeName: "node-a"},
	}, {
		name: "zone",
		ep:   discovery.Endpoint{Zone: ptr.To("zone-a")},
		want: affinity.EndpointInfo{Ready: true, Serving: true, Zone: "zone-a"},
	}, {
		name: "hints sorted and de-duplicated",
		ep: discovery.Endpoint{Hints: &discovery.EndpointHints{
			ForZones: []discovery.ForZone{{Name: "zone-c"}, {Name: "zone-a"}, {Name: "zone-c"}},
			ForNodes: []discovery.ForNode{{Name: "node-b"}, {Name: "node-a"}, {Name: "node-a"}},
		}},
		want: affinity.EndpointInfo{Ready: true, Serving: true, ZoneHints: []string{"zone-a", "zone-c"}, NodeHints: []string{"node-a", "node-b"}},
	}, {
		name: "empty hints are nil",
		ep:   discovery.Endpoint{Hints: &discovery.EndpointHints{ForZones: []discovery.ForZone{}}},
		want: affinity.EndpointInfo{Ready: true, Serving: true},
	}, {
		name: "node hints without zone hints",
		ep:   discovery.Endpoint{Hints: &discovery.EndpointHints{ForNodes: []discovery.ForNode{{Name: "node-a"}}}},
		want: affinity.EndpointInfo{Ready: true, Serving: true, NodeHints: []string{"node-a"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.ep
			ep.Addresses = []string{"10.0.0.1"}
			s := slice("ns", "svc", "s", ports(tcpPort("", 80)), ep)
			guard(t, s)
			tr := newTestTracker(t, Config{NodeName: tc.nodeName})
			tr.Update(nil, s)
			m, _ := checkout(t, tr)
			got := m.Get(portName("ns", "svc", "", v1.ProtocolTCP))
			if len(got) != 1 {
				t.Fatalf("got %d endpoints, want 1", len(got))
			}
			if diff := cmp.Diff(tc.want, got[0].EndpointInfo); diff != "" {
				t.Errorf("endpoint info (-want +got):\n%s", diff)
			}
		})
	}
}

// C10: duplicates. The winner is a function of content: the same set of
// slices gives the same result whatever their names or order.
func TestDuplicates(t *testing.T) {
	cond := func(ready, serving, terminating bool) discovery.EndpointConditions {
		return discovery.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)}
	}
	at := func(c discovery.EndpointConditions, node string) discovery.Endpoint {
		ep := discovery.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: c}
		if node != "" {
			ep.NodeName = ptr.To(node)
		}
		return ep
	}
	pn := portName("ns", "svc", "", v1.ProtocolTCP)
	tests := []struct {
		name string
		eps  []discovery.Endpoint
		want *Endpoint
	}{
		{"non-terminating beats terminating", []discovery.Endpoint{at(cond(false, true, true), ""), at(cond(false, false, false), "")}, e("10.0.0.1:80", 0, "")},
		{"ready beats not ready", []discovery.Endpoint{at(cond(false, false, false), ""), at(cond(true, true, false), "")}, e("10.0.0.1:80", R|S, "")},
		{"serving terminating beats not serving terminating", []discovery.Endpoint{at(cond(false, false, true), ""), at(cond(false, true, true), "")}, e("10.0.0.1:80", S|T, "")},
		{"local beats remote", []discovery.Endpoint{at(cond(true, true, false), "node-b"), at(cond(true, true, false), "node-a")}, e("10.0.0.1:80", R|S|L, "node-a")},
		{"then node name", []discovery.Endpoint{at(cond(true, true, false), "node-c"), at(cond(true, true, false), "node-b")}, e("10.0.0.1:80", R|S, "node-b")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := map[servicemodel.PortName][]*Endpoint{pn: {tc.want}}
			// Every placement: one slice in both orders, or two slices with
			// either name holding either endpoint.
			layouts := map[string][]*discovery.EndpointSlice{
				"one slice":          {slice("ns", "svc", "a", ports(tcpPort("", 80)), tc.eps[0], tc.eps[1])},
				"one slice reversed": {slice("ns", "svc", "a", ports(tcpPort("", 80)), tc.eps[1], tc.eps[0])},
				"two slices":         {slice("ns", "svc", "a", ports(tcpPort("", 80)), tc.eps[0]), slice("ns", "svc", "b", ports(tcpPort("", 80)), tc.eps[1])},
				"two slices swapped": {slice("ns", "svc", "a", ports(tcpPort("", 80)), tc.eps[1]), slice("ns", "svc", "b", ports(tcpPort("", 80)), tc.eps[0])},
			}
			for layout, slices := range layouts {
				guard(t, slices...)
				for _, reverse := range []bool{false, true} {
					tr := newTestTracker(t, Config{NodeName: "node-a"})
					for i := range slices {
						s := slices[i]
						if reverse {
							s = slices[len(slices)-1-i]
						}
						tr.Update(nil, s)
					}
					m, _ := checkout(t, tr)
					if diff := cmp.Diff(want, contents(m), cmpOpts); diff != "" {
						t.Errorf("%s (reverse=%v) (-want +got):\n%s", layout, reverse, diff)
					}
				}
			}
		})
	}
}

// C11: numeric order, by address then port.
func TestSortOrder(t *testing.T) {
	s := slice("ns", "svc", "s", ports(tcpPort("", 80), tcpPort("", 8080), tcpPort("", 9)),
		addr("10.0.0.11"), addr("10.0.0.2"), addr("10.0.0.1"), addr("9.0.0.1"))
	guard(t, s)
	tr := newTestTracker(t, Config{})
	tr.Update(nil, s)
	m, _ := checkout(t, tr)
	var got []string
	for _, ep := range m.Get(portName("ns", "svc", "", v1.ProtocolTCP)) {
		got = append(got, ep.String())
	}
	want := []string{
		"9.0.0.1:9", "9.0.0.1:80", "9.0.0.1:8080",
		"10.0.0.1:9", "10.0.0.1:80", "10.0.0.1:8080",
		"10.0.0.2:9", "10.0.0.2:80", "10.0.0.2:8080",
		"10.0.0.11:9", "10.0.0.11:80", "10.0.0.11:8080",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// C3, C4, C12 with this package's semantic change detection: the return
// value of each Update in a sequence, and what is pending after it.
func TestUpdateReturnValues(t *testing.T) {
	base := slice("ns", "svc", "s1", ports(udpPort("dns", 53)), addr("10.0.0.1"), addr("10.0.0.2"))
	reordered := slice("ns", "svc", "s1", ports(udpPort("dns", 53)), addr("10.0.0.2"), addr("10.0.0.1"))
	touched := base.DeepCopy()
	touched.ResourceVersion = "42"
	touched.Annotations = map[string]string{"a": "b"}
	touched.Generation = 7
	grown := slice("ns", "svc", "s1", ports(udpPort("dns", 53)), addr("10.0.0.1"), addr("10.0.0.2"), addr("10.0.0.3"))
	// s2 repeats an endpoint of s1 with the same content: it adds nothing.
	s2 := slice("ns", "svc", "s2", ports(udpPort("dns", 53)), addr("10.0.0.1"))
	moved1 := slice("ns", "svc", "s1", ports(udpPort("dns", 53)), addr("10.0.0.2"))
	empty := slice("ns", "svc", "s3", ports(udpPort("dns", 53)))
	other := slice("ns", "other", "o1", ports(udpPort("dns", 53)), addr("10.0.0.9"))

	type step struct {
		old, new    *discovery.EndpointSlice
		checkout    bool
		want        bool
		wantPending int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"add", []step{{new: base, want: true, wantPending: 1}}},
		{"add twice", []step{{new: base, want: true, wantPending: 1}, {new: base, want: false, wantPending: 1}}},
		{"both nil", []step{{want: false}}},
		{"delete unknown", []step{{old: base, want: false}}},
		{"add then delete before checkout", []step{{new: base, want: true, wantPending: 1}, {old: base, want: true, wantPending: 0}}},
		{"change then revert before checkout", []step{
			{new: base, want: true, wantPending: 1}, {checkout: true},
			{old: base, new: grown, want: true, wantPending: 1},
			{old: grown, new: base, want: true, wantPending: 0},
		}},
		{"metadata only", []step{{new: base, want: true, wantPending: 1}, {checkout: true}, {old: base, new: touched, want: false}}},
		{"reordered endpoints", []step{{new: base, want: true, wantPending: 1}, {checkout: true}, {old: base, new: reordered, want: false}}},
		{"real change", []step{{new: base, want: true, wantPending: 1}, {checkout: true}, {old: base, new: grown, want: true, wantPending: 1}}},
		{"an endpoint moves between slices", []step{
			{new: base, want: true, wantPending: 1}, {checkout: true},
			{new: s2, want: false}, {old: base, new: moved1, want: false},
		}},
		{"a slice without endpoints", []step{{new: empty, want: false}, {old: empty, want: false}}},
		{"an untrackable update of an unknown slice", []step{{new: &discovery.EndpointSlice{}, want: false}}},
		{"changes to two services", []step{{new: base, want: true, wantPending: 1}, {new: other, want: true, wantPending: 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestTracker(t, Config{})
			for i, st := range tc.steps {
				if st.checkout {
					checkout(t, tr)
					continue
				}
				if st.old != nil {
					guard(t, st.old)
				}
				if st.new != nil {
					guard(t, st.new)
				}
				if got := tr.Update(st.old, st.new); got != st.want {
					t.Errorf("step %d: Update() = %v, want %v", i, got, st.want)
				}
				if got := tr.Pending(); got != st.wantPending {
					t.Errorf("step %d: Pending() = %d, want %d", i, got, st.wantPending)
				}
			}
			checkout(t, tr)
		})
	}
}

// Stale endpoints: exactly the UDP and SCTP endpoints that stopped serving.
func TestStale(t *testing.T) {
	sctpPort := func(name string, port int32) discovery.EndpointPort {
		return discovery.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(v1.ProtocolSCTP)}
	}
	notServing := discovery.Endpoint{Addresses: []string{"10.0.0.2"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false)}}
	terminating := discovery.Endpoint{Addresses: []string{"10.0.0.2"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}}
	all := ports(udpPort("u", 53), sctpPort("s", 36412), tcpPort("t", 80))
	before := slice("ns", "svc", "s1", all, addr("10.0.0.1"), addr("10.0.0.2"))
	udp := portName("ns", "svc", "u", v1.ProtocolUDP)
	sctp := portName("ns", "svc", "s", v1.ProtocolSCTP)
	stale := func(pn servicemodel.PortName, a string) StaleEndpoint {
		return StaleEndpoint{Port: pn, Addr: netip.MustParseAddrPort(a)}
	}
	tests := []struct {
		name  string
		after *discovery.EndpointSlice // nil: deleted
		want  []StaleEndpoint
	}{
		{"endpoint removed", slice("ns", "svc", "s1", all, addr("10.0.0.1")), []StaleEndpoint{stale(sctp, "10.0.0.2:36412"), stale(udp, "10.0.0.2:53")}},
		{"endpoint stops serving", slice("ns", "svc", "s1", all, addr("10.0.0.1"), notServing), []StaleEndpoint{stale(sctp, "10.0.0.2:36412"), stale(udp, "10.0.0.2:53")}},
		{"endpoint terminating but serving", slice("ns", "svc", "s1", all, addr("10.0.0.1"), terminating), nil},
		{"slice deleted", nil, []StaleEndpoint{
			stale(sctp, "10.0.0.1:36412"), stale(sctp, "10.0.0.2:36412"),
			stale(udp, "10.0.0.1:53"), stale(udp, "10.0.0.2:53"),
		}},
		{"port renumbered", slice("ns", "svc", "s1", ports(udpPort("u", 5353), sctpPort("s", 36412), tcpPort("t", 80)), addr("10.0.0.1"), addr("10.0.0.2")),
			[]StaleEndpoint{stale(udp, "10.0.0.1:53"), stale(udp, "10.0.0.2:53")}},
		{"endpoint added", slice("ns", "svc", "s1", all, addr("10.0.0.1"), addr("10.0.0.2"), addr("10.0.0.3")), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, before)
			if tc.after != nil {
				guard(t, tc.after)
			}
			tr := newTestTracker(t, Config{})
			tr.Update(nil, before)
			checkout(t, tr)
			if tc.after == nil {
				tr.Update(before, nil)
			} else {
				tr.Update(before, tc.after)
			}
			_, ch := checkout(t, tr)
			if diff := cmp.Diff(tc.want, ch.Stale, cmpOpts); diff != "" {
				t.Errorf("stale (-want +got):\n%s", diff)
			}
		})
	}

	// Stopping to serve was already reported; removing the endpoint later
	// reports nothing more.
	tr := newTestTracker(t, Config{})
	tr.Update(nil, before)
	checkout(t, tr)
	mid := slice("ns", "svc", "s1", all, addr("10.0.0.1"), notServing)
	tr.Update(before, mid)
	checkout(t, tr)
	tr.Update(mid, slice("ns", "svc", "s1", all, addr("10.0.0.1")))
	if _, ch := checkout(t, tr); ch.Stale != nil {
		t.Errorf("removing a not-serving endpoint reported stale %v", ch.Stale)
	}
}

// D1, D3, C15: LocalReady of changed services, including one that lost
// every endpoint.
func TestChangesLocalReady(t *testing.T) {
	s := slice("ns", "svc", "s", ports(tcpPort("a", 80), tcpPort("b", 443)), localAddr("10.0.0.1"), localAddr("10.0.0.2"), addr("10.0.0.3"))
	guard(t, s)
	tr := newTestTracker(t, Config{NodeName: testHostname})
	tr.Update(nil, s)
	_, ch := checkout(t, tr)
	if diff := cmp.Diff(map[types.NamespacedName]int{nsn("ns", "svc"): 2}, ch.LocalReady); diff != "" {
		t.Errorf("LocalReady (-want +got):\n%s", diff)
	}
	tr.Update(s, nil)
	m, ch := checkout(t, tr)
	if diff := cmp.Diff(map[types.NamespacedName]int{nsn("ns", "svc"): 0}, ch.LocalReady); diff != "" {
		t.Errorf("LocalReady after delete (-want +got):\n%s", diff)
	}
	if m.Service(nsn("ns", "svc")) != nil {
		t.Errorf("service still in the Map after its only slice was deleted")
	}
}

// Bad input never panics, the good rest is kept, and everything skipped is
// counted.
func TestBadInput(t *testing.T) {
	huge := slice("ns", "huge", "h", ports(udpPort("", 53)))
	for i := range 10000 {
		// 2500 distinct addresses, each four times.
		huge.Endpoints = append(huge.Endpoints, addr(fmt.Sprintf("10.%d.%d.1", (i%2500)/250, (i%2500)%250)))
	}
	garbage := slice("ns", "garbage", "g",
		ports(
			discovery.EndpointPort{},
			discovery.EndpointPort{Name: ptr.To("x")},
			discovery.EndpointPort{Name: ptr.To("y"), Port: ptr.To[int32](-5)},
			discovery.EndpointPort{Name: ptr.To("z"), Port: ptr.To[int32](1 << 20)},
			discovery.EndpointPort{Name: ptr.To("p"), Port: ptr.To[int32](80), Protocol: ptr.To(v1.Protocol(""))},
			discovery.EndpointPort{Name: ptr.To("ok"), Port: ptr.To[int32](80)},
		),
		discovery.Endpoint{},
		discovery.Endpoint{Addresses: []string{}},
		addr(strings.Repeat("9", 100000)),
		addr("fd00::1"),
		addr("10.0.0.1"),
		addr("10.0.0.1"),
		discovery.Endpoint{Addresses: []string{"10.0.0.2"}, Hints: &discovery.EndpointHints{}, NodeName: ptr.To("")},
	)
	unlabeled := slice("ns", "", "u", ports(tcpPort("", 80)), addr("10.0.0.1"))
	slices := []*discovery.EndpointSlice{huge, garbage, unlabeled}
	guard(t, slices...)

	var skips skipCounter
	tr := newTestTracker(t, Config{OnSkip: skips.onSkip})
	for _, s := range slices {
		tr.Update(nil, s)
	}
	m, _ := checkout(t, tr)
	if got := len(m.Get(portName("ns", "huge", "", v1.ProtocolUDP))); got != 2500 {
		t.Errorf("huge slice: %d endpoints, want 2500 distinct", got)
	}
	want := map[servicemodel.PortName][]*Endpoint{
		portName("ns", "garbage", "ok", v1.ProtocolTCP): {e("10.0.0.1:80", R|S, ""), e("10.0.0.2:80", R|S, "")},
	}
	if diff := cmp.Diff(want, serviceContents(m, nsn("ns", "garbage")), cmpOpts); diff != "" {
		t.Errorf("garbage slice (-want +got):\n%s", diff)
	}
	wantSkips := map[string]int{
		SkipPortName:       1,
		SkipPortNumber:     3,
		SkipProtocol:       1,
		SkipNoAddress:      2,
		SkipInvalidAddress: 1,
		SkipWrongFamily:    1,
		SkipNoServiceName:  1,
	}
	if diff := cmp.Diff(wantSkips, skips.get()); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
}

// The Tracker is safe for concurrent use, and its final state depends only
// on the final slices.
func TestConcurrency(t *testing.T) {
	const writers, rounds = 4, 50
	final := make([][]*discovery.EndpointSlice, writers)
	var wg sync.WaitGroup
	tr := newTestTracker(t, Config{NodeName: "node-0"})
	stop := make(chan struct{})
	var readerWG sync.WaitGroup
	readerWG.Add(1)
	go func() {
		defer readerWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			m, _ := tr.Checkout()
			for _, se := range m.Services() {
				for _, list := range se.Ports {
					for _, ep := range list {
						_ = ep.String()
					}
				}
			}
			_ = tr.Pending()
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev []*discovery.EndpointSlice
			for r := range rounds {
				var cur []*discovery.EndpointSlice
				for s := range 3 {
					var eps []discovery.Endpoint
					for i := range (r+s)%5 + 1 {
						eps = append(eps, discovery.Endpoint{
							Addresses: []string{fmt.Sprintf("10.%d.%d.%d", w, s, i+1)},
							NodeName:  ptr.To(fmt.Sprintf("node-%d", (i+r)%2)),
						})
					}
					cur = append(cur, slice("ns", fmt.Sprintf("svc-%d", w%2), fmt.Sprintf("w%d-s%d", w, s), ports(udpPort("", 53)), eps...))
				}
				for s := range cur {
					var old *discovery.EndpointSlice
					if prev != nil {
						old = prev[s]
					}
					if r%7 == 6 {
						tr.Update(old, nil)
						cur[s] = nil
						continue
					}
					if old == nil {
						tr.Update(nil, cur[s])
					} else {
						tr.Update(old, cur[s])
					}
				}
				prev = cur
				if r%7 == 6 {
					prev = nil
				}
			}
			final[w] = prev
		}()
	}
	wg.Wait()
	close(stop)
	readerWG.Wait()

	got, _ := checkout(t, tr)
	fresh := newTestTracker(t, Config{NodeName: "node-0"})
	for _, list := range final {
		for _, s := range list {
			if s != nil {
				fresh.Update(nil, s)
			}
		}
	}
	want, _ := checkout(t, fresh)
	if diff := cmp.Diff(contents(want), contents(got), cmpOpts); diff != "" {
		t.Errorf("concurrent tracker differs from one fed the final slices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(localReady(want), localReady(got)); diff != "" {
		t.Errorf("local ready (-want +got):\n%s", diff)
	}
}

// Snapshots are immutable: later changes never show through an earlier Map.
func TestSnapshotsAreImmutable(t *testing.T) {
	s1 := slice("ns", "svc", "s1", ports(tcpPort("", 80)), addr("10.0.0.1"))
	s1b := slice("ns", "svc", "s1", ports(tcpPort("", 80)), addr("10.0.0.1"), addr("10.0.0.2"))
	guard(t, s1, s1b)
	tr := newTestTracker(t, Config{})
	tr.Update(nil, s1)
	first, _ := checkout(t, tr)
	frozen := contents(first)
	tr.Update(s1, s1b)
	tr.Update(nil, slice("ns", "other", "o", ports(tcpPort("", 80)), addr("10.0.0.3")))
	second, _ := checkout(t, tr)
	tr.Update(s1b, nil)
	checkout(t, tr)
	if diff := cmp.Diff(frozen, contents(first), cmpOpts); diff != "" {
		t.Errorf("first snapshot changed (-before +after):\n%s", diff)
	}
	if got := second.Len(); got != 2 {
		t.Errorf("second snapshot has %d services, want 2", got)
	}
}

func TestNewMap(t *testing.T) {
	pn := portName("ns", "svc", "", v1.ProtocolTCP)
	pn2 := portName("ns", "svc", "empty", v1.ProtocolTCP)
	terminating := e("10.0.0.1:80", S|T, "")
	ready := e("10.0.0.1:80", R|S, "")
	in := map[servicemodel.PortName][]*Endpoint{
		pn:  {e("10.0.0.11:80", R|S, ""), terminating, nil, ready, e("10.0.0.2:80", 0, "")},
		pn2: {},
	}
	inCopy := map[servicemodel.PortName][]*Endpoint{pn: append([]*Endpoint(nil), in[pn]...), pn2: {}}
	m := NewMap(in)
	want := map[servicemodel.PortName][]*Endpoint{pn: {ready, e("10.0.0.2:80", 0, ""), e("10.0.0.11:80", R|S, "")}}
	if diff := cmp.Diff(want, contents(m), cmpOpts); diff != "" {
		t.Errorf("NewMap (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(inCopy, in, cmpOpts); diff != "" {
		t.Errorf("NewMap modified its input (-before +after):\n%s", diff)
	}
	if m.Len() != 1 || m.Get(pn2) != nil || m.Get(portName("ns", "nope", "", v1.ProtocolTCP)) != nil {
		t.Errorf("Len() = %d, want 1; empty and unknown ports must have no endpoints", m.Len())
	}
	var zero Map
	if zero.Len() != 0 || zero.Service(nsn("ns", "svc")) != nil || zero.LocalReadyEndpoints(nsn("ns", "svc")) != 0 {
		t.Errorf("zero Map is not empty")
	}
}

package dataplane_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

var addrCmp = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}, netip.AddrPort{})

type skip struct{ kind, reason string }

// skips records OnSkip calls.
type skips struct {
	mu  sync.Mutex
	got []skip
}

func (s *skips) add(kind, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, skip{kind, reason})
}

func (s *skips) take() []skip {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

// names returns the set's members sorted; nil for a nil set.
func names(s sets.Set[types.NamespacedName]) []types.NamespacedName {
	if s == nil {
		return nil
	}
	out := make([]types.NamespacedName, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

func dualStackService() *v1.Service {
	return dpt.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.ClusterIPs = []string{"172.30.0.41", "fd00:172:30::41"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
	})
}

func sliceOf(ns, svc string, num int, typ discovery.AddressType, ips ...string) *discovery.EndpointSlice {
	return dpt.MakeSlice(ns, svc, num, func(s *discovery.EndpointSlice) {
		s.AddressType = typ
		s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 80)}
		for _, ip := range ips {
			s.Endpoints = append(s.Endpoints, dpt.ReadyEndpoint(ip, dpt.NodeName))
		}
	})
}

func TestBuilderDualStack(t *testing.T) {
	var sk skips
	settings := dpt.DefaultSettings()
	settings.NodePortAddresses = prefixes("192.168.0.0/24", "2001:db8::/64")
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		NodeName: dpt.NodeName,
		Settings: settings,
		OnSkip:   sk.add,
	})
	b.UpdateNode(dpt.TestNode(func(n *v1.Node) {
		n.Labels = map[string]string{v1.LabelTopologyZone: "zone-a"}
		n.Status.Addresses = append([]v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "203.0.113.77"}}, n.Status.Addresses...)
	}))
	b.UpdateService(nil, dualStackService())
	b.UpdateEndpointSlice(nil, sliceOf("ns1", "svc1", 1, discovery.AddressTypeIPv4, "10.180.0.1"))
	b.UpdateEndpointSlice(nil, sliceOf("ns1", "svc1", 2, discovery.AddressTypeIPv6, "fd00:10:180::1"))
	out := b.Build()

	type view struct {
		Family    v1.IPFamily
		Node      dataplane.Node
		Settings  dataplane.Settings
		ClusterIP netip.Addr
		Endpoints []netip.AddrPort
		Changed   []types.NamespacedName
	}
	var got []view
	for i, st := range out.States {
		sp, _ := st.Services.Get(svc1)
		var eps []netip.AddrPort
		for _, e := range st.Endpoints.Get(svc1) {
			eps = append(eps, e.Addr)
		}
		var clusterIP netip.Addr
		if sp != nil {
			clusterIP = sp.ClusterIP
		}
		got = append(got, view{st.Family, st.Node, st.Settings, clusterIP, eps, names(out.Changes[i].Services.Services)})
	}
	v4settings, v6settings := settings, settings
	v4settings.LocalDetector.CIDRs, v4settings.NodePortAddresses = prefixes(dpt.ClusterCIDR), prefixes("192.168.0.0/24")
	v6settings.LocalDetector.CIDRs, v6settings.NodePortAddresses = prefixes(dpt.ClusterCIDRv6), prefixes("2001:db8::/64")
	want := []view{
		{
			Family: v1.IPv4Protocol,
			Node: dataplane.Node{Name: dpt.NodeName, Zone: "zone-a",
				IPs:      []netip.Addr{netip.MustParseAddr(dpt.NodeIP), netip.MustParseAddr(dpt.NodeIPAlt), netip.MustParseAddr("203.0.113.77")},
				PodCIDRs: prefixes(dpt.NodePodCIDR)},
			Settings:  v4settings,
			ClusterIP: netip.MustParseAddr("172.30.0.41"),
			Endpoints: dpt.AddrPorts("10.180.0.1:80"),
			Changed:   []types.NamespacedName{nn("ns1", "svc1")},
		},
		{
			Family: v1.IPv6Protocol,
			Node: dataplane.Node{Name: dpt.NodeName, Zone: "zone-a",
				IPs:      []netip.Addr{netip.MustParseAddr(dpt.NodeIPv6), netip.MustParseAddr(dpt.NodeIPv6Alt)},
				PodCIDRs: prefixes(dpt.NodePodCIDRv6)},
			Settings:  v6settings,
			ClusterIP: netip.MustParseAddr("fd00:172:30::41"),
			Endpoints: dpt.AddrPorts("[fd00:10:180::1]:80"),
			Changed:   []types.NamespacedName{nn("ns1", "svc1")},
		},
	}
	if d := cmp.Diff(want, got, addrCmp); d != "" {
		t.Errorf("States (-want +got):\n%s", d)
	}
	if out.States[0].Generation != 1 || out.States[1].Generation != 1 {
		t.Errorf("Generations = %d, %d, want 1, 1", out.States[0].Generation, out.States[1].Generation)
	}
	if got := sk.take(); got != nil {
		t.Errorf("unexpected skips %v", got)
	}
}

func TestBuilderSliceRouting(t *testing.T) {
	tests := []struct {
		name      string
		families  []v1.IPFamily
		slice     *discovery.EndpointSlice
		wantDue   bool
		wantSkips []skip
		// wantEndpoints per family, in Families order.
		wantEndpoints [][]netip.AddrPort
	}{
		{"IPv4 slice to the IPv4 tracker", []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol},
			sliceOf("ns1", "svc1", 1, discovery.AddressTypeIPv4, "10.180.0.1"), true, nil,
			[][]netip.AddrPort{nil, dpt.AddrPorts("10.180.0.1:80")}},
		{"IPv6 slice to the IPv6 tracker", []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
			sliceOf("ns1", "svc1", 1, discovery.AddressTypeIPv6, "fd00::1"), true, nil,
			[][]netip.AddrPort{nil, dpt.AddrPorts("[fd00::1]:80")}},
		{"IPv6 slice on an IPv4-only Builder is ignored", nil,
			sliceOf("ns1", "svc1", 1, discovery.AddressTypeIPv6, "fd00::1"), false, nil,
			[][]netip.AddrPort{nil}},
		{"FQDN slice is skipped", nil,
			sliceOf("ns1", "svc1", 1, discovery.AddressTypeFQDN, "example.com"), false,
			[]skip{{"EndpointSlice", endpoints.SkipAddressType}}, [][]netip.AddrPort{nil}},
		{"unknown address type is skipped", nil,
			sliceOf("ns1", "svc1", 1, "IPX", "1.2.3.4"), false,
			[]skip{{"EndpointSlice", endpoints.SkipAddressType}}, [][]netip.AddrPort{nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sk skips
			b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: tc.families, NodeName: dpt.NodeName, OnSkip: sk.add})
			if due := b.UpdateEndpointSlice(nil, tc.slice); due != tc.wantDue {
				t.Errorf("UpdateEndpointSlice = %v, want %v", due, tc.wantDue)
			}
			if d := cmp.Diff(tc.wantSkips, sk.take(), cmp.AllowUnexported(skip{})); d != "" {
				t.Errorf("skips (-want +got):\n%s", d)
			}
			var got [][]netip.AddrPort
			for _, st := range b.Build().States {
				var eps []netip.AddrPort
				for _, e := range st.Endpoints.Get(svc1) {
					eps = append(eps, e.Addr)
				}
				got = append(got, eps)
			}
			if d := cmp.Diff(tc.wantEndpoints, got, addrCmp); d != "" {
				t.Errorf("endpoints (-want +got):\n%s", d)
			}
		})
	}
}

// TestBuilderSliceMovesFamily covers an address-type change, which the API
// forbids but a buggy source might send.
func TestBuilderSliceMovesFamily(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, NodeName: dpt.NodeName})
	old := sliceOf("ns1", "svc1", 1, discovery.AddressTypeIPv4, "10.180.0.1")
	b.UpdateEndpointSlice(nil, old)
	b.Build()
	b.UpdateEndpointSlice(old, sliceOf("ns1", "svc1", 1, discovery.AddressTypeIPv6, "fd00::1"))
	out := b.Build()
	if n := len(out.States[0].Endpoints.Get(svc1)); n != 0 {
		t.Errorf("IPv4 endpoints = %d, want 0", n)
	}
	if n := len(out.States[1].Endpoints.Get(svc1)); n != 1 {
		t.Errorf("IPv6 endpoints = %d, want 1", n)
	}
}

func TestBuilderNode(t *testing.T) {
	tests := []struct {
		name      string
		node      *v1.Node
		want      dataplane.Node
		wantDue   bool
		wantSkips []skip
	}{
		{
			name: "internal before external, deduplicated",
			node: dpt.MakeNode(dpt.NodeName, func(n *v1.Node) {
				n.Status.Addresses = []v1.NodeAddress{
					{Type: v1.NodeExternalIP, Address: "203.0.113.9"},
					{Type: v1.NodeHostName, Address: "host"},
					{Type: v1.NodeInternalIP, Address: "192.168.0.2"},
					{Type: v1.NodeInternalIP, Address: "192.168.0.2"},
					{Type: v1.NodeInternalIP, Address: "2001:db8::1"},
				}
			}),
			want:    dataplane.Node{Name: dpt.NodeName, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("203.0.113.9")}},
			wantDue: true,
		},
		{
			name: "invalid addresses and CIDRs are skipped",
			node: dpt.MakeNode(dpt.NodeName, func(n *v1.Node) {
				n.Status.Addresses = []v1.NodeAddress{
					{Type: v1.NodeInternalIP, Address: "192.168.0.300"},
					{Type: v1.NodeInternalIP, Address: "0.0.0.0"},
					{Type: v1.NodeInternalIP, Address: "192.168.0.2"},
				}
				n.Spec.PodCIDRs = []string{"10.0.0.0/33", "10.0.0.7/24"}
			}),
			want: dataplane.Node{Name: dpt.NodeName, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}, PodCIDRs: prefixes("10.0.0.0/24")},
			wantSkips: []skip{
				{"Node", dataplane.SkipNodeAddress}, {"Node", dataplane.SkipNodeAddress}, {"Node", dataplane.SkipPodCIDR},
			},
			wantDue: true,
		},
		{
			name: "spec.podCIDR when podCIDRs is empty, and the zone",
			node: dpt.MakeNode(dpt.NodeName, func(n *v1.Node) {
				n.Labels = map[string]string{v1.LabelTopologyZone: "z1"}
				n.Spec.PodCIDR = "10.0.3.0/24"
			}),
			want:    dataplane.Node{Name: dpt.NodeName, Zone: "z1", PodCIDRs: prefixes("10.0.3.0/24")},
			wantDue: true,
		},
		{
			name: "another node is ignored",
			node: dpt.TestNode(func(n *v1.Node) { n.Name = "other" }),
			want: dataplane.Node{Name: dpt.NodeName},
		},
		{
			name: "a node without anything is no change",
			node: dpt.MakeNode(dpt.NodeName, nil),
			want: dataplane.Node{Name: dpt.NodeName},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sk skips
			b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, OnSkip: sk.add})
			if due := b.UpdateNode(tc.node); due != tc.wantDue {
				t.Errorf("UpdateNode = %v, want %v", due, tc.wantDue)
			}
			if d := cmp.Diff(tc.wantSkips, sk.take(), cmp.AllowUnexported(skip{})); d != "" {
				t.Errorf("skips (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.want, b.Build().States[0].Node, addrCmp); d != "" {
				t.Errorf("Node (-want +got):\n%s", d)
			}
		})
	}
}

func TestBuilderNodeDeletedKeepsInfo(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName})
	b.UpdateNode(dpt.TestNode(nil))
	before := b.Build().States[0].Node
	if due := b.UpdateNode(nil); due {
		t.Error("UpdateNode(nil) made a Build due")
	}
	if d := cmp.Diff(before, b.Build().States[0].Node, addrCmp); d != "" {
		t.Errorf("Node after deletion (-before +after):\n%s", d)
	}
}

func TestBuilderChangedSince(t *testing.T) {
	type result struct {
		Generation uint64
		OK         bool
		Changed    []types.NamespacedName
	}
	svc := func(name, ip string) *v1.Service {
		return dpt.MakeService("ns1", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = ip
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
		})
	}
	for _, mode := range []dataplane.LocalMode{dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR} {
		t.Run(string(mode), func(t *testing.T) {
			settings := dpt.DefaultSettings()
			settings.LocalDetector.Mode = mode
			b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, Settings: settings})
			var got []result
			last := uint64(0)
			build := func() {
				st := b.Build().States[0]
				changed, ok := st.ChangedSince(last)
				got = append(got, result{st.Generation, ok, names(changed)})
				if _, ok := st.ChangedSince(last + 7); ok {
					t.Errorf("generation %d answers ChangedSince(%d)", st.Generation, last+7)
				}
				last = st.Generation
			}
			b.UpdateNode(dpt.TestNode(nil))
			b.UpdateService(nil, svc("a", "172.30.0.1"))
			b.UpdateService(nil, svc("b", "172.30.0.2"))
			build() // 1: first
			b.UpdateService(svc("a", "172.30.0.1"), svc("a", "172.30.0.11"))
			build() // 2: a
			b.UpdateEndpointSlice(nil, sliceOf("ns1", "b", 1, discovery.AddressTypeIPv4, "10.180.0.1"))
			build() // 3: b
			build() // 4: nothing
			b.UpdateNode(dpt.TestNode(func(n *v1.Node) { n.Spec.PodCIDRs = []string{"10.0.9.0/24"} }))
			build() // 5: pod CIDRs
			b.UpdateNode(dpt.TestNode(func(n *v1.Node) {
				n.Spec.PodCIDRs = []string{"10.0.9.0/24"}
				n.Labels = map[string]string{v1.LabelTopologyZone: "z2"}
			}))
			build() // 6: zone
			b.UpdateService(svc("b", "172.30.0.2"), nil)
			build() // 7: b deleted

			want := []result{
				{1, false, nil},
				{2, true, []types.NamespacedName{nn("ns1", "a")}},
				{3, true, []types.NamespacedName{nn("ns1", "b")}},
				{4, true, []types.NamespacedName{}},
				{5, mode != dataplane.LocalModeNodeCIDR, []types.NamespacedName{}},
				{6, false, nil},
				{7, true, []types.NamespacedName{nn("ns1", "b")}},
			}
			if mode == dataplane.LocalModeNodeCIDR {
				want[4].Changed = nil
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestStateChangedFrom: ChangedFrom answers as ChangedSince for States of
// one Builder, and cannot tell for a State of another Builder whose
// generation happens to follow, for an unknown previous State, or for a
// State no Builder built.
func TestStateChangedFrom(t *testing.T) {
	newBuilder := func() *dataplane.Builder {
		b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, Settings: dpt.DefaultSettings()})
		b.UpdateNode(dpt.TestNode(nil))
		return b
	}
	a, b := newBuilder(), newBuilder()
	a1, b1 := a.Build().States[0], b.Build().States[0]
	svc := func(name, ip string) *v1.Service {
		return dpt.MakeService("ns1", name, func(s *v1.Service) {
			s.Spec.ClusterIP = ip
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
		})
	}
	a.UpdateService(nil, svc("web", "172.30.0.1"))
	b.UpdateService(nil, svc("db", "172.30.0.2"))
	a2, b2 := a.Build().States[0], b.Build().States[0]
	type answer struct {
		OK      bool
		Changed []types.NamespacedName
	}
	ask := func(s, prev *dataplane.State) answer {
		changed, ok := s.ChangedFrom(prev)
		return answer{ok, names(changed)}
	}
	got := map[string]answer{
		"same Builder":             ask(a2, a1),
		"other Builder, same gen":  ask(b2, a1),
		"no previous State":        ask(a2, nil),
		"a State no Builder built": ask(&dataplane.State{Generation: 2}, a1),
		"other Builder's own":      ask(b2, b1),
	}
	want := map[string]answer{
		"same Builder":             {true, []types.NamespacedName{nn("ns1", "web")}},
		"other Builder, same gen":  {},
		"no previous State":        {},
		"a State no Builder built": {},
		"other Builder's own":      {true, []types.NamespacedName{nn("ns1", "db")}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, ok := b2.ChangedSince(a1.Generation); !ok {
		t.Error("ChangedSince, which knows no Builder, no longer answers by the generation alone")
	}
}

func TestBuilderDue(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName})
	svcs, sl := nodePortService(nil)
	steps := []struct {
		name string
		do   func() bool
		want bool
	}{
		{"add service", func() bool { return b.UpdateService(nil, svcs[0]) }, true},
		{"build", func() bool { b.Build(); return b.UpdateService(svcs[0], svcs[0]) }, false},
		{"metadata-only update", func() bool {
			changed := svcs[0].DeepCopy()
			changed.Annotations = map[string]string{"x": "y"}
			return b.UpdateService(svcs[0], changed)
		}, false},
		{"add slice", func() bool { return b.UpdateEndpointSlice(nil, sl[0]) }, true},
		{"build again", func() bool { b.Build(); return b.UpdateNode(dpt.MakeNode("other", nil)) }, false},
		{"node", func() bool { return b.UpdateNode(dpt.TestNode(nil)) }, true},
		{"same node", func() bool { b.Build(); return b.UpdateNode(dpt.TestNode(nil)) }, false},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: due = %v, want %v", s.name, got, s.want)
		}
	}
}

// TestBuilderServiceSkips checks that a bad Service is reported once
// however many families track it, and that services not proxied by design
// are not reported at all.
func TestBuilderServiceSkips(t *testing.T) {
	var sk skips
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol, "IPv5", v1.IPv4Protocol},
		NodeName: dpt.NodeName,
		OnSkip:   sk.add,
	})
	bad := dualStackService()
	bad.Spec.SessionAffinity = "Sometimes"
	b.UpdateService(nil, bad)
	b.UpdateService(nil, dpt.MakeService("ns1", "headless", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone }))
	b.UpdateService(nil, dpt.MakeService("ns1", "v4only", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.0.9"
		s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
	}))
	b.UpdateService(nil, dpt.MakeService("ns1", "badv6", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.ClusterIPs = []string{"172.30.0.10", "fd00::zz"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
	}))
	// Only the second family sees this one's problem: the first skips the
	// whole service as another family's.
	b.UpdateService(nil, dpt.MakeService("ns1", "v6only", func(s *v1.Service) {
		s.Spec.ClusterIP = "fd00:172:30::9"
		s.Spec.ClusterIPs = []string{"fd00:172:30::9"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
		s.Spec.ExternalIPs = []string{"2001:db8::zz"}
		s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
	}))
	want := []skip{
		{"Service", servicemodel.ReasonInvalidSessionAffinity},
		{"Service", servicemodel.ReasonInvalidClusterIP},
		{"Service", servicemodel.ReasonInvalidExternalIP},
	}
	if d := cmp.Diff(want, sk.take(), cmp.AllowUnexported(skip{})); d != "" {
		t.Errorf("skips (-want +got):\n%s", d)
	}
	if n := len(b.Build().States); n != 2 {
		t.Errorf("%d States, want 2 (unknown and repeated families ignored)", n)
	}
}

// TestBuilderCostsChanges shows that a Build after one change touches that
// service only: every other service's ports and endpoints are the very
// values the previous State held.
func TestBuilderCostsChanges(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName})
	// Enough for the first Build to check the endpoints out on a
	// goroutine of their own, and the second not.
	const n = 300
	svcs := make([]*v1.Service, n)
	for i := range n {
		svcs[i] = dpt.MakeService("ns", fmt.Sprintf("svc%d", i), func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
		})
		b.UpdateService(nil, svcs[i])
		b.UpdateEndpointSlice(nil, dpt.MakeSlice("ns", svcs[i].Name, 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 80)}
			s.Endpoints = []discovery.Endpoint{dpt.ReadyEndpoint(fmt.Sprintf("10.180.%d.%d", i/250, i%250+1), "")}
		}))
	}
	prev := b.Build().States[0]

	changed := svcs[7].DeepCopy()
	changed.Spec.Ports[0].Port = 8080
	b.UpdateService(svcs[7], changed)
	out := b.Build()
	next := out.States[0]

	got, ok := next.ChangedSince(prev.Generation)
	if d := cmp.Diff([]types.NamespacedName{nn("ns", "svc7")}, names(got)); !ok || d != "" {
		t.Fatalf("ChangedSince = %v, %v; want svc7 only:\n%s", got, ok, d)
	}
	if d := cmp.Diff([]types.NamespacedName{nn("ns", "svc7")}, names(out.Changes[0].Services.Services)); d != "" {
		t.Errorf("Changes.Services (-want +got):\n%s", d)
	}
	shared := 0
	for name, ports := range prev.Services.Services() {
		if name.Name == "svc7" {
			continue
		}
		if next.Services.Service(name)[0] == ports[0] && next.Endpoints.Service(name) == prev.Endpoints.Service(name) {
			shared++
		}
	}
	if shared != n-1 {
		t.Errorf("%d unchanged services share their values with the previous State, want %d", shared, n-1)
	}
}

// TestBuilderConcurrentUpdates races updates from several goroutines with
// Builds (run with -race).
func TestBuilderConcurrentUpdates(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				svc := dpt.MakeService("ns", fmt.Sprintf("svc-%d-%d", g, i), func(s *v1.Service) {
					s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", g, i+1)
					s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, 0, 0)}
				})
				b.UpdateService(nil, svc)
				b.UpdateEndpointSlice(nil, sliceOf("ns", svc.Name, 1, discovery.AddressTypeIPv4, fmt.Sprintf("10.%d.0.%d", g, i+1)))
				b.UpdateNode(dpt.TestNode(func(n *v1.Node) { n.Labels = map[string]string{v1.LabelTopologyZone: fmt.Sprint(i % 3)} }))
			}
		})
	}
	for range 20 {
		b.Build()
	}
	wg.Wait()
	if n := b.Build().States[0].Services.Len(); n != 400 {
		t.Errorf("got %d services, want 400", n)
	}
}

func TestBuilderSettingsFiltering(t *testing.T) {
	settings := dataplane.Settings{
		NodePortAddresses: []netip.Prefix{{}, netip.MustParsePrefix("192.168.0.7/24"), netip.MustParsePrefix("::/0")},
		LocalDetector:     dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: []netip.Prefix{{}, netip.MustParsePrefix("fd00::/64")}},
	}
	out := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		Settings: settings,
	}).Build()
	type cidrs struct{ NodePorts, Detector []netip.Prefix }
	var got []cidrs
	for _, st := range out.States {
		got = append(got, cidrs{st.Settings.NodePortAddresses, st.Settings.LocalDetector.CIDRs})
	}
	want := []cidrs{
		{NodePorts: prefixes("192.168.0.0/24")},
		{Detector: prefixes("fd00::/64")}, // ::/0 serves every address
	}
	if d := cmp.Diff(want, got, addrCmp); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestBuilderNodeHugeAddress(t *testing.T) {
	var sk skips
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName, OnSkip: sk.add})
	b.UpdateNode(dpt.MakeNode(dpt.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: strings.Repeat("9", 1<<20)}}
	}))
	if d := cmp.Diff([]skip{{"Node", dataplane.SkipNodeAddress}}, sk.take(), cmp.AllowUnexported(skip{})); d != "" {
		t.Errorf("skips (-want +got):\n%s", d)
	}
}

func TestBuilderNodePortPrimary(t *testing.T) {
	dualNode := dpt.MakeNode(dpt.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeExternalIP, Address: "203.0.113.9"},
			{Type: v1.NodeInternalIP, Address: "192.168.0.2"},
			{Type: v1.NodeInternalIP, Address: "192.168.1.2"},
			{Type: v1.NodeInternalIP, Address: "2001:db8::1"},
		}
	})
	v4Node := dpt.MakeNode(dpt.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.2"}}
	})
	for _, tc := range []struct {
		name      string
		nodePorts []netip.Prefix
		node      *v1.Node
		want      [][]netip.Prefix // per family, IPv4 then IPv6
	}{
		{name: "first InternalIP of each family", node: dualNode,
			want: [][]netip.Prefix{prefixes("192.168.0.2/32"), prefixes("2001:db8::1/128")}},
		{name: "added to the other CIDRs, once", node: dualNode, nodePorts: prefixes("127.0.0.0/8", "192.168.0.2/32"),
			want: [][]netip.Prefix{prefixes("127.0.0.0/8", "192.168.0.2/32"), prefixes("2001:db8::1/128")}},
		{name: "a family without node IP serves every address", node: v4Node,
			want: [][]netip.Prefix{prefixes("192.168.0.2/32"), nil}},
		{name: "with all, every address serves", node: dualNode, nodePorts: prefixes("0.0.0.0/0", "::/0"),
			want: [][]netip.Prefix{nil, nil}},
		{name: "no node yet", want: [][]netip.Prefix{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := dataplane.NewBuilder(dataplane.BuilderConfig{
				Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
				NodeName: dpt.NodeName,
				Settings: dataplane.Settings{NodePortAddresses: tc.nodePorts, NodePortPrimary: true},
			})
			if tc.node != nil {
				b.UpdateNode(tc.node)
			}
			var got [][]netip.Prefix
			for _, st := range b.Build().States {
				got = append(got, st.Settings.NodePortAddresses)
			}
			if d := cmp.Diff(tc.want, got, addrCmp, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("NodePortAddresses per family (-want +got):\n%s", d)
			}
		})
	}
}

func TestSelectFrom(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dpt.NodeName})
	b.UpdateNode(dpt.TestNode(nil))
	for i, etp := range []v1.ServiceExternalTrafficPolicy{v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal} {
		name := fmt.Sprintf("svc%d", i)
		b.UpdateService(nil, dpt.MakeService("ns", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIP = fmt.Sprintf("172.30.0.%d", i+1)
			s.Spec.ExternalTrafficPolicy = etp
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort("p80", v1.ProtocolTCP, 80, int32(30000+i), 0)}
		}))
		b.UpdateEndpointSlice(nil, dpt.MakeSlice("ns", name, 0, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p80", v1.ProtocolTCP, 80)}
			s.Endpoints = []discovery.Endpoint{
				dpt.ReadyEndpoint("10.0.0.1", dpt.NodeName),
				dpt.ReadyEndpoint("10.0.0.2", "other"),
				dpt.Endpoint("10.0.0.3", "other", false, true, true),
			}
		}))
	}
	st := b.Build().States[0]
	for sp := range st.Services.All() {
		want := st.Select(sp)
		got := st.SelectFrom(sp, st.Endpoints.Get(sp.Name))
		if diff := cmp.Diff(want, got, addrCmp); diff != "" {
			t.Errorf("%s: SelectFrom differs from Select (-want +got):\n%s", sp.Name, diff)
		}
	}
}

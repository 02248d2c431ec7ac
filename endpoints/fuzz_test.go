package endpoints

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/utils/net"
	"k8s.io/utils/ptr"
)

// fuzzInput turns fuzz data into choices; past its end every choice is 0.
type fuzzInput struct{ b []byte }

func (f *fuzzInput) pick(n int) int {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return int(c) % n
}

func (f *fuzzInput) done() bool { return len(f.b) == 0 }

func (f *fuzzInput) tri() *bool {
	switch f.pick(3) {
	case 1:
		return ptr.To(true)
	case 2:
		return ptr.To(false)
	}
	return nil
}

// slice draws an EndpointSlice: half the time a valid one of one service
// from a tiny universe of ports and addresses, so that slices overlap and
// compete for addresses; otherwise anything, valid or not.
func (f *fuzzInput) slice(family v1.IPFamily) *discovery.EndpointSlice {
	if f.pick(2) == 0 {
		return f.denseSlice(family)
	}
	return f.wildSlice(family)
}

func (f *fuzzInput) denseSlice(family v1.IPFamily) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns1",
			Name:      fmt.Sprintf("d%d", f.pick(3)),
			Labels:    map[string]string{discovery.LabelServiceName: "a"},
		},
		AddressType: discovery.AddressTypeIPv4,
	}
	format := "10.0.0.%d"
	if family == v1.IPv6Protocol {
		s.AddressType = discovery.AddressTypeIPv6
		format = "fd00::%d"
	}
	for range f.pick(2) + 1 {
		s.Ports = append(s.Ports, discovery.EndpointPort{
			Name:     ptr.To([]string{"", "p"}[f.pick(2)]),
			Port:     ptr.To(int32(f.pick(2) + 1)),
			Protocol: ptr.To([]v1.Protocol{v1.ProtocolUDP, v1.ProtocolTCP}[f.pick(2)]),
		})
	}
	for range f.pick(6) + 1 {
		ep := discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf(format, f.pick(3))},
			Conditions: discovery.EndpointConditions{Ready: f.tri(), Serving: f.tri(), Terminating: f.tri()},
		}
		if n := f.pick(3); n > 0 {
			ep.NodeName = ptr.To(fmt.Sprintf("node-%c", 'a'+n-1))
		}
		if f.pick(2) == 1 {
			ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: fmt.Sprintf("z%d", f.pick(2))}}}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func (f *fuzzInput) wildSlice(family v1.IPFamily) *discovery.EndpointSlice {
	own, other := discovery.AddressTypeIPv4, discovery.AddressTypeIPv6
	if family == v1.IPv6Protocol {
		own, other = other, own
	}
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: []string{"ns1", "ns1", "ns1", "ns2", "ns2", "ns1", "ns1", ""}[f.pick(8)],
			Name:      []string{"s1", "s2", "s3", "s1", "s2", "s4", "s1", ""}[f.pick(8)],
		},
		AddressType: []discovery.AddressType{own, own, own, own, own, own, other, discovery.AddressTypeFQDN}[f.pick(8)],
	}
	switch f.pick(8) {
	case 0, 1, 2, 3:
		s.Labels = map[string]string{discovery.LabelServiceName: "a"}
	case 4, 5:
		s.Labels = map[string]string{discovery.LabelServiceName: "b"}
	case 6:
		s.Labels = map[string]string{discovery.LabelServiceName: ""}
	}
	if f.pick(3) == 0 {
		s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: time.Date(2030, 1, 1, 0, 0, f.pick(60), 0, time.UTC).Format(time.RFC3339Nano)}
	}
	for range f.pick(4) + 1 {
		var p discovery.EndpointPort
		switch f.pick(6) {
		case 1, 5:
			p.Name = ptr.To("")
		case 2, 4:
			p.Name = ptr.To("p")
		case 3:
			p.Name = ptr.To("q")
		}
		switch f.pick(10) {
		case 0:
			p.Port = nil
		case 1:
			p.Port = ptr.To[int32](0)
		case 2:
			p.Port = ptr.To[int32](-1)
		case 3:
			p.Port = ptr.To[int32](70000)
		case 4:
			p.Port = ptr.To[int32](65535)
		default:
			p.Port = ptr.To(int32(f.pick(4) + 1))
		}
		switch f.pick(8) {
		case 1, 6:
			p.Protocol = ptr.To(v1.ProtocolTCP)
		case 2, 5, 7:
			p.Protocol = ptr.To(v1.ProtocolUDP)
		case 3:
			p.Protocol = ptr.To(v1.ProtocolSCTP)
		case 4:
			p.Protocol = ptr.To(v1.Protocol("ICMP"))
		}
		s.Ports = append(s.Ports, p)
	}
	for range f.pick(9) {
		var ep discovery.Endpoint
		for range f.pick(4) {
			d := f.pick(4)
			a := []string{
				fmt.Sprintf("10.0.0.%d", d), fmt.Sprintf("010.000.000.00%d", d), fmt.Sprintf("fd00::%d", d),
				fmt.Sprintf("::ffff:10.0.0.%d", d), "bogus", "", fmt.Sprintf("FD00:0::%d", d),
				fmt.Sprintf("10.0.0.1%d", d), "1.2.3.4.5", fmt.Sprintf("fd00::1%d", d),
				fmt.Sprintf("10.0.0.%d", d), fmt.Sprintf("fe80::%d%%eth0", d), fmt.Sprintf("::ffff:010.0.0.%d", d),
			}[f.pick(13)]
			ep.Addresses = append(ep.Addresses, a)
		}
		ep.Conditions = discovery.EndpointConditions{Ready: f.tri(), Serving: f.tri(), Terminating: f.tri()}
		switch f.pick(4) {
		case 1:
			ep.NodeName = ptr.To("node-a")
		case 2:
			ep.NodeName = ptr.To("node-b")
		case 3:
			ep.NodeName = ptr.To("")
		}
		if z := f.pick(3); z > 0 {
			ep.Zone = ptr.To(fmt.Sprintf("z%d", z))
		}
		switch f.pick(3) {
		case 1:
			ep.Hints = &discovery.EndpointHints{}
		case 2:
			ep.Hints = &discovery.EndpointHints{}
			for range f.pick(3) {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: fmt.Sprintf("z%d", f.pick(2))})
			}
			for range f.pick(3) {
				ep.Hints.ForNodes = append(ep.Hints.ForNodes, discovery.ForNode{Name: fmt.Sprintf("node-%c", 'a'+f.pick(2))})
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// referenceMerge merges slices the slow, obvious way, independently of the
// tracker's code, as the oracle the fuzzers compare against.
func referenceMerge(family v1.IPFamily, node string, in []*discovery.EndpointSlice) map[servicemodel.PortName][]*Endpoint {
	want := discovery.AddressTypeIPv4
	if family == v1.IPv6Protocol {
		want = discovery.AddressTypeIPv6
	}
	cands := map[servicemodel.PortName]map[netip.AddrPort][]*Endpoint{}
	for _, s := range in {
		svc := s.Labels[discovery.LabelServiceName]
		if s.AddressType != want || s.Namespace == "" || s.Name == "" || svc == "" {
			continue
		}
		for _, p := range s.Ports {
			if p.Name == nil || p.Port == nil || *p.Port <= 0 || *p.Port >= 1<<16 {
				continue
			}
			proto := v1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if proto != v1.ProtocolTCP && proto != v1.ProtocolUDP && proto != v1.ProtocolSCTP {
				continue
			}
			pn := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: svc}, Port: *p.Name, Protocol: proto}
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) == 0 {
					continue
				}
				ip := utilnet.ParseIPSloppy(ep.Addresses[0])
				if ip == nil {
					continue
				}
				a, _ := netip.AddrFromSlice(ip)
				a = a.Unmap()
				if a.Is4() != (want == discovery.AddressTypeIPv4) {
					continue
				}
				info := affinity.EndpointInfo{
					Ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
					Serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
					Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
				}
				if ep.NodeName != nil {
					info.NodeName = *ep.NodeName
					info.Local = node != "" && *ep.NodeName == node
				}
				if ep.Zone != nil {
					info.Zone = *ep.Zone
				}
				if ep.Hints != nil {
					zones, nodes := map[string]bool{}, map[string]bool{}
					for _, z := range ep.Hints.ForZones {
						zones[z.Name] = true
					}
					for _, n := range ep.Hints.ForNodes {
						nodes[n.Name] = true
					}
					for z := range zones {
						info.ZoneHints = append(info.ZoneHints, z)
					}
					for n := range nodes {
						info.NodeHints = append(info.NodeHints, n)
					}
					slices.Sort(info.ZoneHints)
					slices.Sort(info.NodeHints)
				}
				ap := netip.AddrPortFrom(a, uint16(*p.Port))
				if cands[pn] == nil {
					cands[pn] = map[netip.AddrPort][]*Endpoint{}
				}
				cands[pn][ap] = append(cands[pn][ap], &Endpoint{Addr: ap, EndpointInfo: info})
			}
		}
	}
	rank := func(e *Endpoint) string {
		flag := func(b bool) string {
			if b {
				return "0"
			}
			return "1"
		}
		return strings.Join([]string{
			flag(!e.Terminating) + flag(e.Ready) + flag(e.Serving) + flag(e.Local),
			e.NodeName, e.Zone, strings.Join(e.ZoneHints, "\x01"), strings.Join(e.NodeHints, "\x01"),
		}, "\x00")
	}
	out := map[servicemodel.PortName][]*Endpoint{}
	for pn, byAddr := range cands {
		var list []*Endpoint
		for _, cs := range byAddr {
			best := cs[0]
			for _, c := range cs[1:] {
				if rank(c) < rank(best) {
					best = c
				}
			}
			list = append(list, best)
		}
		slices.SortFunc(list, func(a, b *Endpoint) int { return a.Addr.Compare(b.Addr) })
		out[pn] = list
	}
	return out
}

// checkInvariants verifies what every Map must satisfy.
func checkInvariants(t *testing.T, family v1.IPFamily, m Map) {
	t.Helper()
	n := 0
	for nn, se := range m.Services() {
		n++
		if len(se.Ports) == 0 {
			t.Errorf("service %v has no ports", nn)
		}
		local := map[netip.Addr]bool{}
		for pn, list := range se.Ports {
			if pn.NamespacedName != nn {
				t.Errorf("port %v filed under service %v", pn, nn)
			}
			if pn.Protocol != v1.ProtocolTCP && pn.Protocol != v1.ProtocolUDP && pn.Protocol != v1.ProtocolSCTP {
				t.Errorf("port %v has protocol %q", pn, pn.Protocol)
			}
			if len(list) == 0 {
				t.Errorf("port %v has an empty list", pn)
			}
			for i, e := range list {
				ip := e.IP()
				if !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" || ip.Is4() != (family != v1.IPv6Protocol) {
					t.Errorf("port %v: endpoint %v is not a plain address of family %q", pn, e, family)
				}
				if e.Addr.Port() == 0 {
					t.Errorf("port %v: endpoint %v has port 0", pn, e)
				}
				if i > 0 && list[i-1].Addr.Compare(e.Addr) >= 0 {
					t.Errorf("port %v: %v and %v out of order or duplicated", pn, list[i-1], e)
				}
				if !slices.IsSorted(e.ZoneHints) || len(slices.Compact(slices.Clone(e.ZoneHints))) != len(e.ZoneHints) ||
					!slices.IsSorted(e.NodeHints) || len(slices.Compact(slices.Clone(e.NodeHints))) != len(e.NodeHints) {
					t.Errorf("port %v: endpoint %v has unnormalized hints %v %v", pn, e, e.ZoneHints, e.NodeHints)
				}
				if e.Local && e.Ready {
					local[ip] = true
				}
			}
		}
		if se.LocalReady != len(local) {
			t.Errorf("service %v: LocalReady %d, want %d", nn, se.LocalReady, len(local))
		}
	}
	if n != m.Len() {
		t.Errorf("Len() = %d, but %d services", m.Len(), n)
	}
}

func fuzzFamily(f *fuzzInput) v1.IPFamily {
	if f.pick(2) == 1 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

func fuzzTracker(family v1.IPFamily) *Tracker {
	return NewTracker(Config{Family: family, NodeName: "node-a", Logger: logr.New(discardSink{})})
}

// discardSink silences the fuzzers, which skip bad input by the million.
type discardSink struct{}

func (discardSink) Init(logr.RuntimeInfo)            {}
func (discardSink) Enabled(int) bool                 { return false }
func (discardSink) Info(int, string, ...any)         {}
func (discardSink) Error(error, string, ...any)      {}
func (d discardSink) WithValues(...any) logr.LogSink { return d }
func (d discardSink) WithName(string) logr.LogSink   { return d }

// FuzzSliceMerge feeds random slices to a tracker: it never panics, its Map
// satisfies every invariant, equals the reference merge of the slices it was
// last given per name, and does not depend on the order they came in.
func FuzzSliceMerge(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x02\x02\x05\x01\x03\x00\x00\x00\x01\x00\x00\x00"))
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x03\x02\x05\x02\x04\x00\x02\x02\x02\x00\x00\x00\x01\x00\x02"))
	f.Add([]byte("multiple slices of one service with duplicate endpoints and ports"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		family := fuzzFamily(in)
		var fed []*discovery.EndpointSlice
		for !in.done() && len(fed) < 8 {
			fed = append(fed, in.slice(family))
		}
		guard(t, fed...)
		tr := fuzzTracker(family)
		final := map[types.NamespacedName]*discovery.EndpointSlice{}
		for _, s := range fed {
			key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
			tr.Update(final[key], s)
			final[key] = s
		}
		m, _ := checkout(t, tr)
		checkInvariants(t, family, m)

		var last []*discovery.EndpointSlice
		for _, s := range final {
			last = append(last, s)
		}
		if diff := cmp.Diff(referenceMerge(family, "node-a", last), contents(m), cmpOpts); diff != "" {
			t.Errorf("tracker differs from the reference merge (-want +got):\n%s", diff)
		}
		reversed := fuzzTracker(family)
		for i := len(last) - 1; i >= 0; i-- {
			reversed.Update(nil, last[i])
		}
		rm, _ := checkout(t, reversed)
		if diff := cmp.Diff(contents(m), contents(rm), cmpOpts); diff != "" {
			t.Errorf("result depends on the order of slices (-forward +reversed):\n%s", diff)
		}
	})
}

// FuzzTracker applies a random sequence of adds, updates, no-op updates,
// deletes and checkouts. Each Checkout's Changes must equal the difference
// of the snapshots, an Update reporting no change must leave nothing new
// pending, and in the end the Map must equal that of a fresh tracker fed
// only the final slices.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x02\x02\x05\x01\x03\x00\x00\x00\x01\x00\x00\x00\x06\x05\x00\x06"))
	f.Add([]byte("\x00\x01\x00\x00\x00\x00\x00\x00\x02\x02\x05\x02\x03\x00\x00\x00\x02\x00\x00\x00\x07\x00\x06\x07\x01\x06"))
	f.Add([]byte("add, checkout, update, metadata-only touch, delete and checkout again in random order"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		family := fuzzFamily(in)
		tr := fuzzTracker(family)
		store := map[types.NamespacedName]*discovery.EndpointSlice{}
		keys := func() []types.NamespacedName {
			var ks []types.NamespacedName
			for k := range store {
				ks = append(ks, k)
			}
			slices.SortFunc(ks, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
			return ks
		}
		changedSince := false
		for ops := 0; !in.done() && ops < 64; ops++ {
			before := tr.Pending()
			var got bool
			noop := false
			switch op := in.pick(8); {
			case op <= 4:
				s := in.slice(family)
				guard(t, s)
				key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
				got = tr.Update(store[key], s)
				store[key] = s
			case op == 5:
				ks := keys()
				if len(ks) == 0 {
					continue
				}
				k := ks[in.pick(len(ks))]
				got = tr.Update(store[k], nil)
				delete(store, k)
			case op == 6:
				checkout(t, tr)
				changedSince = false
				continue
			default:
				// Touch metadata and reverse endpoints and ports: no change.
				ks := keys()
				if len(ks) == 0 {
					continue
				}
				k := ks[in.pick(len(ks))]
				c := store[k].DeepCopy()
				c.ResourceVersion += "1"
				slices.Reverse(c.Endpoints)
				slices.Reverse(c.Ports)
				guard(t, c)
				got = tr.Update(store[k], c)
				store[k] = c
				noop = true
			}
			if noop && got {
				t.Fatalf("a metadata-only, reordering update reported a change")
			}
			if !got && tr.Pending() != before {
				t.Fatalf("Update reported no change but Pending went from %d to %d", before, tr.Pending())
			}
			changedSince = changedSince || got
		}
		if !changedSince && tr.Pending() != 0 {
			t.Fatalf("no Update since the last Checkout reported a change, but %d services are pending", tr.Pending())
		}
		m, _ := checkout(t, tr)
		checkInvariants(t, family, m)

		fresh := fuzzTracker(family)
		var last []*discovery.EndpointSlice
		for _, k := range keys() {
			fresh.Update(nil, store[k])
			last = append(last, store[k])
		}
		fm, _ := checkout(t, fresh)
		if diff := cmp.Diff(contents(fm), contents(m), cmpOpts); diff != "" {
			t.Errorf("tracker differs from a fresh one fed the final slices (-fresh +got):\n%s", diff)
		}
		if diff := cmp.Diff(localReady(fm), localReady(m)); diff != "" {
			t.Errorf("local ready (-fresh +got):\n%s", diff)
		}
		if diff := cmp.Diff(referenceMerge(family, "node-a", last), contents(m), cmpOpts); diff != "" {
			t.Errorf("tracker differs from the reference merge (-want +got):\n%s", diff)
		}
	})
}

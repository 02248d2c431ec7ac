package endpoints

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/internal/fuzzobj"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/utils/net"
)

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

func fuzzTracker(family v1.IPFamily) *Tracker {
	// The zero Logger silences the fuzzers, which skip bad input by the
	// million.
	return NewTracker(Config{Family: family, NodeName: fuzzobj.SliceNode})
}

// FuzzSliceMerge feeds random slices to a tracker: it never panics, its Map
// satisfies every invariant, equals the reference merge of the slices it was
// last given per name, and does not depend on the order they came in.
func FuzzSliceMerge(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x02\x02\x05\x01\x03\x00\x00\x00\x01\x00\x00\x00"))
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x03\x02\x05\x02\x04\x00\x02\x02\x02\x00\x00\x00\x01\x00\x02"))
	f.Add([]byte("multiple slices of one service with duplicate endpoints and ports"))
	f.Fuzz(func(t *testing.T, data []byte) {
		family, fed := fuzzobj.SliceMerge(data)
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
		if diff := cmp.Diff(referenceMerge(family, fuzzobj.SliceNode, last), contents(m), cmpOpts); diff != "" {
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
		trace := fuzzobj.SliceTracker(data)
		tr := fuzzTracker(trace.Family)
		changedSince := false
		for _, op := range trace.Ops {
			before := tr.Pending()
			if op.Kind == fuzzobj.OpCheckout {
				checkout(t, tr)
				changedSince = false
				continue
			}
			if op.New != nil {
				guard(t, op.New)
			}
			got := tr.Update(op.Old, op.New)
			if op.Kind == fuzzobj.OpTouch && got {
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
		checkInvariants(t, trace.Family, m)

		fresh := fuzzTracker(trace.Family)
		for _, s := range trace.Final {
			fresh.Update(nil, s)
		}
		fm, _ := checkout(t, fresh)
		if diff := cmp.Diff(contents(fm), contents(m), cmpOpts); diff != "" {
			t.Errorf("tracker differs from a fresh one fed the final slices (-fresh +got):\n%s", diff)
		}
		if diff := cmp.Diff(localReady(fm), localReady(m)); diff != "" {
			t.Errorf("local ready (-fresh +got):\n%s", diff)
		}
		if diff := cmp.Diff(referenceMerge(trace.Family, fuzzobj.SliceNode, trace.Final), contents(m), cmpOpts); diff != "" {
			t.Errorf("tracker differs from the reference merge (-want +got):\n%s", diff)
		}
	})
}

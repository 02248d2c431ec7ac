package servicemodel

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/proxykit/proxykit/internal/fuzzobj"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

var allReasons = sets.New(
	ReasonOtherProxy, ReasonExternalName, ReasonHeadless, ReasonNoClusterIP, ReasonOtherFamily,
	ReasonInvalidClusterIP, ReasonInvalidSessionAffinity, ReasonInvalidName, ReasonInvalidProtocol,
	ReasonInvalidPort, ReasonInvalidNodePort, ReasonDuplicatePort, ReasonInvalidExternalIP,
	ReasonInvalidIngressIP, ReasonInvalidSourceRange, ReasonInvalidHealthCheckNodePort,
)

func FuzzNormalize(f *testing.F) {
	f.Add("svc", "10.0.0.1", "", "", "ClusterIP", []byte{1, 2, 0, 69, 0, 0, 0}, "1.2.3.4,fd00::1", "10.0.0.0/8", "5.6.7.8", false, int32(0), "", int32(0), "", false)
	f.Add("svc", "fd00::1", "10.0.0.1,fd00::1", "4,6", "LoadBalancer", []byte{0, 1, 0, 96, 117, 48, 0, 0, 1, 0, 96, 117, 48, 0}, "fd00::2,,bogus", "::/0,fd00::/8", "p:fd00::3,h:lb,fd00::4", true, int32(31000), "ClientIP", int32(60), "", true)
	f.Add("svc", "None", "", "", "", []byte{}, "", "", "", false, int32(0), "", int32(0), "", false)
	f.Add("svc", "172.30.0.041", "", "", "NodePort", []byte{1, 5, 0, 0, 0, 0, 0x8f}, "127.0.0.1", " 1.2.3.4/24 ", "v:0.0.0.0", true, int32(-1), "ClientIP", int32(99999), "=mine", false)

	f.Fuzz(func(t *testing.T, name, clusterIP, clusterIPs, families, svcType string, ports []byte,
		externalIPs, ranges, ingress string, etpLocal bool, hcPort int32, sessionAffinity string, timeout int32,
		label string, ipv6 bool) {
		in := fuzzobj.NormalizeInput{
			Name: name, ClusterIP: clusterIP, ClusterIPs: clusterIPs, Families: families, Type: svcType, Ports: ports,
			ExternalIPs: externalIPs, SourceRanges: ranges, Ingress: ingress, ExternalPolicyLocal: etpLocal,
			HealthCheckNodePort: hcPort, SessionAffinity: sessionAffinity, Timeout: timeout, Label: label, IPv6: ipv6,
		}
		svc, family := in.Service(), in.Family()
		before := svc.DeepCopy()

		// The allocation-free fast paths must agree with upstream's
		// parsers on every input.
		for _, s := range append(fuzzobj.SplitList(clusterIPs), clusterIP, externalIPs, ingress) {
			ip, ok := parseIP(s)
			wantIP, wantOK := parseIPSloppy(s)
			if ip != wantIP || ok != wantOK {
				t.Errorf("parseIP(%q) = %v, %v; sloppy parser says %v, %v", s, ip, ok, wantIP, wantOK)
			}
		}
		for _, s := range append(fuzzobj.SplitList(ranges), ranges) {
			p, ok := parsePrefix(s)
			wantP, wantOK := parsePrefixSloppy(s)
			if p != wantP || ok != wantOK {
				t.Errorf("parsePrefix(%q) = %v, %v; sloppy parser says %v, %v", s, p, ok, wantP, wantOK)
			}
		}

		got, err := Normalize(svc, family, fuzzobj.ProxyName)
		checkNormalized(t, svc, family, got, err)

		again, _ := Normalize(svc, family, fuzzobj.ProxyName)
		if !slices.EqualFunc(got, again, (*ServicePort).Equal) {
			t.Errorf("Normalize is not deterministic")
		}
		if !apiequality.Semantic.DeepEqual(before, svc) {
			t.Errorf("Normalize modified its input")
		}
	})
}

// checkNormalized asserts the invariants every Normalize result holds.
func checkNormalized(t *testing.T, svc *v1.Service, family v1.IPFamily, got []*ServicePort, err error) {
	t.Helper()
	if _, whole := err.(*SkipError); whole && got != nil {
		t.Errorf("service skipped but %d ports returned", len(got))
	}
	for _, se := range Skips(err) {
		if !allReasons.Has(se.Reason) {
			t.Errorf("unknown skip reason %q", se.Reason)
		}
	}
	validProto := sets.New(v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP)
	inFamily := func(ip netip.Addr) bool { return ip.IsValid() && familyOf(ip) == family }
	for i, p := range got {
		if i > 0 && got[i-1].Name.Compare(p.Name) >= 0 {
			t.Errorf("ports not sorted and unique at %s", p.Name)
		}
		if p.Name.NamespacedName != (types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}) {
			t.Errorf("port %s of another service", p.Name)
		}
		if !inFamily(p.ClusterIP) || p.ClusterIP.IsUnspecified() {
			t.Errorf("%s: cluster IP %v not a valid %s address", p.Name, p.ClusterIP, family)
		}
		if p.Port == 0 {
			t.Errorf("%s: port 0", p.Name)
		}
		if !validProto.Has(p.Protocol) || p.Protocol != p.Name.Protocol {
			t.Errorf("%s: protocol %q", p.Name, p.Protocol)
		}
		for _, list := range [][]netip.Addr{p.ExternalIPs, p.LoadBalancerVIPs} {
			for j, ip := range list {
				if !inFamily(ip) || ip.IsUnspecified() {
					t.Errorf("%s: address %v not a valid %s address", p.Name, ip, family)
				}
				if j > 0 && list[j-1].Compare(ip) >= 0 {
					t.Errorf("%s: addresses %v not sorted and unique", p.Name, list)
				}
			}
		}
		for _, ip := range p.ExternalIPs {
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
				t.Errorf("%s: special external IP %v", p.Name, ip)
			}
		}
		for j, r := range p.LoadBalancerSourceRanges {
			if !r.IsValid() || !inFamily(r.Addr()) || r.Masked() != r || r.Bits() == 0 {
				t.Errorf("%s: source range %v not a masked %s prefix", p.Name, r, family)
			}
			if j > 0 && !(p.LoadBalancerSourceRanges[j-1].Addr().Compare(r.Addr()) < 0 ||
				p.LoadBalancerSourceRanges[j-1].Addr() == r.Addr() && p.LoadBalancerSourceRanges[j-1].Bits() < r.Bits()) {
				t.Errorf("%s: source ranges %v not sorted and unique", p.Name, p.LoadBalancerSourceRanges)
			}
		}
		if p.HealthCheckNodePort != 0 && (!p.ExternalPolicyLocal || svc.Spec.Type != v1.ServiceTypeLoadBalancer) {
			t.Errorf("%s: health-check node port without LoadBalancer and eTP Local", p.Name)
		}
		if p.SessionAffinity.ClientIP != (p.SessionAffinity.Timeout > 0) {
			t.Errorf("%s: session affinity %+v", p.Name, p.SessionAffinity)
		}
	}
}

// FuzzTracker applies a random sequence of updates, deletes and checkouts
// and compares the tracker with normalizing the latest objects directly.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3})
	f.Add([]byte{0, 0, 0x09, 1, 1, 0x21, 3, 2, 0, 0, 3, 0, 0, 0x0a, 3})
	f.Add([]byte{0, 2, 0x48, 3, 0, 2, 0x48, 3, 0, 2, 0x03, 0, 2, 0x48, 3, 2, 2, 0, 3})

	f.Fuzz(func(t *testing.T, ops []byte) {
		const services = fuzzobj.TrackerServices
		tr := NewTracker(Config{})
		latest := make([]*v1.Service, services)
		applied := make([][]*ServicePort, services)
		want := func(i int) []*ServicePort {
			ports, _ := Normalize(latest[i], v1.IPv4Protocol, "")
			return ports
		}
		differing := func() int {
			n := 0
			for i := range services {
				if !slices.EqualFunc(applied[i], want(i), (*ServicePort).Equal) {
					n++
				}
			}
			return n
		}
		for gen, op := range fuzzobj.ServiceTracker(ops) {
			switch op.Kind {
			case fuzzobj.OpUpdate:
				got := tr.Update(op.Old, op.New)
				latest[op.Index] = op.New
				if n := differing(); got != (n > 0) || tr.Pending() != n {
					t.Fatalf("op %d: Update = %v, Pending = %d; want %d pending", gen, got, tr.Pending(), n)
				}
			case fuzzobj.OpDelete:
				got := tr.Update(op.Old, nil)
				latest[op.Index] = nil
				if n := differing(); got != (n > 0) || tr.Pending() != n {
					t.Fatalf("op %d: delete: Update = %v, Pending = %d; want %d pending", gen, got, tr.Pending(), n)
				}
			case fuzzobj.OpCheckout:
				m, ch := tr.Checkout()
				checkCheckout(t, m, ch, applied, want)
				for i := range services {
					applied[i] = want(i)
				}
				if tr.Pending() != 0 {
					t.Fatalf("op %d: %d pending after Checkout", gen, tr.Pending())
				}
			}
		}
	})
}

// checkCheckout compares one Checkout with what the model expects, given
// the ports of each service at the previous Checkout.
func checkCheckout(t *testing.T, m Map, ch Changes, applied [][]*ServicePort, want func(int) []*ServicePort) {
	t.Helper()
	wantServices := sets.New[types.NamespacedName]()
	wantPorts := sets.New[PortName]()
	wantHC := map[types.NamespacedName]uint16{}
	var wantStale []Frontend
	total := 0
	for i := range applied {
		nn := nsn("ns", fmt.Sprintf("s%d", i))
		cur := want(i)
		total += len(cur)
		if got := m.Service(nn); !slices.EqualFunc(got, cur, (*ServicePort).Equal) {
			t.Fatalf("service %s: map holds %v, want %v", nn, got, cur)
		}
		if !slices.EqualFunc(applied[i], cur, (*ServicePort).Equal) {
			wantServices.Insert(nn)
		}
		byName := map[PortName]*ServicePort{}
		for _, p := range applied[i] {
			byName[p.Name] = p
		}
		for _, p := range cur {
			if q, ok := byName[p.Name]; !ok || !q.Equal(p) {
				wantPorts.Insert(p.Name)
			}
			delete(byName, p.Name)
			if p.HealthCheckNodePort != 0 {
				wantHC[nn] = p.HealthCheckNodePort
			}
		}
		wantPorts.Insert(slices.Collect(maps.Keys(byName))...)

		kept := sets.New[Frontend]()
		for _, p := range cur {
			kept.Insert(p.frontends(nil)...)
		}
		gone := sets.New[Frontend]()
		for _, p := range applied[i] {
			if p.Protocol != v1.ProtocolTCP {
				gone.Insert(p.frontends(nil)...)
			}
		}
		wantStale = append(wantStale, gone.Difference(kept).UnsortedList()...)
	}
	slices.SortFunc(wantStale, Frontend.Compare)
	wantStale = slices.Compact(wantStale) // services may share a frontend
	if m.Len() != total {
		t.Fatalf("Map.Len = %d, want %d", m.Len(), total)
	}
	if !ch.Services.Equal(wantServices) {
		t.Fatalf("Changes.Services = %v, want %v", sortedNames(ch.Services), sortedNames(wantServices))
	}
	if !ch.Ports.Equal(wantPorts) {
		t.Fatalf("Changes.Ports = %v, want %v", ch.Ports.UnsortedList(), wantPorts.UnsortedList())
	}
	if !slices.Equal(ch.Stale, wantStale) {
		t.Fatalf("Changes.Stale = %v, want %v", ch.Stale, wantStale)
	}
	if !maps.Equal(ch.HealthCheckNodePorts, wantHC) {
		t.Fatalf("Changes.HealthCheckNodePorts = %v, want %v", ch.HealthCheckNodePorts, wantHC)
	}
}

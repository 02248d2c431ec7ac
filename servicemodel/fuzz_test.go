package servicemodel

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

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

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// fuzzPorts decodes spec.ports from b, 7 bytes a port, reaching every kind
// of name, protocol and number, valid or not.
func fuzzPorts(b []byte) []v1.ServicePort {
	names := []string{"", "a", "b", "A b"}
	protos := []v1.Protocol{"", v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "tcp", "ICMP"}
	var out []v1.ServicePort
	for ; len(b) >= 7; b = b[7:] {
		p := v1.ServicePort{
			Name:     names[int(b[0])%len(names)],
			Protocol: protos[int(b[1])%len(protos)],
			Port:     int32(uint16(b[2])<<8|uint16(b[3])) - 16,
			NodePort: int32(uint16(b[4])<<8|uint16(b[5])) - int32(b[6]&0x0f),
		}
		if b[6]&0x80 != 0 {
			p.Port += 70000
		}
		out = append(out, p)
	}
	return out
}

// fuzzIngress decodes a comma-separated list of ingress entries: "p:IP" is
// Proxy mode, "v:IP" explicit VIP mode, "h:NAME" hostname only.
func fuzzIngress(s string) []v1.LoadBalancerIngress {
	var out []v1.LoadBalancerIngress
	for _, e := range splitList(s) {
		switch {
		case strings.HasPrefix(e, "p:"):
			out = append(out, v1.LoadBalancerIngress{IP: e[2:], IPMode: ptr(v1.LoadBalancerIPModeProxy)})
		case strings.HasPrefix(e, "v:"):
			out = append(out, v1.LoadBalancerIngress{IP: e[2:], IPMode: ptr(v1.LoadBalancerIPModeVIP)})
		case strings.HasPrefix(e, "h:"):
			out = append(out, v1.LoadBalancerIngress{Hostname: e[2:]})
		default:
			out = append(out, v1.LoadBalancerIngress{IP: e})
		}
	}
	return out
}

func FuzzNormalize(f *testing.F) {
	f.Add("svc", "10.0.0.1", "", "", "ClusterIP", []byte{1, 2, 0, 69, 0, 0, 0}, "1.2.3.4,fd00::1", "10.0.0.0/8", "5.6.7.8", false, int32(0), "", int32(0), "", false)
	f.Add("svc", "fd00::1", "10.0.0.1,fd00::1", "4,6", "LoadBalancer", []byte{0, 1, 0, 96, 117, 48, 0, 0, 1, 0, 96, 117, 48, 0}, "fd00::2,,bogus", "::/0,fd00::/8", "p:fd00::3,h:lb,fd00::4", true, int32(31000), "ClientIP", int32(60), "", true)
	f.Add("svc", "None", "", "", "", []byte{}, "", "", "", false, int32(0), "", int32(0), "", false)
	f.Add("svc", "172.30.0.041", "", "", "NodePort", []byte{1, 5, 0, 0, 0, 0, 0x8f}, "127.0.0.1", " 1.2.3.4/24 ", "v:0.0.0.0", true, int32(-1), "ClientIP", int32(99999), "=mine", false)

	f.Fuzz(func(t *testing.T, name, clusterIP, clusterIPs, families, svcType string, ports []byte,
		externalIPs, ranges, ingress string, etpLocal bool, hcPort int32, sessionAffinity string, timeout int32,
		label string, ipv6 bool) {
		svc := makeService("ns", name, func(s *v1.Service) {
			s.Spec.ClusterIP = clusterIP
			s.Spec.ClusterIPs = splitList(clusterIPs)
			for _, fam := range splitList(families) {
				switch fam {
				case "4":
					fam = string(v1.IPv4Protocol)
				case "6":
					fam = string(v1.IPv6Protocol)
				}
				s.Spec.IPFamilies = append(s.Spec.IPFamilies, v1.IPFamily(fam))
			}
			s.Spec.Type = v1.ServiceType(svcType)
			s.Spec.Ports = fuzzPorts(ports)
			s.Spec.ExternalIPs = splitList(externalIPs)
			s.Spec.LoadBalancerSourceRanges = splitList(ranges)
			s.Status.LoadBalancer.Ingress = fuzzIngress(ingress)
			if etpLocal {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}
			s.Spec.HealthCheckNodePort = hcPort
			s.Spec.SessionAffinity = v1.ServiceAffinity(sessionAffinity)
			if timeout != 0 {
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(timeout)}}
			}
			if label != "" {
				s.Labels = map[string]string{LabelServiceProxyName: label[1:]}
			}
		})
		family := v1.IPv4Protocol
		if ipv6 {
			family = v1.IPv6Protocol
		}
		before := svc.DeepCopy()

		// The allocation-free fast paths must agree with upstream's
		// parsers on every input.
		for _, s := range append(splitList(clusterIPs), clusterIP, externalIPs, ingress) {
			ip, ok := parseIP(s)
			wantIP, wantOK := parseIPSloppy(s)
			if ip != wantIP || ok != wantOK {
				t.Errorf("parseIP(%q) = %v, %v; sloppy parser says %v, %v", s, ip, ok, wantIP, wantOK)
			}
		}
		for _, s := range append(splitList(ranges), ranges) {
			p, ok := parsePrefix(s)
			wantP, wantOK := parsePrefixSloppy(s)
			if p != wantP || ok != wantOK {
				t.Errorf("parsePrefix(%q) = %v, %v; sloppy parser says %v, %v", s, p, ok, wantP, wantOK)
			}
		}

		got, err := Normalize(svc, family, "mine")
		checkNormalized(t, svc, family, got, err)

		again, _ := Normalize(svc, family, "mine")
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

// fuzzService builds one of a small, overlapping set of services named
// "ns/s<i>" from the bits of v, so that random sequences revisit the same
// content, change it slightly, and make metadata-only updates (gen).
func fuzzService(i int, v byte, gen int) *v1.Service {
	return makeService("ns", fmt.Sprintf("s%d", i), func(s *v1.Service) {
		s.ResourceVersion = fmt.Sprint(gen)
		s.Spec.ClusterIP = []string{"10.0.0.1", "10.0.0.2", "fd00::1", v1.ClusterIPNone, "10.0.0.1"}[int(v&7)%5]
		switch v >> 3 & 3 {
		case 0:
			s.Spec.Ports = addPort(nil, "dns", v1.ProtocolUDP, 53, 0, 53)
		case 1:
			s.Spec.Ports = addPort(nil, "dns", v1.ProtocolUDP, 53, 30053, 53)
			s.Spec.Ports = addPort(s.Spec.Ports, "web", v1.ProtocolTCP, 80, 30080, 80)
		case 2:
			s.Spec.Ports = addPort(nil, "dns", v1.ProtocolTCP, 53, 0, 53)
			s.Spec.Ports = addPort(s.Spec.Ports, "sig", v1.ProtocolSCTP, 2905, 0, 2905)
		case 3:
			s.Spec.Ports = addPort(nil, "bad", v1.ProtocolUDP, 0, 0, 53)
		}
		if v&0x20 != 0 {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 31000 + int32(i)
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.5.5.5"}}
		}
		if v&0x40 != 0 {
			s.Spec.ExternalIPs = []string{"1.1.1.1", "bogus"}
		}
		if v&0x80 != 0 {
			s.Labels = map[string]string{LabelServiceProxyName: "other"}
		}
	})
}

// FuzzTracker applies a random sequence of updates, deletes and checkouts
// and compares the tracker with normalizing the latest objects directly.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3})
	f.Add([]byte{0, 0, 0x09, 1, 1, 0x21, 3, 2, 0, 0, 3, 0, 0, 0x0a, 3})
	f.Add([]byte{0, 2, 0x48, 3, 0, 2, 0x48, 3, 0, 2, 0x03, 0, 2, 0x48, 3, 2, 2, 0, 3})

	f.Fuzz(func(t *testing.T, ops []byte) {
		const services = 3
		tr := NewTracker(Config{Logger: quiet})
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
		for gen := 0; len(ops) >= 3; ops, gen = ops[3:], gen+1 {
			op, i, v := ops[0]%4, int(ops[1])%services, ops[2]
			switch op {
			case 0, 1:
				s := fuzzService(i, v, gen)
				got := tr.Update(latest[i], s)
				latest[i] = s
				if n := differing(); got != (n > 0) || tr.Pending() != n {
					t.Fatalf("op %d: Update = %v, Pending = %d; want %d pending", gen, got, tr.Pending(), n)
				}
			case 2:
				old := latest[i]
				if old == nil {
					old = fuzzService(i, v, gen)
				}
				got := tr.Update(old, nil)
				latest[i] = nil
				if n := differing(); got != (n > 0) || tr.Pending() != n {
					t.Fatalf("op %d: delete: Update = %v, Pending = %d; want %d pending", gen, got, tr.Pending(), n)
				}
			case 3:
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

package servicemodel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// summary is what the upstream tracker tests check after each sync.
type summary struct {
	Ports                int
	Services             []types.NamespacedName
	HealthCheckNodePorts map[types.NamespacedName]uint16
}

func summarize(m Map, ch Changes) summary {
	return summary{
		Ports:                m.Len(),
		Services:             sortedNames(ch.Services),
		HealthCheckNodePorts: ch.HealthCheckNodePorts,
	}
}

func sortedNames(s sets.Set[types.NamespacedName]) []types.NamespacedName {
	out := s.UnsortedList()
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func mapPorts(m Map) []*ServicePort {
	out := slices.Collect(m.All())
	slices.SortFunc(out, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}

func TestServiceMapUpdateHeadless(t *testing.T) {
	tr := NewTracker(Config{})
	tr.Update(nil, makeService("ns2", "headless", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = v1.ClusterIPNone
		s.Spec.Ports = addPort(s.Spec.Ports, "rpc", "UDP", 1234, 0, 0)
	}))
	tr.Update(nil, makeService("ns2", "headless-without-port", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = v1.ClusterIPNone
	}))
	want := summary{HealthCheckNodePorts: map[types.NamespacedName]uint16{}}
	if diff := cmp.Diff(want, summarize(tr.Checkout()), cmpOpts...); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestUpdateServiceTypeExternalName(t *testing.T) {
	tr := NewTracker(Config{})
	tr.Update(nil, makeService("ns2", "external-name", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeExternalName
		s.Spec.ClusterIP = "172.16.55.4"
		s.Spec.ExternalName = "foo2.bar.com"
		s.Spec.Ports = addPort(s.Spec.Ports, "blah", "UDP", 1235, 5321, 0)
	}))
	want := summary{HealthCheckNodePorts: map[types.NamespacedName]uint16{}}
	if diff := cmp.Diff(want, summarize(tr.Checkout()), cmpOpts...); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBuildServiceMapAddRemove(t *testing.T) {
	services := []*v1.Service{
		makeService("ns2", "cluster-ip", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeClusterIP
			s.Spec.ClusterIP = "172.16.55.4"
			s.Spec.Ports = addPort(s.Spec.Ports, "port1", "UDP", 1234, 4321, 0)
			s.Spec.Ports = addPort(s.Spec.Ports, "port2", "UDP", 1235, 5321, 0)
		}),
		makeService("ns2", "node-port", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIP = "172.16.55.10"
			s.Spec.Ports = addPort(s.Spec.Ports, "port1", "UDP", 345, 678, 0)
			s.Spec.Ports = addPort(s.Spec.Ports, "port2", "TCP", 344, 677, 0)
		}),
		makeService("ns1", "load-balancer", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.16.55.11"
			s.Spec.LoadBalancerIP = "5.6.7.8"
			s.Spec.Ports = addPort(s.Spec.Ports, "foobar", "UDP", 8675, 30061, 7000)
			s.Spec.Ports = addPort(s.Spec.Ports, "baz", "UDP", 8676, 30062, 7001)
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.4"}}
		}),
		makeService("ns1", "only-local-load-balancer", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.16.55.12"
			s.Spec.LoadBalancerIP = "5.6.7.8"
			s.Spec.Ports = addPort(s.Spec.Ports, "foobar2", "UDP", 8677, 30063, 7002)
			s.Spec.Ports = addPort(s.Spec.Ports, "baz", "UDP", 8678, 30064, 7003)
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.3"}}
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 345
		}),
	}
	all := []types.NamespacedName{
		nsn("ns1", "load-balancer"), nsn("ns1", "only-local-load-balancer"),
		nsn("ns2", "cluster-ip"), nsn("ns2", "node-port"),
	}

	tr := NewTracker(Config{})
	for _, s := range services {
		tr.Update(nil, s)
	}
	want := summary{
		Ports:                8,
		Services:             all,
		HealthCheckNodePorts: map[types.NamespacedName]uint16{nsn("ns1", "only-local-load-balancer"): 345},
	}
	if diff := cmp.Diff(want, summarize(tr.Checkout()), cmpOpts...); diff != "" {
		t.Errorf("after adding (-want +got):\n%s", diff)
	}

	// services[0] loses its first port and renames the other.
	oneService := makeService("ns2", "cluster-ip", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = "172.16.55.4"
		s.Spec.Ports = addPort(s.Spec.Ports, "p2", "UDP", 1235, 5321, 0)
	})
	tr.Update(services[0], oneService)
	tr.Update(services[1], nil)
	tr.Update(services[2], nil)
	tr.Update(services[3], nil)
	m, ch := tr.Checkout()
	want = summary{Ports: 1, Services: all, HealthCheckNodePorts: map[types.NamespacedName]uint16{}}
	if diff := cmp.Diff(want, summarize(m, ch), cmpOpts...); diff != "" {
		t.Errorf("after removing (-want +got):\n%s", diff)
	}
	wantPorts := []*ServicePort{wantPort(portName("ns2", "cluster-ip", "p2", v1.ProtocolUDP), "172.16.55.4", 1235, func(p *ServicePort) { p.NodePort = 5321 })}
	if diff := cmp.Diff(wantPorts, mapPorts(m), cmpOpts...); diff != "" {
		t.Errorf("map (-want +got):\n%s", diff)
	}
}

func TestBuildServiceMapServiceUpdate(t *testing.T) {
	servicev1 := makeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = "172.16.55.4"
		s.Spec.Ports = addPort(s.Spec.Ports, "p1", "UDP", 1234, 4321, 0)
		s.Spec.Ports = addPort(s.Spec.Ports, "p2", "TCP", 1235, 5321, 0)
	})
	servicev2 := makeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "172.16.55.4"
		s.Spec.LoadBalancerIP = "5.6.7.8"
		s.Spec.Ports = addPort(s.Spec.Ports, "p1", "UDP", 1234, 4321, 7002)
		s.Spec.Ports = addPort(s.Spec.Ports, "p2", "TCP", 1235, 5321, 7003)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.1.2.3"}}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 345
	})
	svc1 := []types.NamespacedName{nsn("ns1", "svc1")}
	hc := map[types.NamespacedName]uint16{nsn("ns1", "svc1"): 345}
	none := map[types.NamespacedName]uint16{}

	tr := NewTracker(Config{})
	steps := []struct {
		name     string
		old, new *v1.Service
		want     summary
	}{
		{"add ClusterIP", nil, servicev1, summary{2, svc1, none}},
		{"to LoadBalancer with eTP Local", servicev1, servicev2, summary{2, svc1, hc}},
		{"identical update", servicev2, servicev2, summary{2, nil, hc}},
		{"back to ClusterIP", servicev2, servicev1, summary{2, svc1, none}},
	}
	for _, st := range steps {
		tr.Update(st.old, st.new)
		if diff := cmp.Diff(st.want, summarize(tr.Checkout()), cmpOpts...); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}

func TestServiceCacheLeaks(t *testing.T) {
	svc := makeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = "172.16.55.4"
		s.Spec.Ports = addPort(s.Spec.Ports, "p1", "UDP", 1234, 4321, 0)
		s.Spec.Ports = addPort(s.Spec.Ports, "p2", "TCP", 1235, 5321, 0)
	})
	tr := NewTracker(Config{})
	tr.Update(nil, svc)
	if got := tr.Pending(); got != 1 {
		t.Errorf("after add: %d pending, want 1", got)
	}
	tr.Update(svc, nil)
	if got := tr.Pending(); got != 0 {
		t.Errorf("after delete: %d pending, want 0", got)
	}
}

// TestUpdateReturn checks that Update reports whether anything at all is
// pending, as upstream does, and that only normalized content counts.
func TestUpdateReturn(t *testing.T) {
	a := makeService("ns", "a", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.0.0.1"
		s.Spec.Ports = addPort(nil, "p", v1.ProtocolUDP, 53, 0, 53)
		s.Spec.ExternalIPs = []string{"1.1.1.1", "2.2.2.2"}
	})
	metadataOnly := a.DeepCopy()
	metadataOnly.ResourceVersion = "42"
	metadataOnly.Labels = map[string]string{"app": "a"}
	metadataOnly.Annotations = map[string]string{"note": "x"}
	metadataOnly.Spec.Ports[0].TargetPort.IntVal = 5353 // endpoints' business, not the service port's
	metadataOnly.Spec.ExternalIPs = []string{"2.2.2.2", "1.1.1.1", "1.1.1.1"}
	changed := a.DeepCopy()
	changed.Spec.Ports[0].Port = 54
	headless := makeService("ns", "h", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone })

	type step struct {
		name     string
		old, new *v1.Service
		checkout bool
		want     bool
		pending  int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"both nil", []step{{name: "nil", want: false}}},
		{"add", []step{{name: "add", new: a, want: true, pending: 1}}},
		{"add headless alone", []step{{name: "add", new: headless, want: false}}},
		{"add headless while another change is pending", []step{
			{name: "add a", new: a, want: true, pending: 1},
			{name: "add headless", new: headless, want: true, pending: 1},
			{name: "both nil", want: false, pending: 1},
		}},
		{"metadata-only update is no change", []step{
			{name: "add", new: a, want: true, pending: 1, checkout: true},
			{name: "metadata", old: a, new: metadataOnly, want: false},
			{name: "resync", old: metadataOnly, new: metadataOnly, want: false},
		}},
		{"change and change back", []step{
			{name: "add", new: a, want: true, pending: 1, checkout: true},
			{name: "change", old: a, new: changed, want: true, pending: 1},
			{name: "back", old: changed, new: metadataOnly, want: false},
		}},
		{"delete of an unknown service", []step{{name: "delete", old: a, want: false}}},
		{"delete then re-add before checkout", []step{
			{name: "add", new: a, want: true, pending: 1, checkout: true},
			{name: "delete", old: a, want: true, pending: 1},
			{name: "re-add", new: a, want: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(Config{})
			for _, st := range tt.steps {
				if got := tr.Update(st.old, st.new); got != st.want {
					t.Errorf("%s: Update = %v, want %v", st.name, got, st.want)
				}
				if got := tr.Pending(); got != st.pending {
					t.Errorf("%s: Pending = %d, want %d", st.name, got, st.pending)
				}
				if st.checkout {
					tr.Checkout()
				}
			}
			_, ch := tr.Checkout()
			if tt.steps[len(tt.steps)-1].pending == 0 && (ch.Services.Len() != 0 || ch.Ports.Len() != 0 || len(ch.Stale) != 0) {
				t.Errorf("no change pending, but Checkout reports %+v", ch)
			}
		})
	}
}

// TestCheckoutChanges checks Changes.Ports and Changes.Stale across one
// Checkout, for updates of one service.
func TestCheckoutChanges(t *testing.T) {
	svc := func(fn func(*v1.Service)) *v1.Service {
		return makeService("ns", "svc", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "10.0.0.1"
			s.Spec.ExternalIPs = []string{"1.1.1.1"}
			s.Spec.Ports = []v1.ServicePort{
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053},
				{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53, NodePort: 30054},
			}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.5.5.5"}}
			if fn != nil {
				fn(s)
			}
		})
	}
	fe := func(ip string, port uint16, proto v1.Protocol) Frontend {
		f := Frontend{Port: port, Protocol: proto}
		if ip != "" {
			f.IP = netip.MustParseAddr(ip)
		}
		return f
	}
	udp, tcp, sctp := v1.ProtocolUDP, v1.ProtocolTCP, v1.ProtocolSCTP
	dns := portName("ns", "svc", "dns", udp)
	dnsTCP := portName("ns", "svc", "dns-tcp", tcp)
	allUDP := []Frontend{fe("", 30053, udp), fe("1.1.1.1", 53, udp), fe("5.5.5.5", 53, udp), fe("10.0.0.1", 53, udp)}

	tests := []struct {
		name      string
		old, new  *v1.Service
		wantPorts []PortName
		wantStale []Frontend
	}{
		{
			name:      "add",
			new:       svc(nil),
			wantPorts: []PortName{dns, dnsTCP},
		},
		{
			name:      "delete a UDP service",
			old:       svc(nil),
			wantPorts: []PortName{dns, dnsTCP},
			wantStale: allUDP,
		},
		{
			name:      "delete a TCP service: nothing stale",
			old:       svc(func(s *v1.Service) { s.Spec.Ports = s.Spec.Ports[1:] }),
			wantPorts: []PortName{dnsTCP},
		},
		{
			name: "delete an SCTP service",
			old: svc(func(s *v1.Service) {
				s.Spec.Ports = []v1.ServicePort{{Name: "sig", Protocol: sctp, Port: 2905}}
			}),
			wantPorts: []PortName{portName("ns", "svc", "sig", sctp)},
			wantStale: []Frontend{fe("1.1.1.1", 2905, sctp), fe("5.5.5.5", 2905, sctp), fe("10.0.0.1", 2905, sctp)},
		},
		{
			name:      "remove the UDP port",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.Ports = s.Spec.Ports[1:] }),
			wantPorts: []PortName{dns},
			wantStale: allUDP,
		},
		{
			name:      "remove the TCP port",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.Ports = s.Spec.Ports[:1] }),
			wantPorts: []PortName{dnsTCP},
		},
		{
			name: "UDP port becomes TCP",
			old:  svc(nil),
			new: svc(func(s *v1.Service) {
				s.Spec.Ports[0].Protocol = tcp
				s.Spec.Ports[1].Port = 54
				s.Spec.Ports[1].NodePort = 0
			}),
			wantPorts: []PortName{dns, portName("ns", "svc", "dns", tcp), dnsTCP},
			wantStale: allUDP,
		},
		{
			name:      "UDP port renumbered",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.Ports[0].Port = 5353 }),
			wantPorts: []PortName{dns},
			wantStale: []Frontend{fe("1.1.1.1", 53, udp), fe("5.5.5.5", 53, udp), fe("10.0.0.1", 53, udp)},
		},
		{
			name:      "UDP node port changed",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.Ports[0].NodePort = 30055 }),
			wantPorts: []PortName{dns},
			wantStale: []Frontend{fe("", 30053, udp)},
		},
		{
			name:      "UDP port renamed: its frontends remain",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.Ports[0].Name = "domain" }),
			wantPorts: []PortName{dns, portName("ns", "svc", "domain", udp)},
		},
		{
			name: "external IP and VIP replaced",
			old:  svc(nil),
			new: svc(func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"2.2.2.2"}
				s.Status.LoadBalancer.Ingress[0].IP = "6.6.6.6"
			}),
			wantPorts: []PortName{dns, dnsTCP},
			wantStale: []Frontend{fe("1.1.1.1", 53, udp), fe("5.5.5.5", 53, udp)},
		},
		{
			name:      "cluster IP changed",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.ClusterIP = "10.0.0.2" }),
			wantPorts: []PortName{dns, dnsTCP},
			wantStale: []Frontend{fe("10.0.0.1", 53, udp)},
		},
		{
			name:      "service becomes headless",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone }),
			wantPorts: []PortName{dns, dnsTCP},
			wantStale: allUDP,
		},
		{
			name:      "only the TCP port changes",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.Ports[1].Port = 80 }),
			wantPorts: []PortName{dnsTCP},
		},
		{
			name:      "policy change modifies every port, nothing stale",
			old:       svc(nil),
			new:       svc(func(s *v1.Service) { s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal) }),
			wantPorts: []PortName{dns, dnsTCP},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(Config{})
			if tt.old != nil {
				tr.Update(nil, tt.old)
				tr.Checkout()
			}
			tr.Update(tt.old, tt.new)
			_, ch := tr.Checkout()
			gotPorts := ch.Ports.UnsortedList()
			slices.SortFunc(gotPorts, PortName.Compare)
			slices.SortFunc(tt.wantPorts, PortName.Compare)
			if diff := cmp.Diff(tt.wantPorts, gotPorts, cmpOpts...); diff != "" {
				t.Errorf("Ports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStale, ch.Stale, cmpOpts...); diff != "" {
				t.Errorf("Stale (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]types.NamespacedName{nsn("ns", "svc")}, sortedNames(ch.Services), cmpOpts...); diff != "" {
				t.Errorf("Services (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthCheckNodePorts(t *testing.T) {
	lb := func(name string, hc int32) *v1.Service {
		return makeService("ns", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "10.0.0.1"
			s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 30080, 80)
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = hc
		})
	}
	tr := NewTracker(Config{})
	steps := []struct {
		name     string
		old, new *v1.Service
		want     map[types.NamespacedName]uint16
	}{
		{"add a", nil, lb("a", 31000), map[types.NamespacedName]uint16{nsn("ns", "a"): 31000}},
		{"add b", nil, lb("b", 31001), map[types.NamespacedName]uint16{nsn("ns", "a"): 31000, nsn("ns", "b"): 31001}},
		{"change a", lb("a", 31000), lb("a", 31002), map[types.NamespacedName]uint16{nsn("ns", "a"): 31002, nsn("ns", "b"): 31001}},
		{"add c without one", nil, lb("c", 0), map[types.NamespacedName]uint16{nsn("ns", "a"): 31002, nsn("ns", "b"): 31001}},
		{"a loses its port", lb("a", 31002), lb("a", 0), map[types.NamespacedName]uint16{nsn("ns", "b"): 31001}},
		{"delete b", lb("b", 31001), nil, map[types.NamespacedName]uint16{}},
	}
	// A map handed out stays as it was while later Checkouts change theirs.
	var got []map[types.NamespacedName]uint16
	for _, st := range steps {
		tr.Update(st.old, st.new)
		_, ch := tr.Checkout()
		if diff := cmp.Diff(st.want, ch.HealthCheckNodePorts); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
		got = append(got, ch.HealthCheckNodePorts)
	}
	for i, st := range steps {
		if diff := cmp.Diff(st.want, got[i]); diff != "" {
			t.Errorf("%s, after the later steps (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestSnapshotsAreImmutable checks that a Map handed out stays as it was
// while later changes are applied.
func TestSnapshotsAreImmutable(t *testing.T) {
	svc := func(name, ip string) *v1.Service {
		return makeService("ns", name, func(s *v1.Service) {
			s.Spec.ClusterIP = ip
			s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 0, 80)
		})
	}
	tr := NewTracker(Config{})
	tr.Update(nil, svc("a", "10.0.0.1"))
	tr.Update(nil, svc("b", "10.0.0.2"))
	first, _ := tr.Checkout()
	want := mapPorts(first)

	tr.Update(svc("a", "10.0.0.1"), svc("a", "10.0.0.3"))
	tr.Update(svc("b", "10.0.0.2"), nil)
	tr.Update(nil, svc("c", "10.0.0.4"))
	second, _ := tr.Checkout()

	if diff := cmp.Diff(want, mapPorts(first), cmpOpts...); diff != "" {
		t.Errorf("first snapshot changed (-want +got):\n%s", diff)
	}
	wantSecond := []*ServicePort{
		wantPort(portName("ns", "a", "p", v1.ProtocolTCP), "10.0.0.3", 80),
		wantPort(portName("ns", "c", "p", v1.ProtocolTCP), "10.0.0.4", 80),
	}
	if diff := cmp.Diff(wantSecond, mapPorts(second), cmpOpts...); diff != "" {
		t.Errorf("second snapshot (-want +got):\n%s", diff)
	}
}

// TestTrackerConfig checks the family and proxy name options and that each
// skip is logged and counted once per Update.
func TestTrackerConfig(t *testing.T) {
	dual := makeService("ns", "dual", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.0.0.1"
		s.Spec.ClusterIPs = []string{"10.0.0.1", "fd00::1"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 0, 80)
		s.Spec.Ports = addPort(s.Spec.Ports, "bad", v1.ProtocolTCP, 0, 0, 80)
		s.Spec.ExternalIPs = []string{"nope"}
	})
	mine := makeService("ns", "mine", func(s *v1.Service) {
		s.Labels = map[string]string{LabelServiceProxyName: "mine"}
		s.Spec.ClusterIP = "fd00::2"
		s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 0, 80)
	})
	v4only := makeService("ns", "v4", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.0.0.3"
		s.Spec.Ports = addPort(nil, "p", v1.ProtocolTCP, 80, 0, 80)
	})

	var (
		skips []string
		logs  []string
	)
	tr := NewTracker(Config{
		Family:    v1.IPv6Protocol,
		ProxyName: "mine",
		OnSkip:    func(reason string) { skips = append(skips, reason) },
		Logger:    funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{Verbosity: 4}),
	})
	for _, s := range []*v1.Service{dual, mine, v4only} {
		tr.Update(nil, s)
	}
	m, _ := tr.Checkout()
	want := []*ServicePort{
		wantPort(portName("ns", "dual", "p", v1.ProtocolTCP), "fd00::1", 80),
		wantPort(portName("ns", "mine", "p", v1.ProtocolTCP), "fd00::2", 80),
	}
	if diff := cmp.Diff(want, mapPorts(m), cmpOpts...); diff != "" {
		t.Errorf("map (-want +got):\n%s", diff)
	}
	wantSkips := []string{ReasonInvalidExternalIP, ReasonInvalidPort, ReasonOtherFamily}
	if diff := cmp.Diff(wantSkips, skips); diff != "" {
		t.Errorf("OnSkip (-want +got):\n%s", diff)
	}
	if len(logs) != len(wantSkips) {
		t.Fatalf("got %d log lines, want %d: %q", len(logs), len(wantSkips), logs)
	}
	for i, reason := range wantSkips {
		if !strings.Contains(logs[i], fmt.Sprintf(`"reason"=%q`, reason)) {
			t.Errorf("log line %d = %s, want reason %q", i, logs[i], reason)
		}
	}

	// The zero Logger is silent, not missing: skipping through it is safe.
	NewTracker(Config{}).Update(nil, makeService("ns", "bad", func(s *v1.Service) { s.Spec.ClusterIP = "bogus" }))
}

// TestTrackerConcurrent updates services from several goroutines while
// another checks out, then checks the final snapshot. Run it with -race.
func TestTrackerConcurrent(t *testing.T) {
	const (
		writers  = 4
		services = 20
		rounds   = 50
	)
	svc := func(i, round int) *v1.Service {
		return makeService("ns", fmt.Sprintf("s%d", i), func(s *v1.Service) {
			s.Spec.ClusterIP = fmt.Sprintf("10.0.%d.%d", i, round%200+1)
			s.Spec.Ports = addPort(nil, "p", v1.ProtocolUDP, int32(round%100+1), 0, 80)
		})
	}
	tr := NewTracker(Config{})
	var (
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer owns services w, w+writers, ... so that the
			// last write of each is known.
			for round := range rounds {
				for i := w; i < services; i += writers {
					if round%7 == 3 {
						tr.Update(svc(i, round-1), nil)
					} else {
						tr.Update(svc(i, round-1), svc(i, round))
					}
					tr.Pending()
				}
			}
		}()
	}
	checkouts := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				checkouts <- n
				return
			default:
				m, _ := tr.Checkout()
				n += m.Len()
			}
		}
	}()
	wg.Wait()
	close(done)
	<-checkouts

	m, _ := tr.Checkout()
	var want []*ServicePort
	for i := range services {
		ports, _ := Normalize(svc(i, rounds-1), v1.IPv4Protocol, "")
		want = append(want, ports...)
	}
	slices.SortFunc(want, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	if diff := cmp.Diff(want, mapPorts(m), cmpOpts...); diff != "" {
		t.Errorf("final map (-want +got):\n%s", diff)
	}
	if tr.Pending() != 0 {
		t.Errorf("%d pending after the final Checkout", tr.Pending())
	}
}

// TestTrackerBoundsLogs checks that a service full of bad entries is counted
// entry by entry but logs only a bounded number of lines.
func TestTrackerBoundsLogs(t *testing.T) {
	var (
		skips int
		logs  []string
	)
	tr := NewTracker(Config{
		OnSkip: func(string) { skips++ },
		Logger: funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{}),
	})
	tr.Update(nil, makeService("ns", "bad", func(s *v1.Service) {
		s.Spec.ClusterIP = "10.0.0.1"
		for i := range 25 {
			s.Spec.Ports = addPort(s.Spec.Ports, fmt.Sprintf("p%d", i), v1.ProtocolTCP, 0, 0, 80)
		}
	}))
	if skips != 25 {
		t.Errorf("OnSkip called %d times, want 25", skips)
	}
	if len(logs) != maxLoggedSkips+1 || !strings.Contains(logs[maxLoggedSkips], `"count"=15`) {
		t.Errorf("got %d log lines, want %d ending with a count of 15: %q", len(logs), maxLoggedSkips+1, logs)
	}
}

package conntrack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	client    = netip.MustParseAddrPort("10.0.0.1:40000")
	dnsVIP    = netip.MustParseAddrPort("172.30.0.10:53")
	dnsExtIP  = netip.MustParseAddrPort("203.0.113.7:53")
	dnsLBVIP  = netip.MustParseAddrPort("198.51.100.9:53")
	otherVIP  = netip.MustParseAddrPort("172.30.0.20:53")
	nodePort  = netip.MustParseAddrPort("192.168.0.1:30053")
	nodePort2 = netip.MustParseAddrPort("192.168.0.2:30053")
	nodeOther = netip.MustParseAddrPort("192.168.0.1:30054")
	nodePort6 = netip.MustParseAddrPort("[fd00::2]:30053")
	epA       = netip.MustParseAddrPort("10.1.0.1:5353")
	epB       = netip.MustParseAddrPort("10.1.0.2:5353")
	sctpVIP   = netip.MustParseAddrPort("172.30.0.30:9000")
	sctpEP    = netip.MustParseAddrPort("10.1.0.3:9000")
	client6   = netip.MustParseAddrPort("[fd00::1]:40000")
	dnsVIP6   = netip.MustParseAddrPort("[fd00:30::10]:53")
	epA6      = netip.MustParseAddrPort("[fd00:1::1]:5353")
	dnsPort   = servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "dns"}, Port: "dns", Protocol: v1.ProtocolUDP}
	otherPort = servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "other"}, Protocol: v1.ProtocolUDP}
	sctpPort  = servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "sig"}, Protocol: v1.ProtocolSCTP}
)

// testFlows is one table holding a flow of every shape the filter must tell
// apart.
func testFlows() map[string]*netlink.ConntrackFlow {
	return map[string]*netlink.ConntrackFlow{
		"dns->A":       NewFlow(v1.ProtocolUDP, client, dnsVIP, epA),
		"dns->B":       NewFlow(v1.ProtocolUDP, client, dnsVIP, epB),
		"dns-unnatted": NewFlow(v1.ProtocolUDP, client, dnsVIP, dnsVIP),
		"dns-tcp->A":   NewFlow(v1.ProtocolTCP, client, dnsVIP, epA),
		"ext->A":       NewFlow(v1.ProtocolUDP, client, dnsExtIP, epA),
		"lb->A":        NewFlow(v1.ProtocolUDP, client, dnsLBVIP, epA),
		"other->A":     NewFlow(v1.ProtocolUDP, client, otherVIP, epA),
		"nodeport->A":  NewFlow(v1.ProtocolUDP, client, nodePort, epA),
		"nodeport->B":  NewFlow(v1.ProtocolUDP, client, nodePort, epB),
		// Sent to the node port while nothing DNATed it: refused by the
		// node, or answered by a process listening on that number.
		"nodeport-own":      NewFlow(v1.ProtocolUDP, client, nodePort, nodePort),
		"nodeport2-own":     NewFlow(v1.ProtocolUDP, client, nodePort2, nodePort2),
		"nodeport-tcp-own":  NewFlow(v1.ProtocolTCP, client, nodePort, nodePort),
		"nodeport-sctp-own": NewFlow(v1.ProtocolSCTP, client, nodePort, nodePort),
		"other-port-own":    NewFlow(v1.ProtocolUDP, client, nodeOther, nodeOther),
		"v6nodeport-own":    NewFlow(v1.ProtocolUDP, client6, nodePort6, nodePort6),
		"direct->A":         NewFlow(v1.ProtocolUDP, client, epA, epA),
		"sctp->ep":          NewFlow(v1.ProtocolSCTP, client, sctpVIP, sctpEP),
		"v6dns->A":          NewFlow(v1.ProtocolUDP, client6, dnsVIP6, epA6),
	}
}

// testState is what the dataplanes program after the changes under test:
// dns is served by B alone (A is terminating but still serving for it),
// other by nothing, sig by its one endpoint.
func testState(servingA bool) *dataplane.State {
	ep := func(a netip.AddrPort, serving bool) *endpoints.Endpoint {
		return &endpoints.Endpoint{Addr: a, EndpointInfo: affinity.EndpointInfo{Ready: serving, Serving: serving}}
	}
	return &dataplane.State{
		Family: v1.IPv4Protocol,
		Services: servicemodel.NewMap(
			&servicemodel.ServicePort{
				Name: dnsPort, ClusterIP: dnsVIP.Addr(), Port: 53, Protocol: v1.ProtocolUDP, NodePort: nodePort.Port(),
				ExternalIPs: []netip.Addr{dnsExtIP.Addr()}, LoadBalancerVIPs: []netip.Addr{dnsLBVIP.Addr()},
			},
			&servicemodel.ServicePort{Name: otherPort, ClusterIP: otherVIP.Addr(), Port: 53, Protocol: v1.ProtocolUDP},
			&servicemodel.ServicePort{Name: sctpPort, ClusterIP: sctpVIP.Addr(), Port: sctpVIP.Port(), Protocol: v1.ProtocolSCTP},
		),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			dnsPort:   {ep(epA, servingA), ep(epB, true)},
			otherPort: {ep(epA, false)},
			sctpPort:  {ep(sctpEP, true)},
		}),
	}
}

// testState6 is the IPv6 half of dns, served by A, with the same node port.
func testState6() *dataplane.State {
	return &dataplane.State{
		Family: v1.IPv6Protocol,
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: dnsPort, ClusterIP: dnsVIP6.Addr(), Port: 53, Protocol: v1.ProtocolUDP, NodePort: nodePort.Port(),
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			dnsPort: {{Addr: epA6, EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
		}),
	}
}

// testStateScaledToZero is testState with dns keeping only endpoints that
// no longer serve.
func testStateScaledToZero() *dataplane.State {
	st := testState(false)
	st.Endpoints = endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
		dnsPort:   {{Addr: epA}, {Addr: epB}},
		otherPort: {{Addr: epA}},
		sctpPort:  {{Addr: sctpEP, EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
	})
	return st
}

func udp(ip string, port uint16) servicemodel.Frontend {
	var a netip.Addr
	if ip != "" {
		a = netip.MustParseAddr(ip)
	}
	return servicemodel.Frontend{IP: a, Port: port, Protocol: v1.ProtocolUDP}
}

func TestClean(t *testing.T) {
	all := []string{}
	for name := range testFlows() {
		all = append(all, name)
	}
	tests := []struct {
		name    string
		stale   dataplane.StaleFlows
		deleted []string
		skips   []string
	}{
		{name: "nothing stale"},
		{
			name:    "stale cluster IP takes every flow to it, DNATed or not",
			stale:   dataplane.StaleFlows{Frontends: []servicemodel.Frontend{udp("172.30.0.10", 53)}},
			deleted: []string{"dns->A", "dns->B", "dns-unnatted"},
		},
		{
			name:    "IPv4-mapped frontend matches the IPv4 flow",
			stale:   dataplane.StaleFlows{Frontends: []servicemodel.Frontend{udp("::ffff:172.30.0.10", 53)}},
			deleted: []string{"dns->A", "dns->B", "dns-unnatted"},
		},
		{
			name:    "stale external IP and LoadBalancer VIP",
			stale:   dataplane.StaleFlows{Frontends: []servicemodel.Frontend{udp("203.0.113.7", 53), udp("198.51.100.9", 53)}},
			deleted: []string{"ext->A", "lb->A"},
		},
		{
			name:  "another port of a stale IP is kept",
			stale: dataplane.StaleFlows{Frontends: []servicemodel.Frontend{udp("172.30.0.10", 54)}},
		},
		{
			name:    "stale node port takes DNATed flows to the port only",
			stale:   dataplane.StaleFlows{Frontends: []servicemodel.Frontend{udp("", 30053)}},
			deleted: []string{"nodeport->A", "nodeport->B"},
		},
		{
			name:  "TCP is left to the kernel",
			stale: dataplane.StaleFlows{Frontends: []servicemodel.Frontend{{IP: dnsVIP.Addr(), Port: 53, Protocol: v1.ProtocolTCP}}},
			skips: []string{"unsupported protocol"},
		},
		{
			name: "SCTP frontend",
			stale: dataplane.StaleFlows{Frontends: []servicemodel.Frontend{
				{IP: sctpVIP.Addr(), Port: sctpVIP.Port(), Protocol: v1.ProtocolSCTP},
				// The same address as UDP must not take the SCTP flow.
				udp("172.30.0.30", 9000),
			}},
			deleted: []string{"sctp->ep"},
		},
		{
			name:    "stale endpoint without services: every DNATed flow to it",
			stale:   dataplane.StaleFlows{Endpoints: []endpoints.StaleEndpoint{{Port: dnsPort, Addr: epA}}},
			deleted: []string{"dns->A", "ext->A", "lb->A", "other->A", "nodeport->A"},
		},
		{
			name:    "stale endpoint narrowed to its service's frontends",
			stale:   dataplane.StaleFlows{Endpoints: []endpoints.StaleEndpoint{{Port: dnsPort, Addr: epA}}, State: testState(false)},
			deleted: []string{"dns->A", "ext->A", "lb->A", "nodeport->A"},
		},
		{
			name: "endpoint that left two ports, narrowed",
			stale: dataplane.StaleFlows{Endpoints: []endpoints.StaleEndpoint{
				{Port: dnsPort, Addr: epA}, {Port: otherPort, Addr: epA},
			}, State: testState(false)},
			deleted: []string{"dns->A", "ext->A", "lb->A", "nodeport->A", "other->A"},
		},
		{
			name: "endpoint of a port no longer in the state is left to the frontends",
			stale: dataplane.StaleFlows{Endpoints: []endpoints.StaleEndpoint{
				{Port: servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "x", Name: "gone"}, Protocol: v1.ProtocolUDP}, Addr: epA},
			}, State: testState(false)},
		},
		{
			// The node port, like kube-proxy's, is matched by protocol
			// and port alone, on any address: un-NATed flows to it go,
			// TCP, SCTP, other ports and the other family stay.
			name:  "changed port: flows not answered by a serving endpoint, un-NATed ones included",
			stale: dataplane.StaleFlows{Ports: []servicemodel.PortName{dnsPort}, State: testState(false)},
			deleted: []string{"dns->A", "dns-unnatted", "ext->A", "lb->A",
				"nodeport->A", "nodeport-own", "nodeport2-own"},
		},
		{
			name:    "changed port whose endpoints all still serve",
			stale:   dataplane.StaleFlows{Ports: []servicemodel.PortName{dnsPort}, State: testState(true)},
			deleted: []string{"dns-unnatted", "nodeport-own", "nodeport2-own"},
		},
		{
			name:    "changed port with nothing serving keeps its node port flows",
			stale:   dataplane.StaleFlows{Ports: []servicemodel.PortName{dnsPort}, State: testStateScaledToZero()},
			deleted: []string{"dns->A", "dns->B", "dns-unnatted", "ext->A", "lb->A"},
		},
		{
			name:    "changed port without a node port",
			stale:   dataplane.StaleFlows{Ports: []servicemodel.PortName{otherPort}, State: testState(false)},
			deleted: []string{"other->A"},
		},
		{
			name:    "changed port in the IPv6 table reconciles its node port there only",
			stale:   dataplane.StaleFlows{Family: v1.IPv6Protocol, Ports: []servicemodel.PortName{dnsPort}, State: testState6()},
			deleted: []string{"v6nodeport-own"},
		},
		{
			name: "stale node port keeps un-NATed flows even when reconciled elsewhere",
			stale: dataplane.StaleFlows{
				Frontends: []servicemodel.Frontend{udp("", 30054)},
				Ports:     []servicemodel.PortName{otherPort},
				State:     testState(false),
			},
			deleted: []string{"other->A"},
		},
		{
			name:    "changed SCTP port",
			stale:   dataplane.StaleFlows{Ports: []servicemodel.PortName{sctpPort}, State: testState(false)},
			deleted: nil,
		},
		{
			name: "changed ports that cannot be reconciled",
			stale: dataplane.StaleFlows{Ports: []servicemodel.PortName{
				{NamespacedName: types.NamespacedName{Namespace: "x", Name: "gone"}, Protocol: v1.ProtocolUDP},
			}, State: testState(false)},
		},
		{
			name:  "changed ports need a state",
			stale: dataplane.StaleFlows{Ports: []servicemodel.PortName{dnsPort, {Protocol: v1.ProtocolTCP}}},
			skips: []string{"no state", "unsupported protocol"},
		},
		{
			name:    "SCTP endpoint",
			stale:   dataplane.StaleFlows{Endpoints: []endpoints.StaleEndpoint{{Port: sctpPort, Addr: sctpEP}}},
			deleted: []string{"sctp->ep"},
		},
		{
			name: "bad items are skipped, the rest is cleaned",
			stale: dataplane.StaleFlows{
				Frontends: []servicemodel.Frontend{
					udp("172.30.0.10", 0),
					udp("fd00:30::10", 53),
					{IP: dnsVIP.Addr(), Port: 53, Protocol: "ICMP"},
					udp("172.30.0.10", 53),
				},
				Endpoints: []endpoints.StaleEndpoint{
					{Port: dnsPort},
					{Port: dnsPort, Addr: netip.AddrPortFrom(epA.Addr(), 0)},
					{Port: dnsPort, Addr: epA6},
					{Port: servicemodel.PortName{Protocol: v1.ProtocolTCP}, Addr: epA},
				},
			},
			deleted: []string{"dns->A", "dns->B", "dns-unnatted"},
			skips: []string{"invalid port", "wrong family", "unsupported protocol",
				"invalid address", "invalid address", "wrong family", "unsupported protocol"},
		},
		{
			name: "IPv6 cleaning leaves the IPv4 table alone",
			stale: dataplane.StaleFlows{
				Family:    v1.IPv6Protocol,
				Frontends: []servicemodel.Frontend{udp("fd00:30::10", 53), udp("", 30053)},
				Endpoints: []endpoints.StaleEndpoint{{Port: dnsPort, Addr: epA}},
			},
			deleted: []string{"v6dns->A"},
			skips:   []string{"wrong family"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flows := testFlows()
			table := NewFakeTable()
			names := map[*netlink.ConntrackFlow]string{}
			for _, name := range all {
				table.Add(flows[name])
				names[flows[name]] = name
			}
			var skips []string
			c := New(Config{Netlink: table, Logger: logr.Discard(),
				OnSkip: func(r string) { skips = append(skips, r) }})
			n, err := c.CleanStale(context.Background(), tt.stale)
			if err != nil {
				t.Fatal(err)
			}
			left := map[string]bool{}
			for _, f := range table.Flows() {
				left[names[f]] = true
			}
			var deleted []string
			for _, name := range all {
				if !left[name] {
					deleted = append(deleted, name)
				}
			}
			if diff := cmp.Diff(setOf(tt.deleted), setOf(deleted)); diff != "" {
				t.Errorf("deleted flows (-want +got):\n%s", diff)
			}
			if n != len(tt.deleted) {
				t.Errorf("Clean returned %d, want %d", n, len(tt.deleted))
			}
			if diff := cmp.Diff(tt.skips, skips); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			if len(tt.deleted) > 0 && table.Dumps() != 1 {
				t.Errorf("table dumped %d times, want once", table.Dumps())
			}
		})
	}
}

func setOf(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}

func TestCleanTouchesNothingWithNothingToMatch(t *testing.T) {
	table := NewFakeTable(NewFlow(v1.ProtocolUDP, client, dnsVIP, epA))
	c := New(Config{Netlink: table, Logger: logr.Discard()})
	for _, s := range []dataplane.StaleFlows{
		{},
		{Frontends: []servicemodel.Frontend{{IP: dnsVIP.Addr(), Port: 53, Protocol: v1.ProtocolTCP}}},
		{Ports: []servicemodel.PortName{{NamespacedName: types.NamespacedName{Namespace: "x", Name: "gone"}, Protocol: v1.ProtocolUDP}}, State: testState(false)},
	} {
		if n, err := c.CleanStale(context.Background(), s); n != 0 || err != nil {
			t.Errorf("CleanStale(%v) = %d, %v; want 0, nil", s, n, err)
		}
	}
	if table.Dumps() != 0 {
		t.Errorf("table dumped %d times, want 0", table.Dumps())
	}
}

func TestCleanErrors(t *testing.T) {
	boom := errors.New("netlink: operation not permitted")
	interrupted := make([]error, MaxAttempts)
	for i := range interrupted {
		interrupted[i] = netlink.ErrDumpInterrupted
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	type result struct {
		Deleted, Dumps, Left int
		Err                  string
		Interrupted, Typed   bool
	}
	tests := []struct {
		name string
		ctx  context.Context
		errs []error
		want result
	}{
		{
			name: "one interrupted dump is retried and finishes the job",
			errs: []error{netlink.ErrDumpInterrupted},
			want: result{Deleted: 4, Dumps: 2},
		},
		{
			name: "interrupted every time",
			errs: interrupted,
			// Each interrupted dump sees half of what is left: 2, 1, 0, ...
			want: result{Deleted: 3, Dumps: MaxAttempts, Left: 1, Interrupted: true, Typed: true,
				Err: "conntrack: cleaning IPv4 table (3 entries deleted): results may be incomplete or inconsistent"},
		},
		{
			name: "other errors are not retried",
			errs: []error{boom},
			want: result{Dumps: 1, Left: 4, Typed: true,
				Err: "conntrack: cleaning IPv4 table (0 entries deleted): netlink: operation not permitted"},
		},
		{
			name: "a kernel without nf_conntrack_netlink",
			errs: []error{unix.EINVAL},
			want: result{Dumps: 1, Left: 4, Typed: true,
				Err: "conntrack: cleaning IPv4 table (0 entries deleted): invalid argument (what a kernel without nf_conntrack_netlink answers; load it with modprobe nf_conntrack_netlink)"},
		},
		{
			name: "canceled context",
			ctx:  canceled,
			want: result{Left: 4, Typed: true, Err: "conntrack: cleaning IPv4 table (0 entries deleted): context canceled"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := NewFakeTable()
			for i := range 4 {
				table.Add(NewFlow(v1.ProtocolUDP, netip.AddrPortFrom(client.Addr(), uint16(40000+i)), dnsVIP, epA))
			}
			table.FailNext(tt.errs...)
			c := New(Config{Netlink: table, Logger: logr.Discard()})
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			n, err := c.CleanStale(ctx, dataplane.StaleFlows{Frontends: []servicemodel.Frontend{udp("172.30.0.10", 53)}})
			var typed *Error
			got := result{Deleted: n, Dumps: table.Dumps(), Left: len(table.Flows()),
				Interrupted: errors.Is(err, netlink.ErrDumpInterrupted), Typed: errors.As(err, &typed)}
			if err != nil {
				got.Err = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if typed != nil && typed.Deleted != n {
				t.Errorf("Error.Deleted = %d, Clean returned %d", typed.Deleted, n)
			}
		})
	}
}

func TestFamilies(t *testing.T) {
	table := NewFakeTable(NewFlow(v1.ProtocolUDP, client, dnsVIP, epA), NewFlow(v1.ProtocolUDP, client6, dnsVIP6, epA6))
	c := New(Config{Netlink: table, Logger: logr.Discard()})
	type result struct {
		Deleted int
		Err     string
		Invalid bool
	}
	for _, tt := range []struct {
		family v1.IPFamily
		fe     servicemodel.Frontend
		want   result
	}{
		{"", udp("172.30.0.10", 53), result{Deleted: 1}},
		{v1.IPv4Protocol, udp("172.30.0.10", 53), result{}},
		{v1.IPv6Protocol, udp("fd00:30::10", 53), result{Deleted: 1}},
		{"IPv5", udp("172.30.0.10", 53), result{Err: `conntrack: invalid IP family "IPv5"`, Invalid: true}},
	} {
		n, err := c.CleanStale(context.Background(), dataplane.StaleFlows{Family: tt.family, Frontends: []servicemodel.Frontend{tt.fe}})
		got := result{Deleted: n, Invalid: errors.Is(err, ErrInvalidFamily)}
		if err != nil {
			got.Err = err.Error()
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("family %q (-want +got):\n%s", tt.family, diff)
		}
	}
}

func TestDefaults(t *testing.T) {
	// The zero Config talks to the kernel through a handle of the calling
	// thread's namespace; that it is usable is what the kernel tests show.
	c := New(Config{})
	if _, ok := c.nl.(*netlink.Handle); !ok || c.log.GetSink() != nil {
		t.Errorf("New(Config{}) = %+v, want a netlink handle and the silent zero Logger", c)
	}
}

func TestNewFlow(t *testing.T) {
	got := NewFlow(v1.ProtocolUDP, client, dnsVIP, epA)
	want := "udp\t17 src=10.0.0.1 dst=172.30.0.10 sport=40000 dport=53 packets=0 bytes=0\tsrc=10.1.0.1 dst=10.0.0.1 sport=5353 dport=40000 packets=0 bytes=0 mark=0x0 "
	if s := got.String(); len(s) < len(want) || s[:len(want)] != want {
		t.Errorf("NewFlow = %q, want prefix %q", s, want)
	}
	for p, want := range map[v1.Protocol]uint8{v1.ProtocolTCP: 6, v1.ProtocolUDP: 17, v1.ProtocolSCTP: 132, "GRE": 0} {
		if got := NewFlow(p, client, dnsVIP, epA).Forward.Protocol; got != want {
			t.Errorf("NewFlow(%s) protocol = %d, want %d", p, got, want)
		}
	}
	if got := NewFlow(v1.ProtocolUDP, client6, dnsVIP6, epA6).FamilyType; got != 10 {
		t.Errorf("IPv6 flow family = %d, want AF_INET6", got)
	}
}

func BenchmarkClean(b *testing.B) {
	table := NewFakeTable()
	for i := range 100_000 {
		vip := netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 30, byte(i >> 8), byte(i)}), 53)
		table.Add(NewFlow(v1.ProtocolUDP, client, vip, epB))
	}
	c := New(Config{Netlink: table, Logger: logr.Discard()})
	var stale dataplane.StaleFlows
	for i := range 100 {
		stale.Endpoints = append(stale.Endpoints, endpoints.StaleEndpoint{Port: dnsPort, Addr: netip.MustParseAddrPort(fmt.Sprintf("10.2.0.%d:53", i))})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.CleanStale(context.Background(), stale); err != nil {
			b.Fatal(err)
		}
	}
}

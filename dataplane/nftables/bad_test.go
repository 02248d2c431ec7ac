package nftables

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestBadInputIsSkipped gives the dataplane a State no Builder would make:
// every bad port, address and endpoint is left out and reported, the good
// ones are programmed, and nothing panics.
func TestBadInputIsSkipped(t *testing.T) {
	name := func(ns, n, port string) servicemodel.PortName {
		return servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: n}, Port: port, Protocol: v1.ProtocolTCP}
	}
	good := name("ns", "good", "p")
	ip := netip.MustParseAddr
	ports := []*servicemodel.ServicePort{
		{Name: good, ClusterIP: ip("172.30.0.1"), Port: 80, Protocol: v1.ProtocolTCP,
			ExternalIPs:              []netip.Addr{ip("fd00::1"), ip("::ffff:1.2.3.4"), ip("192.168.99.1")},
			LoadBalancerVIPs:         []netip.Addr{{}, ip("1.2.3.4")},
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("203.0.113.0/24")}},
		{Name: name("ns", `bad"name`, "p"), ClusterIP: ip("172.30.0.2"), Port: 80, Protocol: v1.ProtocolTCP},
		{Name: name("ns", "v6", "p"), ClusterIP: ip("fd00::2"), Port: 80, Protocol: v1.ProtocolTCP},
		{Name: name("ns", "port0", "p"), ClusterIP: ip("172.30.0.3"), Protocol: v1.ProtocolTCP},
		{Name: name("ns", "icmp", "p"), ClusterIP: ip("172.30.0.4"), Port: 80, Protocol: "ICMP"},
		{Name: name("ns", "sticky", "p"), ClusterIP: ip("172.30.0.5"), Port: 80, Protocol: v1.ProtocolTCP,
			SessionAffinity: affinity.SessionAffinity{ClientIP: true, Timeout: 200 * 24 * time.Hour}},
	}
	ready := affinity.EndpointInfo{Ready: true, Serving: true}
	s := &dataplane.State{
		Family:   v1.IPv4Protocol,
		Node:     dataplane.Node{Name: "n", IPs: []netip.Addr{ip("192.168.0.2")}},
		Services: servicemodel.NewMap(ports...),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			good: {
				{Addr: netip.MustParseAddrPort("10.0.0.1:8080"), EndpointInfo: ready},
				{Addr: netip.MustParseAddrPort("[fd00::9]:8080"), EndpointInfo: ready},
				{Addr: netip.MustParseAddrPort("10.0.0.2:0"), EndpointInfo: ready},
			},
		}),
	}
	var skipped []string
	fake := newFake(false)
	d, err := New(Config{NFT: fake, OnSkip: func(reason string) { skipped = append(skipped, reason) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	slices.Sort(skipped)
	want := []string{
		"cluster IP missing or of another family",
		"endpoint invalid or of another family",
		"endpoint invalid or of another family",
		"external IP invalid or of another family",
		"external IP invalid or of another family",
		"load balancer IP invalid or of another family",
		"port 0",
		"service or port name not usable in a rule",
		"session affinity timeout out of range",
		"source range invalid or of another family",
		"unsupported protocol",
	}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if n := testutil.ToFloat64(d.metrics.skipped); n != float64(len(want)) {
		t.Errorf("skipped metric = %v, want %d", n, len(want))
	}
	dump := fake.Dump()
	for _, bad := range []string{"fd00", "ffff", "172.30.0.2", "172.30.0.3", "172.30.0.4", "172.30.0.5", "10.0.0.2"} {
		if strings.Contains(dump, bad) {
			t.Errorf("the table holds %q:\n%s", bad, dump)
		}
	}
	for _, ok := range []string{"192.168.99.1 . tcp . 80", "1.2.3.4 . tcp . 80", "10.0.0.1 . 8080", "203.0.113.0/24"} {
		if !strings.Contains(dump, ok) {
			t.Errorf("the table lacks %q:\n%s", ok, dump)
		}
	}
}

// TestRenderWorkersSameRules: rendering on several goroutines writes the
// script one goroutine writes, and reports the same skips in the same order.
func TestRenderWorkersSameRules(t *testing.T) {
	ready := affinity.EndpointInfo{Ready: true, Serving: true}
	var ports []*servicemodel.ServicePort
	eps := map[servicemodel.PortName][]*endpoints.Endpoint{}
	for i := range 1500 {
		a := netip.AddrFrom4([4]byte{172, 30, byte(i / 250), byte(i%250 + 1)})
		pn := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}, Port: "p", Protocol: v1.ProtocolTCP}
		sp := &servicemodel.ServicePort{Name: pn, ClusterIP: a, Port: 80, Protocol: v1.ProtocolTCP}
		switch i % 5 {
		case 1:
			sp.Port = 0
		case 2:
			sp.Name.Name += `"`
		case 3:
			sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("fd00::1"), a.Next()}
		case 4:
			sp.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: time.Duration(1+i%7) * time.Hour}
		}
		ports = append(ports, sp)
		eps[sp.Name] = []*endpoints.Endpoint{
			{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)}), 8080), EndpointInfo: ready},
			{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(i / 250), byte(i%250 + 1)}), uint16(i%3)), EndpointInfo: ready},
		}
	}
	s := &dataplane.State{
		Family:    v1.IPv4Protocol,
		Node:      dataplane.Node{Name: "n", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
		Services:  servicemodel.NewMap(ports...),
		Endpoints: endpoints.NewMap(eps),
	}
	render := func(workers int) ([]byte, []string) {
		var skips []string
		d, err := New(Config{NFT: newFake(false), RenderWorkers: workers, OnSkip: func(r string) { skips = append(skips, r) }})
		if err != nil {
			t.Fatal(err)
		}
		out, err := d.Render(s)
		if err != nil {
			t.Fatal(err)
		}
		return out, skips
	}
	want, wantSkips := render(1)
	if len(wantSkips) < 600 {
		t.Fatalf("%d inputs skipped; the test needs more", len(wantSkips))
	}
	for _, workers := range []int{2, 4, 5} {
		got, gotSkips := render(workers)
		if !bytes.Equal(got, want) {
			t.Errorf("%d workers: the script differs from one worker's:\n%s", workers, cmp.Diff(string(want), string(got)))
		}
		if diff := cmp.Diff(wantSkips, gotSkips); diff != "" {
			t.Errorf("%d workers: skips (-one worker +these):\n%s", workers, diff)
		}
	}
	if _, err := New(Config{NFT: newFake(false), RenderWorkers: -1}); err == nil {
		t.Error("New accepted RenderWorkers -1")
	}
}

package iptables

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func familyOf(s string) v1.IPFamily { return v1.IPFamily(s) }

func cmpDiffAny(a, b any) string { return cmp.Diff(a, b) }

// badAddrs are addresses of every kind, most of them wrong somewhere.
var badAddrs = []netip.Addr{
	{}, netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("::"), netip.MustParseAddr("::ffff:10.0.0.1"),
	netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("fd00:9::1"),
	netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("255.255.255.255"),
}

var badNames = []string{"ok", "", "has space", `quo"te`, "back\\slash", strings.Repeat("x", 70), "new\nline", "a/b", "ü"}

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// badState builds a State whose every field may be invalid: what a buggy
// source or a fuzzed object could produce.
func badState(r *rand.Rand, v6 bool) *dataplane.State {
	eps := map[servicemodel.PortName][]*endpoints.Endpoint{}
	ports := badServices(r, "", eps)
	return badStateOf(r, v6, ports, eps)
}

// badServices returns twelve service ports, whose names start with
// prefix, and puts their endpoints into eps.
func badServices(r *rand.Rand, prefix string, eps map[servicemodel.PortName][]*endpoints.Endpoint) []*servicemodel.ServicePort {
	var ports []*servicemodel.ServicePort
	for i := range 12 {
		name := servicemodel.PortName{
			NamespacedName: types.NamespacedName{Namespace: pick(r, badNames), Name: fmt.Sprintf("%ss%d%s", prefix, i, pick(r, badNames))},
			Port:           pick(r, badNames),
			Protocol:       pick(r, []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "ICMP", ""}),
		}
		sp := &servicemodel.ServicePort{
			Name: name, ClusterIP: pick(r, badAddrs), Port: uint16(r.IntN(3)), Protocol: name.Protocol,
			NodePort: uint16(r.IntN(2) * 30000), HealthCheckNodePort: uint16(r.IntN(2) * 31000),
			InternalPolicyLocal: r.IntN(2) == 0, ExternalPolicyLocal: r.IntN(2) == 0,
		}
		if r.IntN(2) == 0 {
			sp.Protocol = pick(r, []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP})
		}
		for range r.IntN(40) {
			sp.ExternalIPs = append(sp.ExternalIPs, pick(r, badAddrs))
			sp.LoadBalancerVIPs = append(sp.LoadBalancerVIPs, pick(r, badAddrs))
		}
		for range r.IntN(4) {
			sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges,
				pick(r, []netip.Prefix{{}, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
					netip.PrefixFrom(netip.MustParseAddr("10.1.2.3"), 8), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("10.0.0.0/8")}))
		}
		if r.IntN(3) == 0 {
			sp.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: time.Duration(r.IntN(3)*50000) * time.Second}
		}
		ports = append(ports, sp)
		var list []*endpoints.Endpoint
		for range r.IntN(6) {
			list = append(list, &endpoints.Endpoint{
				Addr:         netip.AddrPortFrom(pick(r, badAddrs), uint16(r.IntN(2)*8080)),
				EndpointInfo: affinity.EndpointInfo{Ready: r.IntN(2) == 0, Serving: true, Local: r.IntN(2) == 0},
			})
		}
		eps[name] = list
	}
	return ports
}

// badStateOf is a State of ports and eps on a node that may be invalid,
// with any settings Settings.Validate accepts: a dataplane refuses the
// others whole (TestRefusesInvalidSettings).
func badStateOf(r *rand.Rand, v6 bool, ports []*servicemodel.ServicePort, eps map[servicemodel.PortName][]*endpoints.Endpoint) *dataplane.State {
	s := &dataplane.State{
		Family: v1.IPv4Protocol,
		Node: dataplane.Node{Name: "n", IPs: []netip.Addr{pick(r, badAddrs), pick(r, badAddrs), netip.MustParseAddr("192.168.0.2")},
			PodCIDRs: []netip.Prefix{{}, netip.MustParsePrefix("fd00::/64")}},
		Settings: dataplane.Settings{
			MasqueradeAll: r.IntN(2) == 0, LocalhostNodePorts: r.IntN(2) == 0,
			LocalDetector: dataplane.LocalDetector{
				Mode:      pick(r, []dataplane.LocalMode{"", "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"}),
				CIDRs:     []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/48")},
				Interface: pick(r, []string{"", "cbr0", "veth", "abcdefghijklmno"}),
			},
			NodePortAddresses: []netip.Prefix{pick(r, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("192.168.0.0/16")})},
		},
		Services:  servicemodel.NewMap(ports...),
		Endpoints: endpoints.NewMap(eps),
	}
	if v6 {
		s.Family = v1.IPv6Protocol
	}
	return s
}

// TestBadStatesRenderValidInput checks against the strict model that bad
// States never produce restore input iptables would reject, in full and in
// partial syncs; the kernel test does the same against the kernel.
func TestBadStatesRenderValidInput(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		d, fake := newFake(t, Config{Family: family(v6)})
		for seed := range uint64(40) {
			s := badState(rand.New(rand.NewPCG(seed, 1)), v6)
			if err := d.Sync(t.Context(), s); err != nil {
				t.Fatalf("v6=%v seed %d: %v", v6, seed, err)
			}
			if !strings.Contains(dump(fake), "PK-SERVICES") {
				t.Fatalf("nothing programmed")
			}
		}
	}
}

// TestRenderWorkersSameRules: rendering on several goroutines writes the
// rules one goroutine writes, and reports the same skips in the same order.
func TestRenderWorkersSameRules(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	eps := map[servicemodel.PortName][]*endpoints.Endpoint{}
	var ports []*servicemodel.ServicePort
	for i := range 150 {
		ports = append(ports, badServices(r, fmt.Sprintf("b%d-", i), eps)...)
	}
	for i := range 1500 {
		g := genSvc(r, i)
		ports = append(ports, g.ports...)
		maps.Copy(eps, g.eps)
	}
	s := badStateOf(r, false, ports, eps)
	render := func(workers int) ([]byte, []string) {
		var skips []string
		d, _ := newFake(t, Config{RenderWorkers: workers, OnSkip: func(r string) { skips = append(skips, r) }})
		out, err := d.Render(s)
		if err != nil {
			t.Fatal(err)
		}
		return out, skips
	}
	want, wantSkips := render(1)
	if len(wantSkips) == 0 {
		t.Fatal("no input was skipped; the test needs some")
	}
	for _, workers := range []int{2, 4, 7} {
		got, gotSkips := render(workers)
		if !bytes.Equal(got, want) {
			t.Errorf("%d workers: the rules differ from one worker's:\n%s", workers, cmp.Diff(string(want), string(got)))
		}
		if diff := cmp.Diff(wantSkips, gotSkips); diff != "" {
			t.Errorf("%d workers: skips (-one worker +these):\n%s", workers, diff)
		}
	}
	if _, err := New(Config{RenderWorkers: -1, Runner: xtables.NewFakeRunner()}); err == nil {
		t.Error("New accepted RenderWorkers -1")
	}
}

// FuzzRender derives a State from arbitrary bytes and requires the full
// render and a partial sync to it to be accepted by the strict model.
func FuzzRender(f *testing.F) {
	f.Add(uint64(1), uint64(2), false)
	f.Add(uint64(7), uint64(0), true)
	f.Fuzz(func(t *testing.T, a, b uint64, v6 bool) {
		d, _ := newFake(t, Config{Family: family(v6)})
		first := badState(rand.New(rand.NewPCG(a, b)), v6)
		if err := d.Sync(t.Context(), first); err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(t.Context(), badState(rand.New(rand.NewPCG(b, a)), v6)); err != nil {
			t.Fatal(err)
		}
		out, err := d.Render(first)
		if err != nil {
			t.Fatal(err)
		}
		if err := xtables.NewRuleset().Apply(out); err != nil {
			t.Fatal(err)
		}
	})
}

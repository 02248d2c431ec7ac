package iptables

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The node of the generated states.
var (
	genNodeIPs = []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("192.168.1.2")}
	genPodCIDR = netip.MustParsePrefix("10.0.0.0/8")
)

// genService is a randomly chosen service: its ports and endpoints.
type genService struct {
	ports []*servicemodel.ServicePort
	eps   map[servicemodel.PortName][]*endpoints.Endpoint
}

func pickN[T any](r *rand.Rand, pool []T, max int) []T {
	n := r.IntN(max + 1)
	var out []T
	for _, i := range r.Perm(len(pool))[:min(n, len(pool))] {
		out = append(out, pool[i])
	}
	return out
}

// genSvc makes service i with random features. Addresses are drawn so that
// no two services share a frontend: overlaps are a bad state, not a
// semantic the property test is about.
func genSvc(r *rand.Rand, i int) genService {
	nn := types.NamespacedName{Namespace: fmt.Sprintf("ns%d", i%3), Name: fmt.Sprintf("svc%d", i)}
	g := genService{eps: map[servicemodel.PortName][]*endpoints.Endpoint{}}
	cip := netip.AddrFrom4([4]byte{172, 30, byte(i / 250), byte(i%250 + 1)})
	extIP := netip.AddrFrom4([4]byte{192, 168, 99, byte(i%250 + 1)})
	lbIP := netip.AddrFrom4([4]byte{5, 6, byte(i / 250), byte(i%250 + 1)})
	typ := r.IntN(4) // ClusterIP, NodePort, LoadBalancer, with externalIPs
	itpLocal, etpLocal := r.IntN(4) == 0, r.IntN(3) == 0
	var sa affinity.SessionAffinity
	if r.IntN(4) == 0 {
		sa = affinity.SessionAffinity{ClientIP: true, Timeout: time.Duration(1+r.IntN(10800)) * time.Second}
	}
	nports := 1 + r.IntN(2)
	for j := range nports {
		proto := []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}[r.IntN(3)]
		name := servicemodel.PortName{NamespacedName: nn, Port: fmt.Sprintf("p%d", j), Protocol: proto}
		if nports == 1 && r.IntN(2) == 0 {
			name.Port = ""
		}
		sp := &servicemodel.ServicePort{
			Name: name, ClusterIP: cip, Port: uint16(80 + j), Protocol: proto,
			InternalPolicyLocal: itpLocal, SessionAffinity: sa,
		}
		if typ >= 1 {
			sp.NodePort = uint16(30000 + i*4 + j)
			sp.ExternalPolicyLocal = etpLocal
		}
		if typ == 2 {
			sp.LoadBalancerVIPs = []netip.Addr{lbIP}
			sp.LoadBalancerSourceRanges = pickN(r, []netip.Prefix{
				netip.MustParsePrefix("203.0.113.0/25"), netip.MustParsePrefix("192.168.0.0/24"), netip.MustParsePrefix("10.0.0.0/16"),
			}, 2)
			if etpLocal {
				sp.HealthCheckNodePort = uint16(32000 + i)
			}
		}
		if typ == 3 {
			sp.ExternalIPs = []netip.Addr{extIP}
		}
		g.ports = append(g.ports, sp)
		var eps []*endpoints.Endpoint
		for k := range r.IntN(4) {
			ip := netip.AddrFrom4([4]byte{10, byte(r.IntN(2)), byte(i % 250), byte(k + 1)})
			ready := r.IntN(5) != 0
			e := &endpoints.Endpoint{Addr: netip.AddrPortFrom(ip, uint16(8080+j)), EndpointInfo: affinity.EndpointInfo{
				Ready: ready, Serving: ready || r.IntN(2) == 0, Terminating: !ready, Local: ip.As4()[1] == 1,
			}}
			if e.Local {
				e.NodeName = "node"
			}
			eps = append(eps, e)
		}
		if len(eps) > 0 {
			g.eps[name] = eps
		}
	}
	return g
}

func genSettings(r *rand.Rand) dataplane.Settings {
	s := dataplane.Settings{MasqueradeAll: r.IntN(5) == 0, LocalhostNodePorts: r.IntN(2) == 0}
	switch r.IntN(4) {
	case 0:
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: []netip.Prefix{genPodCIDR}}
	case 1:
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}
	case 2:
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "veth"}
	}
	switch r.IntN(3) {
	case 1:
		s.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}
	case 2:
		s.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("192.168.1.0/24")}
	}
	return s
}

// makeState assembles a literal State from services.
func makeState(settings dataplane.Settings, svcs map[int]genService) *dataplane.State {
	var ports []*servicemodel.ServicePort
	eps := map[servicemodel.PortName][]*endpoints.Endpoint{}
	for _, g := range svcs {
		ports = append(ports, g.ports...)
		for k, v := range g.eps {
			eps[k] = v
		}
	}
	return &dataplane.State{
		Family:    v1.IPv4Protocol,
		Node:      dataplane.Node{Name: "node", IPs: genNodeIPs, PodCIDRs: []netip.Prefix{genPodCIDR}},
		Settings:  settings,
		Services:  servicemodel.NewMap(ports...),
		Endpoints: endpoints.NewMap(eps),
	}
}

// genPacket picks a packet likely to hit something in a generated state.
func genPacket(r *rand.Rand, nsvc int) dataplane.Packet {
	i := r.IntN(max(nsvc, 1))
	dsts := []netip.Addr{
		netip.AddrFrom4([4]byte{172, 30, byte(i / 250), byte(i%250 + 1)}),
		netip.AddrFrom4([4]byte{192, 168, 99, byte(i%250 + 1)}),
		netip.AddrFrom4([4]byte{5, 6, byte(i / 250), byte(i%250 + 1)}),
		genNodeIPs[0], genNodeIPs[1], netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("8.8.8.8"),
	}
	ports := []uint16{80, 81, 443, uint16(30000 + i*4), uint16(30001 + i*4), uint16(32000 + i)}
	p := dataplane.Packet{
		Dst:      netip.AddrPortFrom(dsts[r.IntN(len(dsts))], ports[r.IntN(len(ports))]),
		Protocol: []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}[r.IntN(3)],
	}
	switch r.IntN(6) {
	case 0:
		p.From, p.Src, p.Interface = dataplane.FromLocalPod, netip.AddrFrom4([4]byte{10, 1, byte(i % 250), byte(1 + r.IntN(3))}), "veth0"
	case 1:
		p.From, p.Src, p.Interface = dataplane.FromLocalPod, netip.MustParseAddr("10.1.200.9"), "veth1"
	case 2:
		p.From, p.Src, p.Interface = dataplane.FromOutside, netip.MustParseAddr("203.0.113.2"), "eth0"
	case 3:
		p.From, p.Src, p.Interface = dataplane.FromOutside, netip.MustParseAddr("203.0.113.200"), "eth0"
	case 4:
		p.From, p.Src = dataplane.FromNode, genNodeIPs[r.IntN(2)]
	default:
		p.From, p.Src = dataplane.FromNode, netip.MustParseAddr("127.0.0.1")
		if !p.Dst.Addr().IsLoopback() {
			p.Src = genNodeIPs[0]
		}
	}
	if p.Dst.Addr().IsLoopback() {
		// Only the node itself reaches loopback; anything else is a
		// martian the localnet rule drops, not a service question.
		p.From, p.Src, p.Interface = dataplane.FromNode, netip.MustParseAddr("127.0.0.1"), ""
	}
	return p
}

// newFake returns a Dataplane on a FakeRunner.
func newFake(t testing.TB, cfg Config) (*Dataplane, *xtables.FakeRunner) {
	t.Helper()
	fake := xtables.NewFakeRunner()
	cfg.Runner = fake
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, fake
}

// freshTables is what a first full sync of s leaves in an empty kernel.
func freshTables(t testing.TB, cfg Config, s *dataplane.State) string {
	t.Helper()
	d, fake := newFake(t, cfg)
	if err := d.Sync(context.Background(), s); err != nil {
		t.Fatalf("fresh sync: %v", err)
	}
	return dump(fake)
}

func dump(f *xtables.FakeRunner) string {
	rs := f.Ruleset()
	return string(rs.Save("filter")) + string(rs.Save("nat"))
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// forceFull makes d's next Sync a full one, as after a failure.
func forceFull(d *Dataplane) {
	d.mu.Lock()
	d.prog = nil
	d.mu.Unlock()
}

// discardRunner is a Runner that accepts every restore and keeps nothing,
// for benchmarks of the rendering alone.
type discardRunner struct{}

func (discardRunner) Restore(_ context.Context, in xtables.RestoreInput) error {
	_, err := in.WriteTo(io.Discard)
	return err
}
func (discardRunner) Save(context.Context, string) ([]byte, error)   { return nil, nil }
func (discardRunner) EnsureJump(context.Context, xtables.Jump) error { return nil }
func (discardRunner) DeleteJump(context.Context, xtables.Jump) error { return nil }
func (discardRunner) ListChain(context.Context, string, string) ([]string, bool, error) {
	return nil, false, nil
}

package kerneltest_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// rulesDataplane programs a fixed nat and filter table, written by hand,
// so the harness's reading of connections is checked against rules whose
// verdicts are known without any proxykit dataplane.
type rulesDataplane struct{ rules string }

func (d rulesDataplane) Name() string { return "hand-written rules" }

func (d rulesDataplane) Sync(ctx context.Context, _ *dataplane.State) error {
	return restore(ctx, d.rules)
}

func (d rulesDataplane) Cleanup(ctx context.Context) error {
	return restore(ctx, "*nat\nCOMMIT\n*filter\nCOMMIT\n")
}

func restore(ctx context.Context, rules string) error {
	cmd := exec.CommandContext(ctx, "iptables-restore")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(string(out))
	}
	return nil
}

const handRules = `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 172.30.0.1/32 -p tcp --dport 80 -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.180.0.1:8080
-A PREROUTING -d 172.30.0.1/32 -p tcp --dport 80 -j DNAT --to-destination 10.180.0.2:8080
-A PREROUTING -d 172.30.0.1/32 -p udp --dport 53 -j DNAT --to-destination 10.180.0.1:53
-A PREROUTING -d 172.30.0.4/32 -p tcp --dport 80 -j DNAT --to-destination 10.180.0.1:8080
-A POSTROUTING -d 10.180.0.1/32 -p tcp --dport 8080 -m conntrack --ctorigdst 172.30.0.4 -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d 172.30.0.2/32 -p tcp -j REJECT
-A FORWARD -d 172.30.0.2/32 -p udp -j REJECT
-A FORWARD -d 172.30.0.3/32 -j DROP
COMMIT
`

// labState is a State whose only use is to place endpoints: the harness
// serves every endpoint it holds.
func labState(t *testing.T, eps ...string) *dataplane.State {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName, Settings: dataplanetest.DefaultSettings()})
	b.UpdateNode(dataplanetest.TestNode(nil))
	b.UpdateService(nil, dataplanetest.MakeService("ns", "svc", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.0.9"
		s.Spec.Ports = []v1.ServicePort{
			dataplanetest.ServicePort("web", v1.ProtocolTCP, 80, 0, 8080),
			dataplanetest.ServicePort("dns", v1.ProtocolUDP, 53, 0, 53),
		}
	}))
	b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns", "svc", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{
			dataplanetest.SlicePort("web", v1.ProtocolTCP, 8080),
			dataplanetest.SlicePort("dns", v1.ProtocolUDP, 53),
		}
		for _, ep := range eps {
			s.Endpoints = append(s.Endpoints, dataplanetest.ReadyEndpoint(ep, dataplanetest.NodeName))
		}
	}))
	return b.Build().States[0]
}

func TestTraceReadsConnections(t *testing.T) {
	netns.Require(t, "iptables-restore")
	for _, n := range kerneltest.PodNetworks {
		t.Run(n.String(), func(t *testing.T) {
			t.Parallel()
			traceReadsConnections(t, n)
		})
	}
}

func traceReadsConnections(t *testing.T, n kerneltest.PodNetwork) {
	h := kerneltest.New(t, kerneltest.Config{PodNetwork: n, New: func(v1.IPFamily) (dataplane.Dataplane, error) {
		return rulesDataplane{rules: handRules}, nil
	}})
	if err := h.Sync(t.Context(), labState(t, "10.180.0.1", "10.180.0.2")); err != nil {
		t.Fatal(err)
	}
	pod := func(dst string, proto v1.Protocol) dataplane.Packet {
		return dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", dst, proto)
	}
	for _, tc := range []struct {
		name   string
		packet dataplane.Packet
		want   dataplane.Verdict
	}{
		{"two DNAT targets", pod("172.30.0.1:80", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.180.0.1:8080", "10.180.0.2:8080")}},
		{"UDP DNAT", pod("172.30.0.1:53", v1.ProtocolUDP),
			dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.180.0.1:53")}},
		{"masqueraded", pod("172.30.0.4:80", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.180.0.1:8080"), Masquerade: true}},
		{"hairpin", dataplanetest.MakePacket(dataplane.FromLocalPod, "10.180.0.1", "172.30.0.4:80", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.180.0.1:8080"),
				Hairpin: dataplanetest.AddrPorts("10.180.0.1:8080"), Masquerade: true}},
		{"TCP reject", pod("172.30.0.2:80", v1.ProtocolTCP), dataplane.Verdict{Action: dataplane.Reject}},
		{"UDP reject", pod("172.30.0.2:53", v1.ProtocolUDP), dataplane.Verdict{Action: dataplane.Reject}},
		{"drop", pod("172.30.0.3:80", v1.ProtocolTCP), dataplane.Verdict{Action: dataplane.Drop}},
		{"UDP drop", pod("172.30.0.3:53", v1.ProtocolUDP), dataplane.Verdict{Action: dataplane.Drop}},
		{"untouched, to the sink", pod("172.30.0.1:81", v1.ProtocolTCP), dataplane.Verdict{}},
		{"untouched, to the node", dataplanetest.MakePacket(dataplane.FromOutside, "203.0.113.2", dataplanetest.NodeIP+":80", v1.ProtocolUDP), dataplane.Verdict{}},
		{"untouched, to an endpoint", pod("10.180.0.2:8080", v1.ProtocolTCP), dataplane.Verdict{}},
		{"node to loopback", dataplanetest.MakePacket(dataplane.FromNode, "127.0.0.1", "127.0.0.1:3001", v1.ProtocolTCP), dataplane.Verdict{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.Trace(t.Context(), tc.packet)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(dataplane.Verdict{}, "Reason"), cmpopts.EquateEmpty(),
				cmpopts.EquateComparable(netip.AddrPort{})); d != "" {
				t.Errorf("Trace (-want +got):\n%s", d)
			}
		})
	}
}

func TestTraceRefusesWhatItCannotSend(t *testing.T) {
	netns.Require(t)
	h := kerneltest.New(t, kerneltest.Config{New: func(v1.IPFamily) (dataplane.Dataplane, error) {
		return dataplanetest.NewRecorder("nothing"), nil
	}})
	if _, err := h.Trace(t.Context(), dataplanetest.MakePacket(dataplane.FromNode, dataplanetest.NodeIP, "172.30.0.1:80", v1.ProtocolTCP)); err == nil {
		t.Errorf("Trace before Sync succeeded")
	}
	if err := h.Sync(t.Context(), labState(t, "10.180.0.1")); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]dataplane.Packet{
		"spoofed node source":      dataplanetest.MakePacket(dataplane.FromNode, "1.2.3.4", "172.30.0.1:80", v1.ProtocolTCP),
		"SCTP":                     dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.1:80", v1.ProtocolSCTP),
		"outside via a pod link":   withInterface(dataplanetest.MakePacket(dataplane.FromOutside, "203.0.113.2", "172.30.0.1:80", v1.ProtocolTCP), "veth1"),
		"outside from an endpoint": dataplanetest.MakePacket(dataplane.FromOutside, "10.180.0.1", "172.30.0.1:80", v1.ProtocolTCP),
		"wrong family":             dataplanetest.MakePacket(dataplane.FromLocalPod, "fd00::2", "[fd00::1]:80", v1.ProtocolTCP),
	} {
		t.Run(name, func(t *testing.T) {
			if v, err := h.Trace(t.Context(), p); !errors.Is(err, kerneltest.ErrUnreproducible) {
				t.Errorf("Trace = %v, %v; want ErrUnreproducible", v, err)
			}
		})
	}
}

func withInterface(p dataplane.Packet, ifc string) dataplane.Packet {
	p.Interface = ifc
	return p
}

func TestReproducible(t *testing.T) {
	var got []string
	for _, s := range dataplanetest.Filter(dataplanetest.Scenarios(), kerneltest.Reproducible) {
		for _, c := range s.Packets {
			if c.Packet.Protocol == v1.ProtocolSCTP || !dataplanetest.HasTag(dataplanetest.TagKernelSafe)(s, c) {
				got = append(got, s.Name+"/"+c.Name)
			}
		}
	}
	if len(got) > 0 {
		t.Errorf("Reproducible keeps cases a kernel lab cannot send: %v", got)
	}
}

func TestPodNetworkReproducible(t *testing.T) {
	bridge := dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"}
	prefix := dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "veth"}
	cidr := dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR}
	for _, tc := range []struct {
		name           string
		detector       dataplane.LocalDetector
		from           dataplane.Origin
		iface          string
		routed, bridge bool
	}{
		{"pod through the named bridge", bridge, dataplane.FromLocalPod, "cbr0", false, true},
		{"pod through another link, bridge detector", bridge, dataplane.FromLocalPod, "veth7", true, false},
		{"pod through a prefixed link", prefix, dataplane.FromLocalPod, "veth1234", true, true},
		{"pod through an unprefixed link", prefix, dataplane.FromLocalPod, "eth1", false, false},
		{"pod, detector blind to links", cidr, dataplane.FromLocalPod, "eth1", true, true},
		{"pod, no interface", bridge, dataplane.FromLocalPod, "", true, true},
		{"outside through eth0", bridge, dataplane.FromOutside, "eth0", true, true},
		{"outside through a pod link", prefix, dataplane.FromOutside, "veth1", false, false},
		{"node through an interface", cidr, dataplane.FromNode, "eth0", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dataplanetest.Scenario{Settings: dataplane.Settings{LocalDetector: tc.detector}}
			c := dataplanetest.PacketCase{
				Tags:   []string{dataplanetest.TagKernelSafe},
				Packet: withInterface(dataplanetest.MakePacket(tc.from, "10.0.0.2", "172.30.0.1:80", v1.ProtocolTCP), tc.iface),
			}
			got := map[kerneltest.PodNetwork]bool{}
			for _, n := range kerneltest.PodNetworks {
				got[n] = n.Reproducible(s, c)
			}
			want := map[kerneltest.PodNetwork]bool{kerneltest.PodNetworkRouted: tc.routed, kerneltest.PodNetworkBridge: tc.bridge}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Reproducible by pod network (-want +got):\n%s", d)
			}
		})
	}
}

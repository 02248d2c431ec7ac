package iptables

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// saved returns the fake kernel's nat and filter tables as iptables-save
// prints them, with extra lines inserted after each table's header.
func saved(t *testing.T, fake *xtables.FakeRunner, extra map[string][]string) []byte {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"nat", "filter"} {
		out, err := fake.Save(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		head, rest, _ := strings.Cut(string(out), "\n")
		b.WriteString(head + "\n")
		for _, l := range extra[table] {
			b.WriteString(l + "\n")
		}
		b.WriteString(rest)
	}
	return []byte(b.String())
}

// TestParseSaveTracesAsLookup: the kernel's listing, read back, traces as
// the model says, for random States.
func TestParseSaveTracesAsLookup(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		svcs := map[int]genService{}
		n := 1 + r.IntN(6)
		for i := range n {
			svcs[i] = genSvc(r, i)
		}
		s := makeState(genSettings(r), svcs)
		d, fake := newFake(t, Config{})
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatalf("seed %d: Sync: %v", seed, err)
		}
		rs, skipped := xtables.ParseSave(saved(t, fake, nil))
		if len(skipped) > 0 {
			t.Fatalf("seed %d: skipped %v", seed, skipped)
		}
		for range 100 {
			p := genPacket(r, n)
			if diff := dataplanetest.DiffVerdict(s.Lookup(p), rs.Trace(p, s.Node.IPs)); diff != "" {
				t.Fatalf("seed %d: %+v (-lookup +trace):\n%s", seed, p, diff)
			}
		}
	}
}

func TestParseSaveOthersRules(t *testing.T) {
	sp := &servicemodel.ServicePort{Name: dataplanetest.PortName("ns", "web", "http", v1.ProtocolTCP),
		ClusterIP: netip.MustParseAddr("172.30.0.10"), Port: 80, Protocol: v1.ProtocolTCP}
	s := makeState(dataplane.Settings{}, map[int]genService{0: {ports: []*servicemodel.ServicePort{sp}, eps: map[servicemodel.PortName][]*endpoints.Endpoint{sp.Name: {{Addr: netip.MustParseAddrPort("10.1.0.5:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}}}}})
	d, fake := newFake(t, Config{})
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	p := dataplanetest.MakePacket(dataplane.FromOutside, "203.0.113.2", "172.30.0.10:80", v1.ProtocolTCP)
	rs, skipped := xtables.ParseSave(saved(t, fake, map[string][]string{"nat": {
		"-A PREROUTING -m string --algo bm --string blocked -j DROP",
		"-A PREROUTING -d 172.30.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.9.9.9:80",
	}}))
	if len(skipped) != 1 || skipped[0].Chain != "PREROUTING" || !strings.Contains(skipped[0].Rule, "--string") {
		t.Errorf("skipped = %v, want the string match", skipped)
	}
	v, steps := rs.TraceSteps(p, s.Node.IPs)
	want := dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.9.9.9:80")}
	if diff := dataplanetest.DiffVerdict(want, v); diff != "" {
		t.Errorf("another program's DNAT first (-want +got):\n%s", diff)
	}
	if len(steps) == 0 || !strings.HasPrefix(steps[0], "nat PREROUTING: -d 172.30.0.10/32") {
		t.Errorf("steps = %q, want the other program's rule first", steps)
	}
	if diff := cmp.Diff([]servicemodel.PortName{sp.Name}, rs.Services("nat")); diff != "" {
		t.Errorf("Services (-want +got):\n%s", diff)
	}
}

// TestParseSaveRedirect: a REDIRECT, another program's or the userspace
// dataplane's, sends the packet to a socket of the node: a DNAT to the
// unspecified address at its --to-ports (at the packet's port without),
// naming the service its comment names.
func TestParseSaveRedirect(t *testing.T) {
	save := func(rules ...string) []byte {
		return []byte("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:SVC - [0:0]\n" +
			strings.Join(rules, "\n") + "\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n")
	}
	cases := []struct {
		name  string
		save  []byte
		p     dataplane.Packet
		want  dataplane.Verdict
		steps []string
	}{{
		name:  "a sidecar's catch-all",
		save:  save("-A PREROUTING -p tcp -j REDIRECT --to-ports 15001"),
		p:     dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.10:80", v1.ProtocolTCP),
		want:  dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("0.0.0.0:15001")},
		steps: []string{"nat PREROUTING: -p tcp -j REDIRECT --to-ports 15001"},
	}, {
		name: "a service's forwarder, from the node",
		save: save("-A OUTPUT -j SVC",
			`-A SVC -d 172.30.0.10/32 -p udp -m comment --comment "ns/dns:dns cluster IP" -m udp --dport 53 -j REDIRECT --to-ports 40111`),
		p: dataplanetest.MakePacket(dataplane.FromNode, "192.168.0.2", "172.30.0.10:53", v1.ProtocolUDP),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: dataplanetest.PortName("ns", "dns", "dns", v1.ProtocolUDP),
			Endpoints: dataplanetest.AddrPorts("0.0.0.0:40111")},
	}, {
		name: "no port: the packet's own, IPv6",
		save: save("-A PREROUTING -p tcp -m tcp --dport 80 -j REDIRECT"),
		p:    dataplanetest.MakePacket(dataplane.FromOutside, "2001:db8::2", "[fd00::10]:80", v1.ProtocolTCP),
		want: dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("[::]:80")},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, skipped := xtables.ParseSave(tc.save)
			if len(skipped) != 0 {
				t.Fatalf("skipped %v", skipped)
			}
			v, steps := rs.TraceSteps(tc.p, nil)
			if diff := dataplanetest.DiffVerdict(tc.want, v); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.steps != nil {
				if diff := cmp.Diff(tc.steps, steps); diff != "" {
					t.Errorf("steps (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestParseSaveIPSets: with the node's ipsets given, another program's
// "-m set" rules match as the kernel's; without them they never do.
func TestParseSaveIPSets(t *testing.T) {
	save := []byte("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		"-A PREROUTING -m set --match-set STEER dst,dst -j DNAT --to-destination 10.9.9.9:80\n" +
		"COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A FORWARD -m set ! --match-set ALLOWED src -j DROP\n" +
		"COMMIT\n")
	sets := map[string]xtables.IPSet{
		"STEER":   {Type: "hash:ip,port", Members: []string{"172.30.0.10,tcp:80"}},
		"ALLOWED": {Type: "hash:net", Members: []string{"10.0.0.0/8"}},
	}
	cases := []struct {
		name string
		sets map[string]xtables.IPSet
		p    dataplane.Packet
		want dataplane.Verdict
	}{
		{"a member is steered", sets, dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.10:80", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.9.9.9:80"), Masquerade: false}},
		{"another port is not", sets, dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.10:81", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.NotAService}},
		{"a source outside the allowed set is dropped", sets, dataplanetest.MakePacket(dataplane.FromOutside, "203.0.113.9", "172.30.0.11:80", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.Drop}},
		{"without the sets, no set rule matches", nil, dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.10:80", v1.ProtocolTCP),
			dataplane.Verdict{Action: dataplane.NotAService}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, skipped := xtables.ParseSave(save)
			if len(skipped) != 0 {
				t.Fatalf("skipped %v", skipped)
			}
			rs.SetIPSets(tc.sets)
			if diff := dataplanetest.DiffVerdict(tc.want, rs.Trace(tc.p, nil)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

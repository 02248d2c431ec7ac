package ipvs

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// readFixture is two services programmed into the fakes: svc0, ClusterIP
// 172.30.0.1:80, and svc1, NodePort 172.30.0.2:80 and :30000, each with
// two endpoints.
func readFixture(t *testing.T) (*Dataplane, fakes, *dataplane.State) {
	t.Helper()
	_, st := newCluster(2, 2, v1.ProtocolTCP)
	d, f := newFakeDataplane(t, Config{})
	if err := d.Sync(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	return d, f, st
}

var (
	svc0VS = mustAddrPort("172.30.0.1:80")
	svc0EP = mustAddrPort("10.1.0.1:8080")
)

// equateNetip lets cmp compare netip values, which hide their fields.
var equateNetip = cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// delReal deletes real server dest of the virtual server at vs by hand.
func delReal(t *testing.T, f fakes, vs, dest netip.AddrPort) {
	t.Helper()
	svc := &mobyipvs.Service{AddressFamily: 2, Address: vs.Addr().AsSlice(), Protocol: 6, Port: vs.Port(), SchedName: "rr"}
	if err := f.ipvs.DelDestination(svc, new(messages).dest(dest, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestReadVirtualServers(t *testing.T) {
	d, _, _ := readFixture(t)
	r, err := d.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	real := func(eps ...string) []RealServer {
		var out []RealServer
		for _, e := range eps {
			out = append(out, RealServer{Address: mustAddrPort(e), Weight: 1})
		}
		return out
	}
	want := []VirtualServer{
		{Protocol: "TCP", Address: svc0VS, Scheduler: "rr", RealServers: real("10.1.0.1:8080", "10.2.0.1:8080")},
		{Protocol: "TCP", Address: mustAddrPort("172.30.0.2:80"), Scheduler: "rr", RealServers: real("10.1.0.2:8080", "10.2.0.2:8080")},
		{Protocol: "TCP", Address: mustAddrPort(dataplanetest.NodeIP + ":30000"), Scheduler: "rr", RealServers: real("10.1.0.2:8080", "10.2.0.2:8080")},
		{Protocol: "TCP", Address: mustAddrPort(dataplanetest.NodeIPAlt + ":30000"), Scheduler: "rr", RealServers: real("10.1.0.2:8080", "10.2.0.2:8080")},
	}
	slices.SortFunc(want, func(a, b VirtualServer) int { return a.Address.Compare(b.Address) })
	if diff := cmp.Diff(want, r.VirtualServers, equateNetip); diff != "" {
		t.Errorf("virtual servers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{netip.MustParseAddr("172.30.0.1"), netip.MustParseAddr("172.30.0.2")}, r.LinkAddresses, equateNetip); diff != "" {
		t.Errorf("link addresses (-want +got):\n%s", diff)
	}
	if got := r.Sets["PKV-CLUSTER-IP"]; !slices.Equal(got.Members, []string{"172.30.0.1,tcp:80", "172.30.0.2,tcp:80"}) || got.Type != "hash:ip,port" {
		t.Errorf("set PKV-CLUSTER-IP: %+v", got)
	}
	if got := r.Chains["filter INPUT"]; len(got) != 1 {
		t.Errorf("filter INPUT: %q, want only the dataplane's hook", got)
	}
}

// TestReadFollowsTheKernel changes the fakes by hand, as an operator or
// another program would, and checks that the whole reading changes just
// so.
func TestReadFollowsTheKernel(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, f fakes)
		want func(r *Reading)
	}{{
		name: "untouched",
	}, {
		name: "real server removed by hand",
		edit: func(t *testing.T, f fakes) { delReal(t, f, svc0VS, svc0EP) },
		want: func(r *Reading) { r.VirtualServers[0].RealServers = r.VirtualServers[0].RealServers[1:] },
	}, {
		name: "address unbound by hand",
		edit: func(t *testing.T, f fakes) {
			link, err := f.nl.LinkByName(DefaultLink)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.nl.AddrDel(link, handle.HostAddr(svc0VS.Addr())); err != nil {
				t.Fatal(err)
			}
		},
		want: func(r *Reading) { r.LinkAddresses = r.LinkAddresses[1:] },
	}, {
		name: "another program's virtual server and rule are not read",
		edit: func(t *testing.T, f fakes) {
			if err := f.ipvs.NewService(&mobyipvs.Service{AddressFamily: 2, Address: netip.MustParseAddr("10.255.0.1").AsSlice(), Protocol: 6, Port: 80, SchedName: "wrr"}); err != nil {
				t.Fatal(err)
			}
			if err := f.runner.Restore(t.Context(), xtables.RestoreBytes("*filter\n-A INPUT -s 10.9.9.9/32 -j DROP\nCOMMIT\n")); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "chain flushed by hand",
		edit: func(t *testing.T, f fakes) {
			if err := f.runner.Restore(t.Context(), xtables.RestoreBytes("*filter\n:PKV-FILTER - [0:0]\nCOMMIT\n")); err != nil {
				t.Fatal(err)
			}
		},
		want: func(r *Reading) { r.Chains["filter PKV-FILTER"] = nil },
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, f, _ := readFixture(t)
			want, err := d.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(t, f)
			}
			if tc.want != nil {
				tc.want(want)
			}
			got, err := d.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), equateNetip); diff != "" {
				t.Errorf("reading (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadingTrace(t *testing.T) {
	svc0 := servicemodel.PortName{Port: "p80", Protocol: v1.ProtocolTCP}
	svc0.Namespace, svc0.Name = "ns0", "svc0"
	outside := func(dst string) dataplane.Packet {
		return dataplane.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: mustAddrPort(dst), Protocol: v1.ProtocolTCP, From: dataplane.FromOutside}
	}
	cases := []struct {
		name      string
		edit      func(t *testing.T, f fakes)
		p         dataplane.Packet
		want      dataplane.Verdict
		wantSteps []string
		wantErr   error
	}{{
		name: "cluster IP",
		p:    outside("172.30.0.1:80"),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: svc0, Endpoints: []netip.AddrPort{svc0EP, mustAddrPort("10.2.0.1:8080")}},
		wantSteps: []string{
			`nat -A PREROUTING -m comment --comment "proxykit ipvs" -j PKV-SERVICES`,
			`filter -A INPUT -m comment --comment "proxykit ipvs" -j PKV-FILTER`,
			"ipvs: virtual server TCP 172.30.0.1:80 rr: real servers 10.1.0.1:8080 weight 1, 10.2.0.1:8080 weight 1",
			`nat -A POSTROUTING -m comment --comment "proxykit ipvs" -j PKV-POSTROUTING`,
			"nat -A PKV-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
		},
	}, {
		name: "a real server removed by hand",
		edit: func(t *testing.T, f fakes) { delReal(t, f, svc0VS, svc0EP) },
		p:    outside("172.30.0.1:80"),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: svc0, Endpoints: []netip.AddrPort{mustAddrPort("10.2.0.1:8080")}},
	}, {
		name: "node port masqueraded",
		p:    outside(dataplanetest.NodeIP + ":30000"),
		want: dataplane.Verdict{Action: dataplane.DNAT, Service: servicemodel.PortName{}, Masquerade: true,
			Endpoints: []netip.AddrPort{mustAddrPort("10.1.0.2:8080"), mustAddrPort("10.2.0.2:8080")}},
	}, {
		name: "a port no virtual server serves on a bound address",
		p:    outside("172.30.0.1:81"),
		want: dataplane.Verdict{Action: dataplane.Reject},
	}, {
		name: "address unbound by hand: IPVS never sees the packet",
		edit: func(t *testing.T, f fakes) {
			link, _ := f.nl.LinkByName(DefaultLink)
			if err := f.nl.AddrDel(link, handle.HostAddr(svc0VS.Addr())); err != nil {
				t.Fatal(err)
			}
		},
		p:    outside("172.30.0.1:80"),
		want: dataplane.Verdict{Action: dataplane.NotAService},
	}, {
		name: "a rule of a form the reading does not know",
		edit: func(t *testing.T, f fakes) {
			in := "*filter\n:PKV-FILTER - [0:0]\n-A PKV-FILTER -m set --match-set PKV-DROP dst,dst -m statistic --mode random --probability 0.5 -j DROP\nCOMMIT\n"
			if err := f.runner.Restore(t.Context(), xtables.RestoreBytes(in)); err != nil {
				t.Fatal(err)
			}
		},
		p:       outside("172.30.0.1:80"),
		wantErr: ErrUnknownRule,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, f, st := readFixture(t)
			if tc.edit != nil {
				tc.edit(t, f)
			}
			r, err := d.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			names := func(proto v1.Protocol, fe netip.AddrPort) servicemodel.PortName {
				if fe == svc0VS && proto == v1.ProtocolTCP {
					return svc0
				}
				return servicemodel.PortName{}
			}
			got, steps, err := r.Trace(tc.p, st.Node.IPs, names)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Trace: %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(dataplane.Verdict{}, "Reason"), equateNetip); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			if tc.wantSteps != nil {
				if diff := cmp.Diff(tc.wantSteps, steps); diff != "" {
					t.Errorf("steps (-want +got):\n%s", diff)
				}
			}
		})
	}
}

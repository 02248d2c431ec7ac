package ipvs_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

const otherNode = "node-b"

// fixture is a dataplane on fakes, which a test case edits.
type fixture struct {
	k      *ipvstest.Kernel
	d      *ipvs.Dataplane
	runner *xtables.FakeRunner
}

// namedState is the IPv4 State of the test node serving default/web, a
// LoadBalancer at 5.6.7.8 (cluster IP 172.30.0.10, port 80, node port
// 30080, a source range) with an endpoint here and one on another node,
// and, withDB, default/db (cluster IP 172.30.0.20, port 5432) with one
// on another node.
func namedState(t *testing.T, withDB bool) *dataplane.State {
	t.Helper()
	b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{v1.IPv4Protocol}, NodeName: dt.NodeName, Settings: dt.DefaultSettings()})
	b.UpdateNode(dt.TestNode(nil))
	b.UpdateService(nil, dt.MakeService("default", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.10", []string{"172.30.0.10"}
		s.Spec.Ports = []v1.ServicePort{dt.ServicePort("http", v1.ProtocolTCP, 80, 30080, 8080)}
		s.Spec.LoadBalancerSourceRanges = []string{dt.LBSourceRange}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.6.7.8"}}
	}))
	b.UpdateEndpointSlice(nil, dt.MakeSlice("default", "web", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dt.SlicePort("http", v1.ProtocolTCP, 8080)}
		s.Endpoints = []discovery.Endpoint{dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode)}
	}))
	if withDB {
		b.UpdateService(nil, dt.MakeService("default", "db", func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.20", []string{"172.30.0.20"}
			s.Spec.Ports = []v1.ServicePort{dt.ServicePort("", v1.ProtocolTCP, 5432, 0, 0)}
		}))
		b.UpdateEndpointSlice(nil, dt.MakeSlice("default", "db", 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dt.SlicePort("", v1.ProtocolTCP, 5432)}
			s.Endpoints = []discovery.Endpoint{dt.ReadyEndpoint("10.1.0.30", otherNode)}
		}))
	}
	return b.Build().States[0]
}

// TestNamedReading: what NamedReading answers of a kernel that a hand,
// or another program's rules, changed after the dataplane programmed it:
// the verdicts troubleshooting compares with the model's, and the
// frontends it finds extra.
func TestNamedReading(t *testing.T) {
	webHTTP := dt.PortName("default", "web", "http", v1.ProtocolTCP)
	client := netip.MustParseAddr("198.51.100.7")
	to := func(dst string) dataplane.Packet {
		return dataplane.Packet{Src: client, Dst: netip.MustParseAddrPort(dst), Protocol: v1.ProtocolTCP}
	}
	both := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:8080"), netip.MustParseAddrPort("10.1.0.7:8080")}
	fe := func(ip string, port uint16) servicemodel.Frontend {
		return servicemodel.Frontend{IP: netip.MustParseAddr(ip), Port: port, Protocol: v1.ProtocolTCP}
	}
	// Node ports on node addresses are left out: the model has them on
	// every address the kernel gives the node.
	all := []servicemodel.Frontend{fe("5.6.7.8", 80), fe("172.30.0.10", 80), fe("172.30.0.20", 5432)}
	cases := []struct {
		name   string
		edit   func(t *testing.T, f fixture)
		others string
		model  *dataplane.State
		packet dataplane.Packet
		want   dataplane.Verdict
		fes    []servicemodel.Frontend
	}{{
		name:   "in sync",
		packet: to("172.30.0.10:80"),
		want:   dataplane.Verdict{Action: dataplane.DNAT, Service: webHTTP, Endpoints: both, Masquerade: true},
		fes:    all,
	}, {
		name: "a real server removed by hand",
		edit: func(t *testing.T, f fixture) {
			vs := &mobyipvs.Service{AddressFamily: 2, Address: net.ParseIP("172.30.0.10").To4(), Protocol: 6, Port: 80, SchedName: "rr"}
			if err := f.k.IPVS.DelDestination(vs, &mobyipvs.Destination{Address: net.ParseIP("10.1.0.7"), Port: 8080}); err != nil {
				t.Fatal(err)
			}
		},
		packet: to("172.30.0.10:80"),
		want:   dataplane.Verdict{Action: dataplane.DNAT, Service: webHTTP, Endpoints: both[:1], Masquerade: true},
		fes:    all,
	}, {
		name: "the cluster IP unbound by hand",
		edit: func(t *testing.T, f fixture) {
			link, err := f.k.Netlink.LinkByName(ipvs.DefaultLink)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.k.Netlink.AddrDel(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("172.30.0.10"), Mask: net.CIDRMask(32, 32)}}); err != nil {
				t.Fatal(err)
			}
		},
		packet: to("172.30.0.10:80"),
		want:   dataplane.Verdict{Action: dataplane.NotAService},
		fes:    all,
	}, {
		name: "the source ranges' chain flushed by hand",
		edit: func(t *testing.T, f fixture) {
			if err := f.runner.Restore(t.Context(), xtables.RestoreBytes("*filter\n:PKV-SOURCE-RANGES - [0:0]\nCOMMIT\n")); err != nil {
				t.Fatal(err)
			}
		},
		packet: to("5.6.7.8:80"),
		want:   dataplane.Verdict{Action: dataplane.DNAT, Service: webHTTP, Endpoints: both, Masquerade: true},
		fes:    all,
	}, {
		name:   "another program's DNAT first",
		others: "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -d 172.30.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.9.9.9:80\nCOMMIT\n",
		packet: to("172.30.0.10:80"),
		want:   dataplane.Verdict{Action: dataplane.DNAT, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.9.9.9:80")}},
		fes:    all,
	}, {
		name:   "another program's drop first",
		others: "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -d 172.30.0.20/32 -j DROP\nCOMMIT\n",
		packet: to("172.30.0.20:5432"),
		want:   dataplane.Verdict{Action: dataplane.Drop},
		fes:    all,
	}, {
		name: "node ports on an address the Node object does not list",
		edit: func(t *testing.T, f fixture) {
			f.k.Netlink.SetLinkAddrs("eth1", netip.MustParseAddr("10.50.0.2"))
			if _, err := f.d.Reconcile(t.Context()); err != nil {
				t.Fatal(err)
			}
		},
		packet: to(dt.NodeIP + ":30080"),
		want:   dataplane.Verdict{Action: dataplane.DNAT, Service: webHTTP, Endpoints: both, Masquerade: true},
		fes:    all,
	}, {
		name:   "a virtual server of a service the model no longer has",
		model:  namedState(t, false),
		packet: to("172.30.0.20:5432"),
		want:   dataplane.Verdict{Action: dataplane.DNAT, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.1.0.30:5432")}, Masquerade: true},
		fes:    all,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := namedState(t, true)
			model := base
			if tc.model != nil {
				model = tc.model
			}
			k := ipvstest.NewKernel()
			// The kernel holds the node's addresses, which node ports follow.
			k.Netlink.SetLinkAddrs("eth0", base.Node.IPs...)
			runner := xtables.NewFakeRunner()
			d, err := ipvs.New(ipvs.Config{Kernel: k, Runner: runner})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Sync(t.Context(), base); err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(t, fixture{k, d, runner})
			}
			r, err := d.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			named := ipvs.NewNamedReading(r, model)
			if tc.others != "" {
				rs, skipped := xtables.ParseSave([]byte(tc.others))
				if len(skipped) > 0 {
					t.Fatalf("skipped %v", skipped)
				}
				named.Others = rs
			}
			got, err := named.Trace(tc.packet)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})); diff != "" {
				t.Errorf("Trace(%v) (-want +got):\n%s", tc.packet, diff)
			}
			if diff := cmp.Diff(tc.fes, named.Frontends(), cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})); diff != "" {
				t.Errorf("Frontends (-want +got):\n%s", diff)
			}
		})
	}
}

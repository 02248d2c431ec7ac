package troubleshoot

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// ipvsFakes is an IPVS dataplane on the fakes.
type ipvsFakes struct {
	dp     *ipvs.Dataplane
	ipvs   *ipvs.FakeIPVS
	nl     *ipvs.FakeNetlink
	runner *xtables.FakeRunner
}

func programmedIPVS(t *testing.T, s *dataplane.State) ipvsFakes {
	t.Helper()
	f := ipvsFakes{ipvs: ipvs.NewFakeIPVS(), nl: ipvs.NewFakeNetlink(), runner: xtables.NewFakeRunner()}
	// The kernel holds the node's addresses, which node ports follow.
	f.nl.SetLinkAddrs("eth0", s.Node.IPs...)
	d, err := ipvs.New(ipvs.Config{IPVS: f.ipvs, Netlink: f.nl, Runner: f.runner})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.dp = d
	return f
}

// vsOf is the virtual server at addr, as moby/ipvs names it.
func vsOf(addr string) *mobyipvs.Service {
	ap := netip.MustParseAddrPort(addr)
	return &mobyipvs.Service{AddressFamily: 2, Address: net.IP(ap.Addr().AsSlice()), Protocol: 6, Port: ap.Port(), SchedName: "rr"}
}

// restoreIn is an edit that writes in into the fakes' iptables, as
// someone with iptables-restore would.
func restoreIn(in string) func(*testing.T, ipvsFakes) {
	return func(t *testing.T, f ipvsFakes) {
		if err := f.runner.Restore(t.Context(), xtables.RestoreBytes(in)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestVerifyIPVS(t *testing.T) {
	eps := []discovery.Endpoint{dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode)}
	db, dbSlice := dbObjects()
	base := build(t, web(lbWeb), webSlice(eps...), db, dbSlice)[0]
	webHTTP := dt.PortName("default", "web", "http", v1.ProtocolTCP)
	cluster := "172.30.0.10:80/TCP (cluster IP) from 198.51.100.7"
	cases := []struct {
		name  string
		model *dataplane.State
		edit  func(t *testing.T, f ipvsFakes)
		want  []Mismatch
	}{{
		name: "in sync",
	}, {
		name: "a real server removed by hand",
		edit: func(t *testing.T, f ipvsFakes) {
			dest := &mobyipvs.Destination{Address: net.ParseIP("10.1.0.7"), Port: 8080}
			if err := f.ipvs.DelDestination(vsOf("172.30.0.10:80"), dest); err != nil {
				t.Fatal(err)
			}
		},
		want: []Mismatch{{Service: webHTTP, Kind: WrongEndpoints, Frontend: cluster,
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "DNAT to 10.0.0.5:8080 (masquerade)",
			Detail: "missing 10.1.0.7:8080"}},
	}, {
		name: "the cluster IP unbound by hand",
		edit: func(t *testing.T, f ipvsFakes) {
			link, err := f.nl.LinkByName(ipvs.DefaultLink)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.nl.AddrDel(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("172.30.0.10"), Mask: net.CIDRMask(32, 32)}}); err != nil {
				t.Fatal(err)
			}
		},
		want: []Mismatch{{Service: webHTTP, Kind: Missing, Frontend: cluster,
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "not a service",
			Detail: "no rule of the proxy matches; the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)"}},
	}, {
		name: "the source ranges' chain flushed by hand",
		edit: restoreIn("*filter\n:PKV-SOURCE-RANGES - [0:0]\nCOMMIT\n"),
		want: []Mismatch{{Service: webHTTP, Kind: WrongVerdict, Frontend: "5.6.7.8:80/TCP (load balancer IP) from 198.51.100.7",
			Model: "drop", Kernel: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)",
			Detail: "the model says drop, the rules DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)"}},
	}, {
		name: "another program's DNAT first",
		edit: restoreIn("*nat\n-I PREROUTING 1 -d 172.30.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.9.9.9:80\nCOMMIT\n"),
		want: []Mismatch{{Service: webHTTP, Kind: Shadowed, Frontend: cluster,
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "DNAT to 10.9.9.9:80",
			Detail: "a rule that is not the proxy's decides first: DNAT to 10.9.9.9:80"}},
	}, {
		name: "another program's drop first",
		edit: restoreIn("*filter\n-I INPUT 1 -d 172.30.0.20/32 -j DROP\nCOMMIT\n"),
		want: []Mismatch{{Service: dt.PortName("default", "db", "", v1.ProtocolTCP), Kind: Shadowed, Frontend: "172.30.0.20:5432/TCP (cluster IP) from 198.51.100.7",
			Model: "DNAT to 10.1.0.30:5432 (masquerade)", Kernel: "drop",
			Detail: "a rule that is not the proxy's decides first: drop"}},
	}, {
		name: "node ports on an address the Node object does not list",
		edit: func(t *testing.T, f ipvsFakes) {
			f.nl.SetLinkAddrs("eth1", netip.MustParseAddr("10.50.0.2"))
			if _, err := f.dp.Reconcile(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(f.ipvs.Dump(), "TCP 10.50.0.2:30080 rr") {
				t.Fatalf("no node port on the new address:\n%s", f.ipvs.Dump())
			}
		},
	}, {
		name:  "a virtual server of a service the model no longer has",
		model: build(t, web(lbWeb), webSlice(eps...))[0],
		want: []Mismatch{{Kind: Extra, Frontend: "172.30.0.20:5432/TCP",
			Detail: "the kernel serves this frontend, no service port of the model has it"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			model := base
			if tc.model != nil {
				model = tc.model
			}
			f := programmedIPVS(t, base)
			if tc.edit != nil {
				tc.edit(t, f)
			}
			r, err := f.dp.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			k := NewIPVS(r, model)
			if k.Others = xtables.NewReadingWithout([]byte(saved(t, f.runner)), ipvs.DefaultPrefix+"-", model.Node.IPs); len(k.Others.Skipped) > 0 {
				t.Fatalf("skipped %v", k.Others.Skipped)
			}
			got := Verify(model, dataplane.Mode("ipvs"), k)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Verify (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDriftStringWithoutService: a frontend no service port has prints
// without a service.
func TestDriftStringWithoutService(t *testing.T) {
	d := Mismatch{Kind: Extra, Frontend: "172.30.0.20:5432/TCP", Detail: "the kernel serves this frontend, no service port of the model has it"}
	if got, want := d.String(), "no service: extra at 172.30.0.20:5432/TCP: the kernel serves this frontend, no service port of the model has it"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

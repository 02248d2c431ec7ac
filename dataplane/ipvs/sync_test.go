package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// cluster is a Builder and the slices it was given, to change them.
type cluster struct {
	b      *dataplane.Builder
	slices []*discovery.EndpointSlice
}

// newCluster holds n services of eps endpoints each, a quarter of them
// NodePort, as the iptables dataplane's benchmarks do.
func newCluster(n, eps int, proto v1.Protocol) (*cluster, *dataplane.State) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName})
	b.UpdateNode(dataplanetest.TestNode(nil))
	c := &cluster{b: b}
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%10), fmt.Sprintf("svc%d", i)
		b.UpdateService(nil, dataplanetest.MakeService(ns, name, func(s *v1.Service) {
			s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)
			s.Spec.Type = v1.ServiceTypeClusterIP
			var np int32
			if i%4 == 1 {
				s.Spec.Type = v1.ServiceTypeNodePort
				np = int32(30000 + i/4)
			}
			s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", proto, 80, np, 8080)}
		}))
		sl := dataplanetest.MakeSlice(ns, name, 0, func(sl *discovery.EndpointSlice) {
			sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", proto, 8080)}
			for k := range eps {
				sl.Endpoints = append(sl.Endpoints, dataplanetest.ReadyEndpoint(fmt.Sprintf("10.%d.%d.%d", 1+k, i/250, i%250+1), ""))
			}
		})
		c.slices = append(c.slices, sl)
		b.UpdateEndpointSlice(nil, sl)
	}
	return c, b.Build().States[0]
}

// withoutEndpoint removes endpoint k of service i and returns the next
// State.
func (c *cluster) withoutEndpoint(i, k int) *dataplane.State {
	old := c.slices[i]
	upd := old.DeepCopy()
	upd.Endpoints = append(upd.Endpoints[:k:k], upd.Endpoints[k+1:]...)
	upd.ResourceVersion = "2"
	c.slices[i] = upd
	c.b.UpdateEndpointSlice(old, upd)
	return c.b.Build().States[0]
}

// changeEndpoint gives endpoint k of service i a new address.
func (c *cluster) changeEndpoint(i, k int) *dataplane.State {
	return c.setEndpoint(i, k, fmt.Sprintf("10.99.%d.%d", i/250, i%250+1), "3")
}

// setEndpoint gives endpoint k of service i the address addr in a slice of
// resource version rv, and returns the next State.
func (c *cluster) setEndpoint(i, k int, addr, rv string) *dataplane.State {
	old := c.slices[i]
	upd := old.DeepCopy()
	upd.Endpoints[k].Addresses = []string{addr}
	upd.ResourceVersion = rv
	c.slices[i] = upd
	c.b.UpdateEndpointSlice(old, upd)
	return c.b.Build().States[0]
}

type fakes struct {
	ipvs   *ipvstest.FakeIPVS
	nl     *ipvstest.FakeNetlink
	runner *xtables.FakeRunner
}

func (f fakes) calls() int { return f.ipvs.Calls() + f.nl.Calls() }

func (f fakes) kernel() Kernel { return &ipvstest.Kernel{IPVS: f.ipvs, Netlink: f.nl} }

func newFakeDataplane(t testing.TB, cfg Config) (*Dataplane, fakes) {
	t.Helper()
	f := fakes{ipvstest.NewFakeIPVS(), ipvstest.NewFakeNetlink(), xtables.NewFakeRunner()}
	// The test node's addresses, on which node ports are served.
	var ips []netip.Addr
	for _, ip := range []string{dataplanetest.NodeIP, dataplanetest.NodeIPAlt, dataplanetest.NodeIPv6, dataplanetest.NodeIPv6Alt} {
		ips = append(ips, netip.MustParseAddr(ip))
	}
	f.nl.SetLinkAddrs("eth0", ips...)
	cfg.Kernel, cfg.Runner = f.kernel(), f.runner
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, f
}

// TestCallsPerChange measures the netlink calls of a full sync and of a
// one-endpoint change at 1k and 10k services, and requires the change to
// cost the same at both sizes.
func TestCallsPerChange(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10k services")
	}
	ctx := t.Context()
	perChange := map[string]int{}
	for _, n := range []int{1000, 10000} {
		c, st := newCluster(n, 10, v1.ProtocolTCP)
		d, f := newFakeDataplane(t, Config{})
		if err := d.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		full := f.calls()
		restarted, err := New(Config{Kernel: f.kernel(), Runner: f.runner})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := restarted.fullSync(ctx, st, false); err != nil {
			t.Fatal(err)
		}
		// The link and one address dump, a listing per set, a dump of
		// the virtual servers: the table's fingerprints spare a dump of
		// the real servers of each.
		if calls := f.calls() - full; calls > 20 {
			t.Errorf("%d services: a restarted full sync over a programmed kernel made %d calls", n, calls)
		}
		t.Logf("%d services: a full sync over a programmed kernel: %d calls", n, f.calls()-full)
		// Service 1 is a NodePort service: its cluster IP and one node
		// port per node address.
		for _, tc := range []struct {
			name string
			st   func() *dataplane.State
		}{
			{"remove one endpoint of a ClusterIP service", func() *dataplane.State { return c.withoutEndpoint(0, 3) }},
			{"move one endpoint of a NodePort service", func() *dataplane.State { return c.changeEndpoint(1, 2) }},
		} {
			before := f.calls()
			next := tc.st()
			if err := d.Sync(ctx, next); err != nil {
				t.Fatal(err)
			}
			if d.LastSync().Full {
				t.Fatalf("%d services, %s: the sync was full", n, tc.name)
			}
			calls := f.calls() - before
			t.Logf("%d services: full sync %d calls; %s: %d calls", n, full, tc.name, calls)
			if prev, ok := perChange[tc.name]; ok && prev != calls {
				t.Errorf("%s: %d calls at %d services, %d at 1000", tc.name, calls, n, prev)
			}
			perChange[tc.name] = calls
		}
		// A Reconcile of an untouched kernel changes nothing.
		drift, err := d.Reconcile(ctx)
		if err != nil || !drift.Empty() {
			t.Errorf("%d services: Reconcile of an untouched kernel = %v, %v; want no drift", n, drift.Repaired, err)
		}
	}
}

func TestGracefulTermination(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		proto     v1.Protocol
		active    int
		wantDrain bool
	}{
		{v1.ProtocolTCP, 1, true},
		{v1.ProtocolTCP, 0, false},
		{v1.ProtocolUDP, 1, false},
	} {
		t.Run(fmt.Sprintf("%s with %d active", tc.proto, tc.active), func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
			d, f := newFakeDataplane(t, Config{Clock: clk, DrainTimeout: time.Minute})
			c, st := newCluster(1, 2, tc.proto)
			if err := d.Sync(ctx, st); err != nil {
				t.Fatal(err)
			}
			vip := netip.MustParseAddrPort("172.30.0.1:80")
			gone := netip.MustParseAddrPort("10.1.0.1:8080")
			if !f.ipvs.SetConnections(vip, string(tc.proto), gone, tc.active, 3) {
				t.Fatal("no such real server")
			}
			if err := d.Sync(ctx, c.withoutEndpoint(0, 0)); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s 172.30.0.1:80 rr\n  -> 10.2.0.1:8080 weight 1", tc.proto)
			if tc.wantDrain {
				want = fmt.Sprintf("%s 172.30.0.1:80 rr\n  -> 10.1.0.1:8080 weight 0\n  -> 10.2.0.1:8080 weight 1", tc.proto)
			}
			if d := cmp.Diff(want, f.ipvs.Dump()); d != "" {
				t.Fatalf("after removing an endpoint (-want +got):\n%s", d)
			}
			if !tc.wantDrain {
				return
			}
			if got := d.Draining(); len(got) != 1 {
				t.Fatalf("Draining() = %v, want one real server", got)
			}
			// Still active: a Reconcile keeps it.
			if _, err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if len(d.Draining()) != 1 {
				t.Fatal("a real server with active connections was deleted")
			}
			// Its connections end: the next Reconcile deletes it.
			f.ipvs.SetConnections(vip, string(tc.proto), gone, 0, 3)
			if _, err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			after := fmt.Sprintf("%s 172.30.0.1:80 rr\n  -> 10.2.0.1:8080 weight 1", tc.proto)
			if d := cmp.Diff(after, f.ipvs.Dump()); d != "" {
				t.Errorf("after the connections ended (-want +got):\n%s", d)
			}
			if len(d.Draining()) != 0 {
				t.Errorf("Draining() = %v after deletion", d.Draining())
			}
		})
	}
}

func TestDrainTimeoutBound(t *testing.T) {
	ctx := t.Context()
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	d, f := newFakeDataplane(t, Config{Clock: clk, DrainTimeout: time.Minute})
	c, st := newCluster(1, 2, v1.ProtocolTCP)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	f.ipvs.SetConnections(netip.MustParseAddrPort("172.30.0.1:80"), "TCP", netip.MustParseAddrPort("10.1.0.1:8080"), 5, 0)
	if err := d.Sync(ctx, c.withoutEndpoint(0, 0)); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(time.Unix(61, 0))
	if _, err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff("TCP 172.30.0.1:80 rr\n  -> 10.2.0.1:8080 weight 1", f.ipvs.Dump()); d != "" {
		t.Errorf("after DrainTimeout (-want +got):\n%s", d)
	}
}

// TestCleanupOnlyOwn: Cleanup by a new Dataplane (a new process) removes
// what an earlier one created and nothing else.
func TestCleanupOnlyOwn(t *testing.T) {
	ctx := t.Context()
	d, f := newFakeDataplane(t, Config{})
	_, st := newCluster(4, 2, v1.ProtocolTCP)
	// Foreign state: a virtual server, an address on the link, a set.
	foreign := &mobyipvs.Service{Address: netip.MustParseAddr("192.0.2.9").AsSlice(), Protocol: 6, Port: 80, SchedName: "rr", AddressFamily: 2}
	if err := f.ipvs.NewService(foreign); err != nil {
		t.Fatal(err)
	}
	if err := f.nl.IpsetCreate("OTHER", "hash:ip", netlink.IpsetCreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	link, _ := f.nl.LinkByName(DefaultLink)
	if err := f.nl.AddrAdd(link, handle.HostAddr(netip.MustParseAddr("192.0.2.77"))); err != nil {
		t.Fatal(err)
	}
	d2, err := New(Config{Kernel: f.kernel(), Runner: f.runner})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("TCP 192.0.2.9:80 rr", f.ipvs.Dump()); diff != "" {
		t.Errorf("virtual servers after Cleanup (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"OTHER": {}}, f.nl.Sets()); diff != "" {
		t.Errorf("ipsets after Cleanup (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{netip.MustParseAddr("192.0.2.77")}, f.nl.LinkAddrs(DefaultLink), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("the link's addresses after Cleanup (-want +got):\n%s", diff)
	}
	for _, table := range []string{"nat", "filter"} {
		for _, c := range f.runner.Ruleset().Chains(table) {
			if len(c) > 4 && c[:4] == "PKV-" {
				t.Errorf("chain %s %s left after Cleanup", table, c)
			}
		}
	}
	// Without the foreign address the link goes too.
	f.nl.AddrDel(link, handle.HostAddr(netip.MustParseAddr("192.0.2.77")))
	if err := d2.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.nl.LinkByName(DefaultLink); err == nil {
		t.Error("the link is left after Cleanup")
	}
}

// TestRestartedFull: a Dataplane that starts on a kernel another one
// programmed diffs instead of rewriting: an unchanged State changes no
// virtual server, address or set member (the few chains are rewritten
// once, as it cannot know what wrote them).
func TestRestartedFull(t *testing.T) {
	ctx := t.Context()
	d, f := newFakeDataplane(t, Config{})
	_, st := newCluster(20, 3, v1.ProtocolTCP)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	dump := f.ipvs.Dump()
	d2, err := New(Config{Kernel: f.kernel(), Runner: f.runner})
	if err != nil {
		t.Fatal(err)
	}
	before := f.calls()
	changes, _, err := d2.fullSync(ctx, st, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a restarted full sync of 20 services: %d calls", f.calls()-before)
	if len(changes) != 1 || changes[0] != "iptables chains written" {
		t.Errorf("a restarted dataplane changed %v", changes)
	}
	if diff := cmp.Diff(dump, f.ipvs.Dump()); diff != "" {
		t.Errorf("(-before +after):\n%s", diff)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Scheduler: "fastest"}, `ipvs: unknown scheduler "fastest": want one of rr, wrr, lc, wlc, lblc, lblcr, dh, sh, mh, sed, nq`},
		{Config{SchedulerFlags: []string{"flag-9"}}, `ipvs: unknown scheduler flag "flag-9": want flag-1, flag-2, flag-3`},
		{Config{Prefix: "lower"}, `ipvs: prefix "lower": want at most 8 characters of A-Z, 0-9 and '-'`},
		{Config{Prefix: "PKV\n-A"}, `ipvs: prefix "PKV\n-A": want at most 8 characters of A-Z, 0-9 and '-'`},
		{Config{Link: "a-very-long-link-name"}, `ipvs: link name "a-very-long-link-name": must be no more than 15 bytes (Linux's interface name limit)`},
		{Config{Link: "ipvs0\n-A INPUT"}, `ipvs: link name "ipvs0\n-A INPUT": must consist of ASCII letters, digits, '-', '_' and '.' (found '\n')`},
		{Config{Link: "ipvs 0"}, `ipvs: link name "ipvs 0": must consist of ASCII letters, digits, '-', '_' and '.' (found ' ')`},
		{Config{Link: ".."}, `ipvs: link name "..": must not be "." or ".."`},
		{Config{TCPTimeout: -time.Second}, `ipvs: TCPTimeout -1s is negative`},
	} {
		_, err := New(tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestSysctlsAndTimeouts(t *testing.T) {
	ctx := context.Background()
	d, f := newFakeDataplane(t, Config{StrictARP: true, TCPTimeout: 900 * time.Second, UDPTimeout: 30 * time.Second})
	_, st := newCluster(1, 1, v1.ProtocolTCP)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, sc := range d.sysctls() {
		got[sc.name], _ = d.sysctl.Get(sc.name)
	}
	want := map[string]string{
		"net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1", "net/ipv4/vs/expire_quiescent_template": "1",
		"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sysctls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(mobyipvs.Config{TimeoutTCP: 900 * time.Second, TimeoutUDP: 30 * time.Second}, f.ipvs.Config()); diff != "" {
		t.Errorf("timeouts (-want +got):\n%s", diff)
	}
}

func TestLeftovers(t *testing.T) {
	ctx := t.Context()
	d, _ := newFakeDataplane(t, Config{})
	_, st := newCluster(4, 2, v1.ProtocolTCP)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	got, err := d.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 4 cluster IPs, one NodePort service on two node addresses.
	if diff := cmp.Diff(Leftovers{VirtualServers: 6, Addresses: 4, Sets: int(numSets), Chains: 7, Link: true}, got); diff != "" {
		t.Errorf("Leftovers after Sync (-want +got):\n%s", diff)
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Leftovers(ctx); err != nil || !got.Empty() {
		t.Errorf("Leftovers after Cleanup = %+v, %v", got, err)
	}
}

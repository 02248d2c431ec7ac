package ipvs

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestNodeAddrsOf(t *testing.T) {
	v4 := addrs("10.50.0.2", "169.254.1.1", "192.168.0.2")
	v6, v6Node := addrs("2001:db8::1", "fe80::1", "fe80::a486:41ff:fe6c:5017"), addrs("2001:db8::1")
	for _, tc := range []struct {
		name  string
		local []netip.Addr
		cidrs []string
		ipv6  bool
		want  nodeAddrs
	}{
		{"unset: every address, IPv4 link-local too", v4, nil, false, nodeAddrs{v4, v4}},
		{"a CIDR selects", v4, []string{"10.50.0.0/16"}, false, nodeAddrs{v4, addrs("10.50.0.2")}},
		{"a /0 selects all", v4, []string{"10.50.0.0/16", "0.0.0.0/0"}, false, nodeAddrs{v4, v4}},
		{"CIDRs of the other family only: all", v4, []string{"2001:db8::/64"}, false, nodeAddrs{v4, v4}},
		{"a CIDR selecting nothing", v4, []string{"10.99.0.0/16"}, false, nodeAddrs{v4, nil}},
		{"unset: IPv6 link-local left out of both", v6, nil, true, nodeAddrs{v6Node, v6Node}},
		{"IPv6 link-local serves node ports when a CIDR selects it", v6, []string{"fe80::/64"}, true,
			nodeAddrs{v6Node, addrs("fe80::1", "fe80::a486:41ff:fe6c:5017")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &dataplane.State{}
			for _, c := range tc.cidrs {
				s.Settings.NodePortAddresses = append(s.Settings.NodePortAddresses, netip.MustParsePrefix(c))
			}
			got := nodeAddrsOf(s, tc.local, tc.ipv6)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(nodeAddrs{}), equateNetip); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadAddrs: the node's addresses are every link's of the family but
// the dataplane's own link's and loopback addresses; an address on lo
// that is not loopback counts.
func TestReadAddrs(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			d, f := newFakeDataplane(t, Config{Family: family})
			f.nl.SetLinkAddrs("lo", addrs("127.0.0.1", "::1", "10.9.9.9", "2001:db8:9::9")...)
			f.nl.SetLinkAddrs(DefaultLink, addrs("172.30.0.1", "fd00:30::1")...)
			link, err := f.nl.LinkByName(DefaultLink)
			if err != nil {
				t.Fatal(err)
			}
			ka, err := d.readAddrs(link.Attrs().Index)
			if err != nil {
				t.Fatal(err)
			}
			var onLink []netip.Addr
			for _, a := range ka.link {
				ip, _ := netip.AddrFromSlice(a.IP)
				onLink = append(onLink, ip.Unmap())
			}
			want := addrs("10.9.9.9", dataplanetest.NodeIP, dataplanetest.NodeIPAlt)
			wantLink := addrs("172.30.0.1")
			if family == v1.IPv6Protocol {
				want = addrs(dataplanetest.NodeIPv6, dataplanetest.NodeIPv6Alt, "2001:db8:9::9")
				wantLink = addrs("fd00:30::1")
			}
			if diff := cmp.Diff(want, ka.local, equateNetip); diff != "" {
				t.Errorf("node addresses (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantLink, onLink, equateNetip); diff != "" {
				t.Errorf("the link's addresses (-want +got):\n%s", diff)
			}
		})
	}
}

// vsAddrs lists the fake's virtual servers, "TCP 10.0.0.1:80".
func vsAddrs(f fakes) []string {
	var out []string
	for _, line := range strings.Split(f.ipvs.Dump(), "\n") {
		if fields := strings.Fields(line); len(fields) == 3 {
			out = append(out, fields[0]+" "+fields[1])
		}
	}
	return out
}

// TestKernelChangedFollowsAddresses: the canary reports an address the
// node gained or lost and one unbound from the link, a Reconcile programs
// the change, and the canary is quiet again; before a Sync and after
// Cleanup it reports nothing.
func TestKernelChangedFollowsAddresses(t *testing.T) {
	ctx := t.Context()
	d, f := newFakeDataplane(t, Config{})
	_, st := newCluster(2, 1, v1.ProtocolTCP)
	changed := func(want bool) {
		t.Helper()
		if got, err := d.KernelChanged(ctx); err != nil || got != want {
			t.Fatalf("KernelChanged = %v, %v; want %v", got, err, want)
		}
	}
	changed(false)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	changed(false)
	nodePorts := func(ips ...string) []string {
		out := []string{"TCP 172.30.0.1:80", "TCP 172.30.0.2:80"}
		for _, ip := range ips {
			out = append(out, "TCP "+ip+":30000")
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff(nodePorts(dataplanetest.NodeIP, dataplanetest.NodeIPAlt), vsAddrs(f)); diff != "" {
		t.Fatalf("virtual servers (-want +got):\n%s", diff)
	}

	for _, step := range []struct {
		name  string
		edit  func()
		want  []string
		drift string
	}{
		{"an address added", func() { f.nl.SetLinkAddrs("eth1", addrs("10.50.0.2")...) },
			nodePorts("10.50.0.2", dataplanetest.NodeIP, dataplanetest.NodeIPAlt), "virtual server TCP 10.50.0.2:30000: created"},
		{"an address removed", func() { f.nl.SetLinkAddrs("eth0", addrs(dataplanetest.NodeIP)...) },
			nodePorts("10.50.0.2", dataplanetest.NodeIP), "virtual server TCP 192.168.1.2:30000: deleted"},
		{"a bound address removed by hand", func() {
			link, _ := f.nl.LinkByName(DefaultLink)
			if err := f.nl.AddrDel(link, handle.HostAddr(netip.MustParseAddr("172.30.0.1"))); err != nil {
				t.Fatal(err)
			}
		}, nodePorts("10.50.0.2", dataplanetest.NodeIP), "link proxykit-ipvs0: bound 172.30.0.1"},
	} {
		step.edit()
		changed(true)
		drift, err := d.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(drift.Repaired, step.drift) {
			t.Errorf("%s: Reconcile repaired %q, want %q among them", step.name, drift.Repaired, step.drift)
		}
		changed(false)
		if diff := cmp.Diff(step.want, vsAddrs(f)); diff != "" {
			t.Errorf("%s: virtual servers (-want +got):\n%s", step.name, diff)
		}
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	changed(false)
}

// TestLinkLocalIsNoNodeAddress: the IPv6 link-local address a new pod's
// veth brings to a bridge node is none of the node's addresses, as in
// kube-proxy: the canary stays quiet, a Reconcile repairs nothing, and
// health checks are accepted on loopback and the node's other addresses.
func TestLinkLocalIsNoNodeAddress(t *testing.T) {
	ctx := t.Context()
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName, Families: []v1.IPFamily{v1.IPv6Protocol}})
	b.UpdateNode(dataplanetest.TestNode(nil))
	b.UpdateService(nil, dataplanetest.MakeService("ns1", "lb", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
		s.Spec.ClusterIP = "fd00:30::9"
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30999
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 30080, 8080)}
	}))
	d, f := newFakeDataplane(t, Config{Family: v1.IPv6Protocol})
	f.nl.SetLinkAddrs("cbr0", addrs("fe80::1", "fe80::a486:41ff:fe6c:5017")...)
	st := b.Build().States[0]
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	// A pod started: its bridge port's link-local address.
	f.nl.SetLinkAddrs("pod1", addrs("fe80::b0c1:2ff:fe3d:4e5f")...)
	if changed, err := d.KernelChanged(ctx); err != nil || changed {
		t.Errorf("KernelChanged after a pod's link-local address came = %v, %v; want false", changed, err)
	}
	if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Errorf("Reconcile after a pod's link-local address came: %q, %v; want no drift", drift.Repaired, err)
	}
	want := []string{"2001:db8:1::2,tcp:30999", "2001:db8::1,tcp:30999", "::1,tcp:30999"}
	if diff := cmp.Diff(want, f.nl.Sets()["PKV6-HEALTH-CHECK"]); diff != "" {
		t.Errorf("health-check set (-want +got):\n%s", diff)
	}
}

// TestInternalChain: an externalTrafficPolicy Local service has one DNAT
// rule per external IP, per VIP (two with source ranges) and one for its
// node port; a partial sync rewrites the chain, alone, only when they
// change.
func TestInternalChain(t *testing.T) {
	ctx := t.Context()
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName})
	b.UpdateNode(dataplanetest.TestNode(nil))
	svc := dataplanetest.MakeService("ns1", "lb", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "172.30.0.9"
		s.Spec.ExternalIPs = []string{"192.168.99.11"}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30999
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 30080, 8080)}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "1.2.3.4"}}
	})
	b.UpdateService(nil, svc)
	slice := dataplanetest.MakeSlice("ns1", "lb", 0, func(sl *discovery.EndpointSlice) {
		sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
		sl.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.1.0.1", "elsewhere")}
	})
	b.UpdateEndpointSlice(nil, slice)
	d, f := newFakeDataplane(t, Config{})
	if err := d.Sync(ctx, b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	chain := func() []string {
		rules, _, err := f.runner.ListChain(ctx, "nat", "PKV-INTERNAL")
		if err != nil {
			t.Fatal(err)
		}
		return rules
	}
	to := " -j DNAT --to-destination 172.30.0.9:80"
	want := []string{
		"-A PKV-INTERNAL -d 1.2.3.4/32 -p tcp -m tcp --dport 80 -m set --match-set PKV-SOURCE-CIDR dst,dst,src" + to,
		"-A PKV-INTERNAL -d 1.2.3.4/32 -p tcp -m tcp --dport 80 -m set --match-set PKV-SOURCE-IP dst,dst,src" + to,
		"-A PKV-INTERNAL -d 192.168.99.11/32 -p tcp -m tcp --dport 80" + to,
		"-A PKV-INTERNAL -p tcp -m tcp --dport 30080 -m set --match-set PKV-NODE-PORT-LOCAL dst,dst" + to,
	}
	if diff := cmp.Diff(want, chain()); diff != "" {
		t.Fatalf("INTERNAL chain (-want +got):\n%s", diff)
	}

	restores := len(f.runner.Restores())
	// A new endpoint: no rule changes, nothing written.
	upd := slice.DeepCopy()
	upd.ResourceVersion = "2"
	upd.Endpoints = append(upd.Endpoints, dataplanetest.ReadyEndpoint("10.1.0.2", "elsewhere"))
	b.UpdateEndpointSlice(slice, upd)
	if err := d.Sync(ctx, b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	if n := len(f.runner.Restores()); n != restores || d.LastSync().Full {
		t.Fatalf("an endpoint change: %d restores (full %v), want none", n-restores, d.LastSync().Full)
	}
	// A new external IP: one restore, of the chain alone.
	svc2 := svc.DeepCopy()
	svc2.ResourceVersion = "2"
	svc2.Spec.ExternalIPs = append(svc2.Spec.ExternalIPs, "192.168.99.12")
	b.UpdateService(svc, svc2)
	if err := d.Sync(ctx, b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	all := f.runner.Restores()
	if len(all) != restores+1 || d.LastSync().Full {
		t.Fatalf("an external IP added: %d restores (full %v), want one", len(all)-restores, d.LastSync().Full)
	}
	if in := string(all[len(all)-1]); !strings.HasPrefix(in, "*nat\n:PKV-INTERNAL - [0:0]\n") || strings.Count(in, "-A ") != 5 {
		t.Errorf("the restore of an external IP added:\n%s", in)
	}
	want = slices.Insert(want, 3, "-A PKV-INTERNAL -d 192.168.99.12/32 -p tcp -m tcp --dport 80"+to)
	if diff := cmp.Diff(want, chain()); diff != "" {
		t.Errorf("INTERNAL chain after an external IP added (-want +got):\n%s", diff)
	}
	if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Errorf("Reconcile after the partial sync: %v, %v", drift.Repaired, err)
	}
	// The policy back to Cluster: the chain empties.
	svc3 := svc2.DeepCopy()
	svc3.ResourceVersion = "3"
	svc3.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	svc3.Spec.HealthCheckNodePort = 0
	b.UpdateService(svc2, svc3)
	if err := d.Sync(ctx, b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	if got := chain(); len(got) != 0 {
		t.Errorf("INTERNAL chain of a Cluster-policy service: %q", got)
	}
}

func TestModuleHints(t *testing.T) {
	for _, tc := range []struct {
		err    error
		module string
		want   string
	}{
		{unix.EOPNOTSUPP, "dummy", "operation not supported: the kernel lacks dummy; load it with modprobe dummy"},
		{syscall.Errno(nl.IPSET_ERR_FIND_TYPE), setTypeModule("hash:ip,port,net"),
			"errno 4098: the kernel lacks ip_set_hash_ipportnet; load it with modprobe ip_set_hash_ipportnet"},
		{unix.EEXIST, "dummy", "file exists"},
	} {
		got := withModuleHint(tc.err, tc.module)
		if got.Error() != tc.want || !errors.Is(got, tc.err) {
			t.Errorf("withModuleHint(%v, %s) = %q, want %q wrapping it", tc.err, tc.module, got, tc.want)
		}
	}
	var typeModules []string
	for _, spec := range setSpecs {
		typeModules = append(typeModules, setTypeModule(spec.typ))
	}
	slices.Sort(typeModules)
	want := []string{"ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip", "ip_set_hash_ipportnet"}
	if diff := cmp.Diff(want, slices.Compact(typeModules)); diff != "" {
		t.Errorf("the set types' modules (-want +got):\n%s", diff)
	}
}

// failingNetlink is a FakeNetlink whose kernel lacks a module.
type failingNetlink struct {
	*ipvstest.FakeNetlink
	linkErr, setErr error
}

func (f failingNetlink) LinkAdd(link netlink.Link) error {
	if f.linkErr != nil {
		return f.linkErr
	}
	return f.FakeNetlink.LinkAdd(link)
}

func (f failingNetlink) IpsetCreate(name, typ string, o netlink.IpsetCreateOptions) error {
	if f.setErr != nil && typ == "hash:ip,port,ip" {
		return f.setErr
	}
	return f.FakeNetlink.IpsetCreate(name, typ, o)
}

// handlesKernel is a Kernel of any handles.
type handlesKernel handle.Handles

func (k handlesKernel) Handles() handle.Handles { return handle.Handles(k) }

// TestMissingModules: a Sync on a kernel without the dummy link type or
// an ipset type fails naming the module to load.
func TestMissingModules(t *testing.T) {
	_, st := newCluster(1, 1, v1.ProtocolTCP)
	for _, tc := range []struct {
		nl   failingNetlink
		want string
	}{
		{failingNetlink{ipvstest.NewFakeNetlink(), unix.EOPNOTSUPP, nil}, "modprobe dummy"},
		{failingNetlink{ipvstest.NewFakeNetlink(), nil, syscall.Errno(nl.IPSET_ERR_FIND_TYPE)}, "create ipset PKV-LOOP-BACK of type hash:ip,port,ip: errno 4098: the kernel lacks ip_set_hash_ipportip; load it with modprobe ip_set_hash_ipportip"},
	} {
		d, err := New(Config{Kernel: handlesKernel{IPVS: ipvstest.NewFakeIPVS(), Netlink: tc.nl, Fake: true}, Runner: xtables.NewFakeRunner()})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(t.Context(), st); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Sync: %v, want it to say %q", err, tc.want)
		}
	}
}

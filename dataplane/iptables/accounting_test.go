package iptables

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/nfacct"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// nodePortState is one NodePort Service (TCP 30080, UDP 30081) with one
// endpoint, in the family of v6, with settings changed by mutate.
func nodePortState(t *testing.T, v6 bool, mutate func(*dataplane.Settings)) *dataplane.State {
	t.Helper()
	l := &lab{v6: v6, nodeIP: "192.168.0.2"}
	ep := "10.0.0.5"
	if v6 {
		l.nodeIP, ep = "fd00:192::2", "fd00:10:1::1"
	}
	settings := dataplanetest.DefaultSettings()
	if mutate != nil {
		mutate(&settings)
	}
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{family(v6)}, NodeName: dataplanetest.NodeName, Settings: settings,
		OnSkip: func(kind, reason string) { t.Errorf("Builder skipped a %s: %s", kind, reason) },
	})
	b.UpdateNode(dataplanetest.MakeNode(dataplanetest.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: l.nodeIP}}
	}))
	c := &labCluster{b: b, slices: map[string]*discovery.EndpointSlice{}}
	c.service(l, "web", map[bool]string{false: "172.30.0.10", true: "fd00:30::10"}[v6], 30080, nil, dataplanetest.ReadyEndpoint(ep, dataplanetest.NodeName))
	return c.build()
}

// counting lists the rules of the dataplane's chains that match nfacct, as
// "table chain rule", with the rule that follows each in its chain.
func counting(fake *xtables.FakeRunner) []string {
	rs := fake.Ruleset()
	out := []string{}
	for _, table := range tableNames {
		for _, c := range rs.Chains(table) {
			if !strings.HasPrefix(c, DefaultChainPrefix) {
				continue
			}
			rules := rs.Rules(table, c)
			for i, r := range rules {
				if strings.Contains(r, "nfacct") {
					out = append(out, table+" "+c+" "+r)
					if i+1 < len(rules) {
						out = append(out, "  then "+rules[i+1])
					}
				}
			}
		}
	}
	return out
}

const (
	localhostTCP = `-m comment --comment lab/web:tcp -m tcp -p tcp -d 127.0.0.0/8 --dport 30080 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j PK-EXT-`
	anyTCP       = `  then -m comment --comment lab/web:tcp -m tcp -p tcp --dport 30080 -j PK-EXT-`
	localhostUDP = `-m comment --comment lab/web:udp -m udp -p udp -d 127.0.0.0/8 --dport 30081 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j PK-EXT-`
	anyUDP       = `  then -m comment --comment lab/web:udp -m udp -p udp --dport 30081 -j PK-EXT-`
	invalid      = `filter PK-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`
	afterInvalid = `  then -m comment --comment "proxykit forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT`
)

// hashless drops the hash of per-service chain names.
func hashless(rules []string) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		if j := strings.Index(r, "-j PK-EXT-"); j >= 0 {
			r = r[:j+len("-j PK-EXT-")]
		}
		out[i] = r
	}
	return out
}

// TestAccountingRules: the nfacct matches are where kube-proxy writes
// them, only where they apply, and only when the counters could be made;
// the fake kernel, the readback and Render agree with the sync.
func TestAccountingRules(t *testing.T) {
	full := []string{"nat PK-NODEPORTS " + localhostTCP, anyTCP, "nat PK-NODEPORTS " + localhostUDP, anyUDP, invalid, afterInvalid}
	for _, tc := range []struct {
		name    string
		v6      bool
		acct    nfacct.Interface
		liberal bool
		mutate  func(*dataplane.Settings)
		want    []string
		avail   float64
	}{
		{name: "supported", want: full, avail: 1},
		{name: "nfacct missing", acct: &nfacct.Fake{Unsupported: true}, want: []string{}, avail: 0},
		{name: "localhost node ports off", mutate: func(s *dataplane.Settings) { s.LocalhostNodePorts = false }, want: []string{invalid, afterInvalid}, avail: 1},
		{name: "liberal conntrack", liberal: true, want: full[:4], avail: 1},
		{name: "IPv6", v6: true, want: []string{invalid, afterInvalid}, avail: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			reg := prometheus.NewPedanticRegistry()
			sc := sysctl.NewFake(nil)
			if tc.liberal {
				_ = sc.Set(sysctlTCPBeLiberal, "1")
			}
			s := nodePortState(t, tc.v6, tc.mutate)
			d, fake := newFake(t, Config{Family: s.Family, Accounting: tc.acct, Sysctl: sc, Registerer: reg})
			if err := d.Sync(ctx, s); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, hashless(counting(fake))); diff != "" {
				t.Errorf("counting rules (-want +got):\n%s", diff)
			}
			if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
				t.Errorf("Reconcile after Sync = %v, %v", drift, err)
			}
			rendered, err := d.Render(s)
			if err != nil {
				t.Fatal(err)
			}
			// Render reads no sysctl, so it always drops INVALID packets.
			if got, want := strings.Count(string(rendered), "-m nfacct"), strings.Count(string(fake.Restores()[0]), "-m nfacct"); got != want && !tc.liberal {
				t.Errorf("Render writes %d nfacct matches, the sync %d", got, want)
			}
			if got := testutil.ToFloat64(d.metrics.nfacctAvailable); got != tc.avail {
				t.Errorf("nfacct_available = %v, want %v", got, tc.avail)
			}
		})
	}
}

// TestAccountingMetrics: the counters are read at scrape time, under
// their proxykit names, with no sample before they exist; both families
// on one Registerer share them.
func TestAccountingMetrics(t *testing.T) {
	ctx := t.Context()
	reg := prometheus.NewPedanticRegistry()
	acct := &nfacct.Fake{}
	d, _ := newFake(t, Config{Accounting: acct, Registerer: reg})
	if _, err := New(Config{Family: "IPv6", Runner: xtables.NewFakeRunner(), Registerer: reg}); err != nil {
		t.Fatalf("a second family's Dataplane on the same Registerer: %v", err)
	}
	names := []string{"proxykit_iptables_localhost_nodeports_accepted_packets_total", "proxykit_iptables_ct_state_invalid_dropped_packets_total"}
	if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != 0 {
		t.Errorf("before any sync: %d samples, %v; want none", n, err)
	}
	if err := d.Sync(ctx, nodePortState(t, false, nil)); err != nil {
		t.Fatal(err)
	}
	if err := acct.Count(LocalhostNodePortsCounter, 3, 180); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP proxykit_iptables_ct_state_invalid_dropped_packets_total Forwarded packets dropped because conntrack found them INVALID (a workaround for conntrack problems): the nfacct counter ct_state_invalid_dropped_pkts; kube-proxy's kubeproxy_iptables_ct_state_invalid_dropped_packets_total.
# TYPE proxykit_iptables_ct_state_invalid_dropped_packets_total counter
proxykit_iptables_ct_state_invalid_dropped_packets_total 0
# HELP proxykit_iptables_localhost_nodeports_accepted_packets_total Packets to a node port on a loopback address (127.0.0.0/8) that were sent on to the service: the nfacct counter localhost_nps_accepted_pkts; kube-proxy's kubeproxy_iptables_localhost_nodeports_accepted_packets_total.
# TYPE proxykit_iptables_localhost_nodeports_accepted_packets_total counter
proxykit_iptables_localhost_nodeports_accepted_packets_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// flaky is an nfacct.Interface whose Ensure fails while fail is set.
type flaky struct {
	nfacct.Fake
	mu   sync.Mutex
	fail error
}

func (f *flaky) Ensure(ctx context.Context, name string) error {
	f.mu.Lock()
	err := f.fail
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Fake.Ensure(ctx, name)
}

// TestAccountingRecovers: counters that could not be made are tried again
// at the next full sync, which then writes the nfacct matches; each change
// is logged once, not at every sync.
func TestAccountingRecovers(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	var logged []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	acct := &flaky{fail: errors.New("no room")}
	d, fake := newFake(t, Config{Accounting: acct, Logger: log})
	s := nodePortState(t, false, nil)
	sync := func() {
		t.Helper()
		if err := d.Sync(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	// A Cleanup forgets what is programmed: the next Sync is a full one.
	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := counting(fake); len(got) != 0 {
		t.Errorf("counting rules while the counters cannot be made: %q", got)
	}
	acct.mu.Lock()
	acct.fail = nil
	acct.mu.Unlock()
	// A partial sync makes no counters: only the next full sync does.
	s = nodePortState(t, false, func(s *dataplane.Settings) { s.MasqueradeAll = true })
	sync()
	if got := len(counting(fake)); got != 6 {
		t.Errorf("%d counting rules after the counters were made, want 6", got)
	}
	var accounting []string
	for _, l := range logged {
		if strings.Contains(l, "nfacct") {
			accounting = append(accounting, l)
		}
	}
	want := []string{
		`"msg"="Cannot make the nfacct counters: the packet-accounting rules and their metrics are left out until a full sync can" "error"="no room" "dataplane"="iptables" "ipFamily"="IPv4"`,
		`"level"=0 "msg"="The nfacct counters are made: the packet-accounting rules are written" "dataplane"="iptables" "ipFamily"="IPv4"`,
	}
	if diff := cmp.Diff(want, accounting); diff != "" {
		t.Errorf("logs about nfacct (-want +got):\n%s", diff)
	}
}

// TestAccountingMissingLoggedOnce: a kernel without nfacct is said once,
// however many full syncs find it so.
func TestAccountingMissingLoggedOnce(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	n := 0
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(args, "The kernel has no nfacct") {
			n++
		}
	}, funcr.Options{})
	d, _ := newFake(t, Config{Accounting: &nfacct.Fake{Unsupported: true}, Logger: log})
	s := nodePortState(t, false, nil)
	for range 3 {
		if err := d.Sync(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := d.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Errorf("logged %d times, want once", n)
	}
}

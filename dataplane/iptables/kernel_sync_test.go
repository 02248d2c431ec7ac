package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func TestKernelIPv6ClusterIP(t *testing.T) {
	l := newLab(t, true)
	serve(t, l.pod1, "pod1", hostPort(l.pod1IP, 8080))
	serve(t, l.pod2, "pod2", hostPort(l.pod2IP, 8080))
	c := l.cluster(t)
	c.service(l, "web6", "fd00:172:30::10", 30080, nil,
		dataplanetest.ReadyEndpoint(l.pod1IP, dataplanetest.NodeName), dataplanetest.ReadyEndpoint(l.pod2IP, otherNode))
	c.service(l, "empty6", "fd00:172:30::11", 0, nil)
	dp := newNSDataplane(t, l.node, Config{Family: "IPv6"})
	if err := dp.Sync(t.Context(), c.build()); err != nil {
		t.Fatal(err)
	}
	for _, from := range []*netns.NS{l.node, l.pod2} {
		for _, proto := range []string{"tcp", "udp"} {
			if got := slices.Sorted(maps.Keys(answers(t, from, proto, "", "[fd00:172:30::10]:80", 30))); !slices.Equal(got, []string{"pod1", "pod2"}) {
				t.Errorf("%s from %s: answered by %v", proto, from.Name, got)
			}
		}
	}
	mustAnswer(t, l.client, "tcp", l.clientIP, hostPort(l.nodeIP, 30080))
	if _, err := dial(l.node, "tcp", "", "[fd00:172:30::11]:80", dialTimeout); !refused(err) {
		t.Errorf("no endpoints: %v, want refused", err)
	}
}

// corruptRunner passes restores through, appending a line the kernel
// rejects while armed.
type corruptRunner struct {
	xtables.Runner
	armed bool
}

func (r *corruptRunner) Restore(ctx context.Context, in xtables.RestoreInput) error {
	if r.armed {
		var buf bytes.Buffer
		if _, err := in.WriteTo(&buf); err != nil {
			return err
		}
		data := buf.Bytes()
		in = xtables.RestoreBytes(append(slices.Clone(data[:len(data)-len("COMMIT\n")]), []byte("-A PK-SERVICES -j PK-NO-SUCH-CHAIN\nCOMMIT\n")...))
	}
	return r.Runner.Restore(ctx, in)
}

// TestKernelRejectedRestore: a restore the kernel rejects leaves the
// previous rules working, reports the failing line, and the next sync is a
// full one that succeeds.
func TestKernelRejectedRestore(t *testing.T) {
	l := newLab(t, false)
	serve(t, l.pod1, "pod1", hostPort(l.pod1IP, 8080))
	serve(t, l.pod2, "pod2", hostPort(l.pod2IP, 8080))
	c := l.cluster(t)
	c.service(l, "web", "172.30.0.10", 0, nil, dataplanetest.ReadyEndpoint(l.pod1IP, ""))
	var cr *corruptRunner
	if err := l.node.Do(func() error {
		r, err := xtables.NewExecRunner(xtables.ExecConfig{})
		cr = &corruptRunner{Runner: r}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	dp := newNSDataplane(t, l.node, Config{Runner: cr})
	ctx := t.Context()
	if err := dp.Sync(ctx, c.build()); err != nil {
		t.Fatal(err)
	}
	before := kernelRules(t, l.node, false)

	cr.armed = true
	c.setEndpoints("web", dataplanetest.ReadyEndpoint(l.pod2IP, ""))
	err := dp.Sync(ctx, c.build())
	var re *xtables.RestoreError
	if !errors.As(err, &re) || !re.Partial || re.Line == 0 || !strings.Contains(strings.Join(re.Context, "\n"), "PK-NO-SUCH-CHAIN") {
		t.Fatalf("Sync = %#v, want a partial *xtables.RestoreError pointing at the bad line", err)
	}
	if diff := cmpDiff(before, kernelRules(t, l.node, false)); diff != "" {
		t.Errorf("the rejected restore changed the kernel:\n%s", diff)
	}
	if r := mustAnswer(t, l.node, "tcp", "", "172.30.0.10:80"); r.server != "pod1" {
		t.Errorf("previous rules not in force: answered by %s", r.server)
	}

	cr.armed = false
	if err := dp.Sync(ctx, c.build()); err != nil {
		t.Fatal(err)
	}
	if !dp.LastSync().Full {
		t.Errorf("the sync after a failure was not full")
	}
	if r := mustAnswer(t, l.node, "tcp", "", "172.30.0.10:80"); r.server != "pod2" {
		t.Errorf("after recovery answered by %s, want pod2", r.server)
	}
}

// TestKernelRestartAndCleanup: a second program instance reconciles what
// the first left (stale chains removed, jumps not duplicated, foreign
// rules untouched), and Cleanup removes everything it owns.
func TestKernelRestartAndCleanup(t *testing.T) {
	l := newLab(t, false)
	serve(t, l.pod1, "pod1", hostPort(l.pod1IP, 8080))
	c := l.cluster(t)
	c.service(l, "web", "172.30.0.10", 30080, nil, dataplanetest.ReadyEndpoint(l.pod1IP, ""))
	c.service(l, "gone", "172.30.0.11", 30090, nil, dataplanetest.ReadyEndpoint(l.pod1IP, ""))
	l.node.MustRun("iptables", "-t", "nat", "-N", "KUBE-SVC-AAAAAAAAAAAAAAAA")
	l.node.MustRun("iptables", "-t", "nat", "-N", "OTHER")
	l.node.MustRun("iptables", "-t", "nat", "-A", "OTHER", "-j", "RETURN")
	l.node.MustRun("iptables", "-t", "nat", "-A", "PREROUTING", "-j", "OTHER")
	foreign := kernelRules(t, l.node, false)

	ctx := t.Context()
	first := newNSDataplane(t, l.node, Config{})
	if err := first.Sync(ctx, c.build()); err != nil {
		t.Fatal(err)
	}
	c.b.UpdateService(dataplanetest.MakeService("lab", "gone", nil), nil)
	st := c.build()

	second := newNSDataplane(t, l.node, Config{})
	if err := second.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	other := netns.New(t, "fresh")
	fresh := newNSDataplane(t, other, Config{})
	other.MustRun("iptables", "-t", "nat", "-N", "KUBE-SVC-AAAAAAAAAAAAAAAA")
	other.MustRun("iptables", "-t", "nat", "-N", "OTHER")
	other.MustRun("iptables", "-t", "nat", "-A", "OTHER", "-j", "RETURN")
	other.MustRun("iptables", "-t", "nat", "-A", "PREROUTING", "-j", "OTHER")
	if err := fresh.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if diff := cmpDiff(kernelRules(t, other, false), kernelRules(t, l.node, false)); diff != "" {
		t.Errorf("after a restart (-fresh +restarted):\n%s", diff)
	}
	mustAnswer(t, l.node, "tcp", "", "172.30.0.10:80")

	for range 2 {
		if err := second.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmpDiff(foreign, kernelRules(t, l.node, false)); diff != "" {
		t.Errorf("after Cleanup (-before +after):\n%s", diff)
	}
}

// TestKernelBadStatesAccepted feeds states full of invalid values and
// random valid ones to the kernel: whatever the input, iptables-restore
// must accept what the dataplane writes, fully and partially.
func TestKernelBadStatesAccepted(t *testing.T) {
	netns.Require(t, "iptables-restore", "ip6tables-restore", "iptables")
	node := netns.New(t, "bad")
	for _, fam := range []string{"IPv4", "IPv6"} {
		dp := newNSDataplane(t, node, Config{Family: familyOf(fam)})
		ctx := t.Context()
		for seed := range uint64(15) {
			r := rand.New(rand.NewPCG(seed, 99))
			s := badState(r, fam == "IPv6")
			if err := dp.Sync(ctx, s); err != nil {
				t.Fatalf("%s seed %d: %v", fam, seed, err)
			}
		}
		if err := dp.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func cmpDiff(a, b map[string][]string) string {
	return cmpDiffAny(a, b)
}

var _ dataplane.Dataplane = (*nsDataplane)(nil)

// TestKernelHostileObjectsAccepted feeds the kinds of objects the model's
// fuzz corpora hold (unparsable and wrong-family addresses, leading zeros,
// out-of-range ports, unknown protocols, duplicates, names unsafe in a
// comment, a huge service) through the Builder, beside a valid service, and
// checks that the real iptables-restore accepts the result: the model must
// have skipped everything bad before it could reach the kernel.
func TestKernelHostileObjectsAccepted(t *testing.T) {
	netns.Require(t, "iptables-restore", "ip6tables-restore", "iptables")
	var objs []any
	svc := func(name, ip string, mutate func(*v1.Service)) {
		objs = append(objs, dataplanetest.MakeService("ns", name, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = ip
			s.Spec.ClusterIPs = []string{ip}
			s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p", v1.ProtocolUDP, 53, 30053, 0)}
			mutate(s)
		}))
	}
	svc("good", "172.30.0.10", func(*v1.Service) {})
	svc("zeros", "172.30.000.011", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"192.168.099.011", "", "1.2.3.4/8"} })
	svc("badip", "10.0.0.256", func(*v1.Service) {})
	svc("ports", "172.30.0.12", func(s *v1.Service) {
		s.Spec.Ports = append(s.Spec.Ports,
			dataplanetest.ServicePort("zero", v1.ProtocolTCP, 0, 0, 0),
			dataplanetest.ServicePort("big", v1.ProtocolTCP, 70000, 99999, 0),
			dataplanetest.ServicePort("icmp", "ICMP", 80, 0, 0),
			dataplanetest.ServicePort("p", v1.ProtocolUDP, 54, 0, 0), // duplicate name
			dataplanetest.ServicePort(`q"uote`, v1.ProtocolTCP, 81, 0, 0))
	})
	svc("ranges", "172.30.0.13", func(s *v1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/33", " 203.0.113.000/025", "bogus", "::/0x"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "1.2.3.4"}, {IP: "fd00::1"}, {IP: "x"}, {Hostname: "lb.example"}}
	})
	svc("affinity", "172.30.0.14", func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](-7)}}
	})
	svc("huge", "172.30.0.15", func(s *v1.Service) {
		for i := range 2000 {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, fmt.Sprintf("198.51.%d.%d", i/250, i%250+1), "not-an-ip")
		}
	})
	for _, name := range []string{"good", "zeros", "ports", "ranges", "huge"} {
		objs = append(objs, dataplanetest.MakeSlice("ns", name, 1, func(es *discovery.EndpointSlice) {
			es.Ports = []discovery.EndpointPort{
				dataplanetest.SlicePort("p", v1.ProtocolUDP, 5353),
				{Name: ptr.To("nilport")},
				dataplanetest.SlicePort("p", "ICMP", 7),
			}
			es.Endpoints = []discovery.Endpoint{
				dataplanetest.ReadyEndpoint("10.180.0.1", dataplanetest.NodeName),
				dataplanetest.ReadyEndpoint("010.180.000.002", ""),
				dataplanetest.ReadyEndpoint("10.180.0.1", ""), // duplicate address
				dataplanetest.ReadyEndpoint("fd00::5", ""),
				dataplanetest.ReadyEndpoint("999.1.1.1", ""),
				{Addresses: nil},
			}
		}))
	}

	skipped := 0
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		NodeName: dataplanetest.NodeName,
		Settings: dataplanetest.DefaultSettings(),
		Logger:   funcr.New(func(string, string) {}, funcr.Options{}),
		OnSkip:   func(string, string) { skipped++ },
	})
	b.UpdateNode(dataplanetest.TestNode(nil))
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			b.UpdateService(nil, o)
		case *discovery.EndpointSlice:
			b.UpdateEndpointSlice(nil, o)
		}
	}
	build := b.Build()
	if skipped == 0 {
		t.Fatal("the Builder skipped nothing: the hostile objects did not reach the model")
	}
	node := netns.New(t, "hostile")
	for _, s := range build.States {
		dp := newNSDataplane(t, node, Config{Family: s.Family})
		if err := dp.Sync(t.Context(), s); err != nil {
			t.Fatalf("%s: the kernel rejected what the model built from hostile objects: %v", s.Family, err)
		}
		if s.Family == v1.IPv4Protocol {
			out := node.MustRun("iptables-save", "-t", "nat")
			if !strings.Contains(out, `"ns/good:p cluster IP"`) || !strings.Contains(out, "172.30.0.11/32") {
				t.Errorf("valid services missing from the programmed rules:\n%s", out)
			}
		}
		if err := dp.Cleanup(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

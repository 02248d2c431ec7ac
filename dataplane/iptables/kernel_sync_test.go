package iptables

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
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
	Runner
	armed bool
}

func (r *corruptRunner) Restore(ctx context.Context, data []byte) error {
	if r.armed {
		data = append(slices.Clone(data[:len(data)-len("COMMIT\n")]), []byte("-A PK-SERVICES -j PK-NO-SUCH-CHAIN\nCOMMIT\n")...)
	}
	return r.Runner.Restore(ctx, data)
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
		r, err := NewExecRunner(ExecConfig{})
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
	var re *RestoreError
	if !errors.As(err, &re) || !re.Partial || re.Line == 0 || !strings.Contains(strings.Join(re.Context, "\n"), "PK-NO-SUCH-CHAIN") {
		t.Fatalf("Sync = %#v, want a partial *RestoreError pointing at the bad line", err)
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

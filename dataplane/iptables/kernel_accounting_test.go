package iptables

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/nfacct"
	"github.com/proxykit/proxykit/internal/netns"
)

// requireNFAcct skips t on a kernel without nfnetlink_acct: a missing
// kernel feature, a reason to skip even under PROXYKIT_REQUIRE_KERNEL=1.
func requireNFAcct(t *testing.T, ns *netns.NS) {
	t.Helper()
	err := ns.Do(func() error {
		c, err := nfacct.Dial()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Get(context.Background(), LocalhostNodePortsCounter)
		if errors.Is(err, nfacct.ErrNotExist) {
			err = nil
		}
		return err
	})
	if errors.Is(err, nfacct.ErrNotSupported) {
		t.Skipf("kernel without nfnetlink_acct: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// gathered returns the value of the metric name in reg; ok is false when
// it has no sample.
func gathered(t *testing.T, reg prometheus.Gatherer, name string) (v float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			m := mf.Metric[0]
			if m.Counter != nil {
				return m.Counter.GetValue(), true
			}
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

// TestKernelLocalhostNodePortsCounted: connections to a node port on
// 127.0.0.1 are counted, once each (the nat table sees a connection's
// first packet), and nothing else is; the metric reads the node
// namespace's counter from the scraping thread, which is outside it; the
// rules read back as programmed.
func TestKernelLocalhostNodePortsCounted(t *testing.T) {
	l := newLab(t, false)
	requireNFAcct(t, l.node)
	serve(t, l.pod1, "pod1", hostPort(l.pod1IP, 8080))
	c := l.cluster(t)
	c.service(l, "web", "172.30.0.10", 30080, nil, dataplanetest.ReadyEndpoint(l.pod1IP, dataplanetest.NodeName))
	reg := prometheus.NewPedanticRegistry()
	dp := newNSDataplane(t, l.node, Config{Registerer: reg})
	ctx := t.Context()
	if err := dp.Sync(ctx, c.build()); err != nil {
		t.Fatal(err)
	}
	if v, ok := gathered(t, reg, "proxykit_iptables_nfacct_available"); !ok || v != 1 {
		t.Fatalf("nfacct_available = %v (present %v), want 1", v, ok)
	}
	const metric = "proxykit_iptables_localhost_nodeports_accepted_packets_total"
	count := func() float64 {
		t.Helper()
		v, ok := gathered(t, reg, metric)
		if !ok {
			t.Fatalf("%s has no sample", metric)
		}
		return v
	}
	before := count()
	for range 3 {
		mustAnswer(t, l.node, "tcp", "", "127.0.0.1:30080")
	}
	mustAnswer(t, l.node, "udp", "", "127.0.0.1:30081")
	if got := count() - before; got != 4 {
		t.Errorf("%s grew by %v after 3 TCP connections and 1 UDP exchange to 127.0.0.1, want 4", metric, got)
	}
	before = count()
	mustAnswer(t, l.node, "tcp", "", hostPort(l.nodeIP, 30080))
	mustAnswer(t, l.client, "tcp", l.clientIP, hostPort(l.nodeIP, 30080))
	if got := count() - before; got != 0 {
		t.Errorf("%s grew by %v for connections to the node's own address", metric, got)
	}
	if _, ok := gathered(t, reg, "proxykit_iptables_ct_state_invalid_dropped_packets_total"); !ok {
		t.Error("the INVALID-drop counter has no sample")
	}

	save := l.node.MustRun("iptables-save", "-t", "nat")
	var listed []string
	for line := range strings.Lines(save) {
		if strings.Contains(line, "nfacct") {
			listed = append(listed, strings.TrimSpace(line))
		}
	}
	if len(listed) != 2 {
		t.Errorf("iptables-save lists %d rules with nfacct, want 2 (TCP and UDP):\n%s", len(listed), strings.Join(listed, "\n"))
	}
	t.Logf("listed: %q", listed)
	if drift, err := dp.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Errorf("Reconcile after Sync = %v, %v", drift, err)
	}
	if changed, err := dp.KernelChanged(ctx); err != nil || changed {
		t.Errorf("KernelChanged after Sync = %v, %v", changed, err)
	}
}

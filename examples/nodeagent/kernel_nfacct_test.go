package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane/nfacct"
	"github.com/proxykit/proxykit/internal/netns"
)

// localhostAccepted is the kube-proxy metric of packets accepted on
// localhost node ports.
const localhostAccepted = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total"

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
		if _, err := c.Get(context.Background(), "proxykit-probe"); !errors.Is(err, nfacct.ErrNotExist) {
			return err
		}
		return nil
	})
	if errors.Is(err, nfacct.ErrNotSupported) {
		t.Skipf("kernel without nfnetlink_acct: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// scraped returns the value of the unlabelled metric name in the agent's
// /metrics; ok is false when it has no sample.
func (l *switchLab) scraped(t *testing.T, name string) (v float64, ok bool) {
	t.Helper()
	_, body := l.get(t, "127.0.0.1:10249", "/metrics")
	for line := range strings.Lines(body) {
		if rest, found := strings.CutPrefix(line, name+" "); found {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", strings.TrimSpace(line), err)
			}
			return v, true
		}
	}
	return 0, false
}

// TestKernelLocalhostNodePortsMetric is upstream's e2e test "should update
// metric for tracking accepted packets destined for localhost nodeports"
// on one node: the agent in iptables mode says so at /proxyMode, has set
// route_localnet, and its kube-proxy metric counts each connection to the
// node port on 127.0.0.1 (once: the nat table sees a connection's first
// packet).
func TestKernelLocalhostNodePortsMetric(t *testing.T) {
	netns.Require(t, "iptables", "ip6tables", "iptables-restore", "iptables-save", "ip6tables-save", "sysctl")
	l := newSwitchLab(t)
	requireNFAcct(t, l.node)
	startAgent(t, l.node, "--proxy-mode", "iptables", "--manifests", l.dir, "--hostname-override", "n1", noConntrackMax)
	l.waitServed(t, "iptables")
	if _, mode := l.get(t, "127.0.0.1:10249", "/proxyMode"); strings.TrimSpace(mode) != "iptables" {
		t.Errorf("/proxyMode = %q, want iptables", mode)
	}
	if got := strings.TrimSpace(l.node.MustRun("cat", "/proc/sys/net/ipv4/conf/all/route_localnet")); got != "1" {
		t.Errorf("route_localnet = %s, want 1", got)
	}
	var before float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		v, ok := l.scraped(t, localhostAccepted)
		if ok {
			before = v
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in /metrics", localhostAccepted)
		}
	}
	const connections = 10
	for range connections {
		if got := probe(l.node, "tcp", "127.0.0.1:30080"); got != "pod" {
			t.Fatalf("127.0.0.1:30080 answered %q, want the pod", got)
		}
	}
	after, _ := l.scraped(t, localhostAccepted)
	if after-before != connections {
		t.Errorf("%s went from %v to %v after %d connections, want +%d", localhostAccepted, before, after, connections, connections)
	}
	// Another address of the node is not counted.
	if got := probe(l.client, "tcp", "10.0.2.254:30080"); got != "pod" {
		t.Fatalf("the node port from the client answered %q, want the pod", got)
	}
	if again, _ := l.scraped(t, localhostAccepted); again != after {
		t.Errorf("%s went from %v to %v for a connection to another address", localhostAccepted, after, again)
	}
}

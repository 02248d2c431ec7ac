package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/internal/vmtest"
)

// switchForeignNFT are another program's nftables table and one named as
// kube-proxy's, which no mode of the agent may touch.
const switchForeignNFT = `table inet foreign {
	chain input {
		type filter hook input priority 10; policy accept;
		ip saddr 192.0.2.1 drop
	}
}
table ip kube-proxy {
	chain services {
		ip daddr 10.96.99.99 return
	}
}
`

// switchLab is a node whose pod serves the web service of nftManifests
// (cluster IP 10.96.0.10:80, node port 30080) and an outside client.
type switchLab struct {
	node, client *netns.NS
	dir          string
}

func newSwitchLab(t *testing.T) *switchLab {
	t.Helper()
	l := &switchLab{node: netns.New(t, "node"), client: netns.New(t, "client"), dir: t.TempDir()}
	pod := netns.New(t, "pod")
	netns.Veth(t, l.node, "veth1", []string{"10.0.1.254/24"}, pod, "eth0", []string{"10.0.1.1/24"})
	netns.Veth(t, l.node, "eth0", []string{"10.0.2.254/24"}, l.client, "eth0", []string{"10.0.2.9/24"})
	pod.MustRun("ip", "route", "add", "default", "via", "10.0.1.254")
	l.client.MustRun("ip", "route", "add", "default", "via", "10.0.2.254")
	// Service addresses are routed before the rules rewrite them.
	l.node.MustRun("ip", "route", "add", "10.96.0.0/16", "via", "10.0.1.1")
	l.node.MustRun("sysctl", "-qw", "net.ipv4.ip_forward=1")
	writeFile(t, l.dir, "cluster.yaml", nftManifests)
	serveAs(t, pod, "pod", []string{"10.0.1.1:8080"}, nil)
	return l
}

// plantForeign gives the node another program's iptables chain and
// rules, a chain named as kube-proxy's, nftables tables (switchForeignNFT)
// and a policy route.
func (l *switchLab) plantForeign(t *testing.T) {
	t.Helper()
	cmd := l.node.Command("iptables-restore")
	cmd.Stdin = strings.NewReader(foreign)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s", err, out)
	}
	for _, cmd := range [][]string{
		{"iptables", "-t", "nat", "-N", "KUBE-SERVICES"},
		{"iptables", "-t", "nat", "-A", "KUBE-SERVICES", "-d", "10.96.99.99/32", "-j", "RETURN"},
		{"ip6tables", "-t", "filter", "-N", "FOREIGN"},
		{"ip6tables", "-t", "filter", "-A", "INPUT", "-s", "2001:db8:ff::1/128", "-j", "FOREIGN"},
		{"ip", "rule", "add", "fwmark", "0x1/0x1", "lookup", "100", "priority", "2000"},
	} {
		l.node.MustRun(cmd[0], cmd[1:]...)
	}
	cmd = l.node.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(switchForeignNFT)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
}

// foreignState is what of the node the agent must not touch: the planted
// objects as the kernel lists them.
func (l *switchLab) foreignState(t *testing.T) string {
	t.Helper()
	v4, v6 := saved(t, l.node)
	var b strings.Builder
	for _, line := range strings.Split(v4+"\n"+v6, "\n") {
		if strings.Contains(line, "FOREIGN") || strings.Contains(line, "KUBE-") || strings.Contains(line, "198.51.100.7") {
			b.WriteString(line + "\n")
		}
	}
	b.WriteString(l.node.MustRun("nft", "list", "table", "inet", "foreign"))
	b.WriteString(l.node.MustRun("nft", "list", "table", "ip", "kube-proxy"))
	for _, line := range strings.Split(l.node.MustRun("ip", "rule"), "\n") {
		if strings.Contains(line, "lookup 100") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// modesHeld says which modes' objects the node's kernel holds: chains of
// their prefixes, the agent's nftables tables, IPVS's link and virtual
// servers (when withIPVS), userspace's policy route.
func (l *switchLab) modesHeld(t *testing.T, withIPVS bool) []string {
	t.Helper()
	v4, v6 := saved(t, l.node)
	saves := v4 + v6
	tables := l.node.MustRun("nft", "list", "tables")
	rules := l.node.MustRun("ip", "rule") + l.node.MustRun("ip", "-6", "rule")
	links := l.node.MustRun("ip", "-o", "link")
	held := map[string]bool{
		"iptables":  strings.Contains(saves, ":PK-"),
		"nftables":  strings.Contains(tables, "table ip proxykit") || strings.Contains(tables, "table ip6 proxykit"),
		"ipvs":      strings.Contains(saves, ":PKV-") || strings.Contains(links, ipvs.DefaultLink),
		"userspace": strings.Contains(saves, ":PKU-") || strings.Contains(rules, "lookup 20555"),
	}
	if withIPVS {
		if err := l.node.Do(func() error {
			d, err := ipvs.New(ipvs.Config{})
			if err != nil {
				return err
			}
			left, err := d.Leftovers(context.Background())
			held["ipvs"] = held["ipvs"] || !left.Empty()
			return err
		}); err != nil {
			t.Fatalf("read IPVS: %v", err)
		}
	}
	var out []string
	for _, m := range builtModes {
		if held[m] {
			out = append(out, m)
		}
	}
	return out
}

// checkServed: the web service answers at its cluster IP from the client
// and the node, and at its node port from the client.
func (l *switchLab) checkServed(t *testing.T, mode string) {
	t.Helper()
	for _, c := range []struct {
		from *netns.NS
		name string
		addr string
	}{
		{l.client, "client", "10.96.0.10:80"},
		{l.client, "client", "10.0.1.254:30080"},
		{l.node, "node", "10.96.0.10:80"},
	} {
		if got := probe(c.from, "tcp", c.addr); got != "pod" {
			t.Errorf("%s: %s to %s: %q, want the pod's answer", mode, c.name, c.addr, got)
		}
	}
}

// TestKernelModeSwitchLeavesNothingBehind restarts the agent in each mode
// in turn on one node (iptables, nftables, ipvs where the kernel has it,
// userspace, iptables): after each start the kernel holds the new mode's
// objects and no other's, another program's objects and kube-proxy's
// are as they were, and the web service is answered by the new mode
// after its first sync (--once; userspace, which cannot --once, once it
// says it synced). TestKernelInVM runs it with IPVS.
func TestKernelModeSwitchLeavesNothingBehind(t *testing.T) {
	netns.Require(t, "iptables", "ip6tables", "iptables-restore", "iptables-save", "ip6tables-save", "nft", "sysctl")
	cycle := []string{"iptables", "nftables", "userspace", "iptables"}
	withIPVS := len(ipvsMissing(t)) == 0
	switch {
	case withIPVS:
		cycle = slices.Insert(cycle, 2, "ipvs")
	case os.Getenv(netns.RequireKernelEnv) == "1" && vmtest.Inside():
		t.Fatalf("no IPVS in the VM: %v", ipvsMissing(t))
	}
	t.Logf("modes in turn: %s", strings.Join(cycle, ", "))
	l := newSwitchLab(t)
	l.plantForeign(t)
	before := l.foreignState(t)
	for i, mode := range cycle {
		args := []string{"--proxy-mode", mode, "--manifests", l.dir, "--hostname-override", "n1", noConntrackMax,
			"--healthz-bind-address", "", "--metrics-bind-address", ""}
		var out string
		stop := func() {}
		if mode == "userspace" {
			var output func() string
			stop, output = startAgent(t, l.node, args...)
			out = waitSynced(t, output, mode, 60*time.Second)
		} else {
			out = agentIn(t, l.node, append(args, "--once")...)
		}
		if i > 0 {
			want := `"Removed another proxy mode's objects" mode="` + cycle[i-1] + `" ipFamily="IPv4"`
			if !strings.Contains(out, want) {
				t.Errorf("%s after %s: the agent did not say %s:\n%s", mode, cycle[i-1], want, out)
			}
		}
		if diff := cmp.Diff([]string{mode}, l.modesHeld(t, withIPVS)); diff != "" {
			t.Errorf("%s after %s: modes the kernel holds (-want +got):\n%s", mode, cycle[max(i-1, 0)], diff)
		}
		if diff := cmp.Diff(before, l.foreignState(t)); diff != "" {
			t.Errorf("%s: other programs' objects changed (-before +after):\n%s", mode, diff)
		}
		l.checkServed(t, mode)
		stop()
	}
}

// waitSynced waits, a bounded time, until the agent whose output is
// output has synced both families of mode once (until then the previous
// mode's rules, if left, would answer), and returns its output.
func waitSynced(t *testing.T, output func() string, mode string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := output()
		synced := `"Synced dataplane" dataplane="` + mode + `" ipFamily=`
		if strings.Contains(out, synced+`"IPv4"`) && strings.Contains(out, synced+`"IPv6"`) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not sync within %v:\n%s", within, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// agentIn runs the agent as a whole process inside ns: every thread, every
// iptables-restore it forks and every sysctl it writes are the namespace's,
// which running it in-process on one locked thread would not guarantee. It
// returns what the agent printed.
func agentIn(t *testing.T, ns *netns.NS, args ...string) string {
	t.Helper()
	return agentInEnv(t, ns, nil, args...)
}

// agentInEnv is agentIn with env added to the agent's environment.
func agentInEnv(t *testing.T, ns *netns.NS, env []string, args ...string) string {
	t.Helper()
	out, err := agentResult(t, ns, env, args...)
	if err != nil {
		t.Fatalf("nodeagent %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// agentResult is agentInEnv for a run that may fail: its output and how
// it ended.
func agentResult(t *testing.T, ns *netns.NS, env []string, args ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(self)
	cmd.Env = append(append(os.Environ(), agentArgsEnv+"="+string(enc), "KUBERNETES_SERVICE_HOST="), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// noConntrackMax leaves nf_conntrack_max and the conntrack hash size
// alone: the hash size is the machine's, not the namespace's.
const noConntrackMax = "--conntrack-max-per-core=0"

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// saved is the namespace's ruleset of both families without what changes
// from one save to the next (the header comments and the counters).
func saved(t *testing.T, ns *netns.NS) (v4, v6 string) {
	t.Helper()
	clean := func(s string) string {
		var lines []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, counters.ReplaceAllString(l, "[0:0]"))
			}
		}
		return strings.Join(lines, "\n")
	}
	return clean(ns.MustRun("iptables-save")), clean(ns.MustRun("ip6tables-save"))
}

// foreign is someone else's ruleset, which the agent must leave as it is.
const foreign = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:FOREIGN - [0:0]
-A INPUT -s 192.0.2.1/32 -j FOREIGN
-A FOREIGN -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 198.51.100.7/32 -p udp -j DNAT --to-destination 192.0.2.9
COMMIT
`

func TestKernelOnceIsIdempotentAndCleanupLeavesNoTrace(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-save")
	ns := netns.New(t, "agent")
	cmd := ns.Command("iptables-restore")
	cmd.Stdin = strings.NewReader(foreign)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s", err, out)
	}
	before, _ := saved(t, ns)

	out := agentIn(t, ns, "--demo", "--proxy-mode", "iptables", "--once", noConntrackMax)
	wantLog := []string{noClusterCIDR, demoStart + `clusterCIDRs=[] nodePortAddresses=["all"]`, programmed}
	if diff := cmp.Diff(wantLog, logLines(out)); diff != "" {
		t.Errorf("--once said (-want +got):\n%s", diff)
	}
	v4, v6 := saved(t, ns)
	for _, want := range []string{
		":PK-SERVICES - [0:0]",
		`-A PREROUTING -m comment --comment "proxykit service portals" -j PK-SERVICES`,
		`-A OUTPUT -m comment --comment "proxykit service portals" -j PK-SERVICES`,
		`-A POSTROUTING -m comment --comment "proxykit postrouting rules" -j PK-POSTROUTING`,
		`-A PK-SERVICES -d 10.96.10.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80`,
		`-A PK-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53`,
		"-A INPUT -s 192.0.2.1/32 -j FOREIGN",
		"-A PREROUTING -d 198.51.100.7/32 -p udp -j DNAT --to-destination 192.0.2.9",
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("iptables-save lacks %q:\n%s", want, v4)
		}
	}
	if !strings.Contains(v6, `-A PK-SERVICES -d fd00:10:96::a/128 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80`) {
		t.Errorf("ip6tables-save lacks the IPv6 web service:\n%s", v6)
	}

	agentIn(t, ns, "--demo", "--proxy-mode", "iptables", "--once", noConntrackMax)
	again4, again6 := saved(t, ns)
	if diff := cmp.Diff(v4+v6, again4+again6); diff != "" {
		t.Errorf("a second --once changed the rules (-first +second):\n%s", diff)
	}

	out = agentIn(t, ns, "--cleanup")
	wantLog = []string{
		`I "Removed the agent's rules" ipFamily="IPv4" filterChains=7 natChains=28`,
		`I "Removed the agent's rules" ipFamily="IPv6" filterChains=7 natChains=9`,
	}
	if diff := cmp.Diff(wantLog, logLines(out)); diff != "" {
		t.Errorf("--cleanup said (-want +got):\n%s", diff)
	}
	after4, after6 := saved(t, ns)
	if diff := cmp.Diff(before, after4); diff != "" {
		t.Errorf("--cleanup did not restore the IPv4 ruleset (-before +after):\n%s", diff)
	}
	if strings.Contains(after6, "PK-") {
		t.Errorf("--cleanup left IPv6 rules:\n%s", after6)
	}
	if diff := cmp.Diff([]string{`I "Nothing to clean up: no PK- chains found"`}, logLines(agentIn(t, ns, "--cleanup"))); diff != "" {
		t.Errorf("a second --cleanup said (-want +got):\n%s", diff)
	}
}

// TestKernelInitOnlySetsConntrackSysctls: --init-only in a namespace sets
// that namespace's conntrack timeouts as kube-proxy sets them, and leaves
// the machine-wide limit and hash size alone with --conntrack-max-per-core=0.
func TestKernelInitOnlySetsConntrackSysctls(t *testing.T) {
	netns.Require(t, "cat")
	ns := netns.New(t, "agent")
	read := func(name string) string {
		return strings.TrimSpace(ns.MustRun("cat", "/proc/sys/net/netfilter/"+name))
	}
	if _, err := ns.Command("cat", "/proc/sys/net/netfilter/nf_conntrack_udp_timeout").Output(); err != nil {
		t.Skip("no conntrack sysctls in a new namespace: nf_conntrack is not loaded")
	}
	names := []string{"nf_conntrack_tcp_timeout_established", "nf_conntrack_tcp_timeout_close_wait",
		"nf_conntrack_tcp_be_liberal", "nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"}
	agentIn(t, ns, "--init-only", noConntrackMax, "--conntrack-tcp-timeout-established=2h",
		"--conntrack-tcp-be-liberal", "--conntrack-udp-timeout=45s", "--conntrack-udp-timeout-stream=3m")
	got := map[string]string{}
	for _, n := range names {
		got[n] = read(n)
	}
	want := map[string]string{
		"nf_conntrack_tcp_timeout_established": "7200",
		"nf_conntrack_tcp_timeout_close_wait":  "3600",
		"nf_conntrack_tcp_be_liberal":          "1",
		"nf_conntrack_udp_timeout":             "45",
		"nf_conntrack_udp_timeout_stream":      "180",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sysctls in the namespace (-want +got):\n%s", diff)
	}
}

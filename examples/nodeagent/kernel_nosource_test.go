package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/internal/netns"
)

// TestKernelOnceWithoutSourceChangesNothing: `sudo nodeagent --once` with
// no source (no --kubeconfig, --master or --manifests, not in a pod)
// prints the demo's rules, says why at the default level, and leaves the
// node's kernel as it was: iptables and nftables rulesets, ipsets, links,
// addresses, routes and the conntrack sysctls kube-proxy sets; as root and
// as an unprivileged user, in every mode. --conntrack-max-per-core=0 keeps
// a regression away from the conntrack hash size, which is the machine's,
// not the namespace's; the timeouts, which the agent would set, are the
// namespace's own.
func TestKernelOnceWithoutSourceChangesNothing(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-save", "nft", "setpriv")
	ns := netns.New(t, "nosource")
	cmd := ns.Command("iptables-restore")
	cmd.Stdin = strings.NewReader(foreign)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s", err, out)
	}
	ns.MustRun("nft", "add table inet someone; add chain inet someone input { type filter hook input priority 0; }; add rule inet someone input tcp dport 22 accept")
	before := kernelSnapshot(t, ns)
	self := unprivilegedCopy(t)

	const why = "No source given (--kubeconfig, --master, --manifests, or a pod's in-cluster config): printing the rules of the bundled demo manifests, as --dry-run does, and changing nothing on this node; --demo programs them"
	for _, tc := range []struct {
		name string
		args []string
		// code is the exit status; want what the output must hold.
		code int
		want []string
	}{
		{"iptables", []string{"--once"}, exitOK, []string{why, "# iptables-restore input (IPv4)", "10.96.10.10", "Printed the rules of one sync (dry run: nothing was programmed)"}},
		{"nftables", []string{"--proxy-mode", "nftables", "--once"}, exitOK, []string{why, "10.96.10.10", "Printed the rules of one sync (dry run: nothing was programmed)"}},
		{"ipvs", []string{"--proxy-mode", "ipvs", "--once"}, exitOK, []string{why, "# IPVS table (IPv4)", "10.96.10.10", "Printed the rules of one sync (dry run: nothing was programmed)"}},
		// Its rules name its forwarders' ports: it cannot print them, so
		// it refuses, and says how to run the demo.
		{"userspace", []string{"--proxy-mode", "userspace"}, exitFailure, []string{"nodeagent: no source given (--kubeconfig, --master, --manifests, or a pod's in-cluster config), and --proxy-mode userspace cannot print its rules instead: give a source, or --demo to program the bundled demo manifests"}},
	} {
		for _, user := range []string{"root", "nobody"} {
			t.Run(tc.name+" as "+user, func(t *testing.T) {
				args := append(tc.args, noConntrackMax)
				out, code := agentAs(t, ns, self, user == "nobody", args...)
				if code != tc.code {
					t.Errorf("nodeagent %s: exit %d, want %d; output:\n%s", strings.Join(args, " "), code, tc.code, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("nodeagent %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
					}
				}
				if diff := cmp.Diff(before, kernelSnapshot(t, ns)); diff != "" {
					t.Errorf("nodeagent %s changed the kernel (-before +after):\n%s", strings.Join(args, " "), diff)
				}
			})
		}
	}
}

// agentAs runs the agent binary self inside ns as agentResult does, as
// root or as the user nobody, within a minute (an agent that serves
// instead of exiting is stopped); it returns the output and exit status.
func agentAs(t *testing.T, ns *netns.NS, self string, nobody bool, args ...string) (string, int) {
	t.Helper()
	enc, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	argv := []string{"netns", "exec", ns.Name}
	if nobody {
		argv = append(argv, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
	}
	cmd := exec.CommandContext(ctx, "ip", append(argv, self)...)
	cmd.Env = append(os.Environ(), agentArgsEnv+"="+string(enc), "KUBERNETES_SERVICE_HOST=", "HOME=/nonexistent")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("nodeagent %s still ran after a minute:\n%s", strings.Join(args, " "), out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// unprivilegedCopy returns this test binary at a path the user nobody can
// run (the build's own directory is its owner's alone).
func unprivilegedCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nodeagent-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "nodeagent.test")
	if os.Link(self, dst) == nil {
		return dst
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// kernelSnapshot is what the agent could change in ns, by name: both
// families' iptables rulesets, the nftables ruleset, the ipsets, links,
// addresses, rules and routes, and the conntrack sysctls ("absent" where
// the namespace has none).
func kernelSnapshot(t *testing.T, ns *netns.NS) map[string]string {
	t.Helper()
	v4, v6 := saved(t, ns)
	s := map[string]string{"iptables": v4, "ip6tables": v6, "nft": ns.MustRun("nft", "list", "ruleset")}
	for _, c := range [][]string{
		{"-d", "link", "show"}, {"addr", "show"}, {"-4", "rule", "show"}, {"-6", "rule", "show"},
		{"-4", "route", "show", "table", "all"}, {"-6", "route", "show", "table", "all"},
	} {
		s["ip "+strings.Join(c, " ")] = ns.MustRun("ip", c...)
	}
	if err := ns.Do(func() error {
		sets, err := ipvs.ReadIPSets()
		s["ipsets"] = fmt.Sprintf("%v %v", sets, err)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nf_conntrack_max", "nf_conntrack_tcp_timeout_established", "nf_conntrack_tcp_timeout_close_wait",
		"nf_conntrack_tcp_be_liberal", "nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"} {
		v, err := ns.Run("cat", "/proc/sys/net/netfilter/"+name)
		if err != nil {
			v = "absent"
		}
		s[name] = strings.TrimSpace(v)
	}
	return s
}

package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// agentExit runs the agent as a whole process inside ns, as agentIn does,
// and returns its stdout, stderr and exit code.
func agentExit(t *testing.T, ns *netns.NS, args ...string) (stdout, stderr string, code int) {
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
	cmd.Env = append(os.Environ(), agentArgsEnv+"="+string(enc), "KUBERNETES_SERVICE_HOST=")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("nodeagent %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// TestKernelVerifyFindsDrift: on a namespace the agent programmed, verify
// and explain --kernel agree with the model; a rule deleted by hand and
// another program's rule that decides first are found, naming the
// service.
func TestKernelVerifyFindsDrift(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-save", "iptables")
	ns := netns.New(t, "verify")
	agentIn(t, ns, "--demo", "--proxy-mode", "iptables", "--once", noConntrackMax)

	out, errOut, code := agentExit(t, ns, "verify")
	if code != exitOK || !strings.HasPrefix(out, "OK: the kernel's rules do what the model says") {
		t.Fatalf("verify after --once: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = agentExit(t, ns, "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")
	if code != exitOK || !strings.Contains(out, "agrees:     yes") || !strings.Contains(out, "nat PK-SERVICES: ") {
		t.Errorf("explain --kernel: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// Another program DNATs the web service's cluster IP before the proxy.
	ns.MustRun("iptables", "-t", "nat", "-I", "PREROUTING", "1", "-d", "10.96.10.10/32", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", "10.9.9.9:80")
	out, errOut, code = agentExit(t, ns, "verify")
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: shadowed at 10.96.10.10:80/TCP (cluster IP)") ||
		!strings.Contains(errOut, "differ from the model for default/web:http/TCP") {
		t.Errorf("verify with a shadowing rule: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, _, code = agentExit(t, ns, "explain", "203.0.113.9", "10.96.10.10:80", "--kernel")
	if code != exitFailure || !strings.Contains(out, "nat PREROUTING: -d 10.96.10.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.9.9.9:80") ||
		!strings.Contains(out, "DISAGREES:  shadowed") {
		t.Errorf("explain --kernel with a shadowing rule: exit %d, stdout:\n%s", code, out)
	}
	ns.MustRun("iptables", "-t", "nat", "-D", "PREROUTING", "1")

	// The same through an ipset: the set's members are read.
	netns.Require(t, "ipset")
	ns.MustRun("ipset", "create", "STEER", "hash:ip,port")
	ns.MustRun("ipset", "add", "STEER", "10.96.10.10,tcp:80")
	ns.MustRun("iptables", "-t", "nat", "-I", "PREROUTING", "1", "-p", "tcp", "-m", "set", "--match-set", "STEER", "dst,dst",
		"-j", "DNAT", "--to-destination", "10.9.9.9:80")
	out, errOut, code = agentExit(t, ns, "verify")
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: shadowed at 10.96.10.10:80/TCP (cluster IP)") ||
		strings.Contains(out, "default/db") {
		t.Errorf("verify with a set rule: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	ns.MustRun("iptables", "-t", "nat", "-D", "PREROUTING", "1")
	ns.MustRun("ipset", "destroy", "STEER")

	deleteWebRule(t, ns)
	out, errOut, code = agentExit(t, ns, "verify")
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: missing at 10.96.10.10:80/TCP (cluster IP)") ||
		!strings.Contains(errOut, "differ from the model for default/web:http/TCP\n") {
		t.Errorf("verify after a deleted rule: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, _, code = agentExit(t, ns, "diagnose", "default/web", "--kernel")
	if code != exitFailure || !strings.Contains(out, "verdict: http/TCP (IPv4): rules missing at 10.96.10.10:80/TCP") {
		t.Errorf("diagnose --kernel after a deleted rule: exit %d, stdout:\n%s", code, out)
	}
}

// deleteWebRule deletes by hand the proxy's rule that sends default/web's
// cluster IP to its service chain.
func deleteWebRule(t *testing.T, ns *netns.NS) {
	t.Helper()
	var rule string
	for _, l := range strings.Split(ns.MustRun("iptables-save", "-t", "nat"), "\n") {
		if strings.HasPrefix(l, "-A PK-SERVICES ") && strings.Contains(l, "default/web:http cluster IP") {
			rule = l
		}
	}
	if rule == "" {
		t.Fatal("no PK-SERVICES rule of default/web")
	}
	words, err := splitShell(strings.TrimPrefix(rule, "-A "))
	if err != nil {
		t.Fatal(err)
	}
	ns.MustRun("iptables", append([]string{"-t", "nat", "-D"}, words...)...)
}

// TestKernelVerifyLiveAgent: on a node where the agent runs, verify and
// list --agent answer from the agent's own model (read from its metrics
// server), and verify names the service whose rule was deleted by hand.
func TestKernelVerifyLiveAgent(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-save", "iptables")
	ns := netns.New(t, "liveverify")
	startAgent(t, ns, "--demo", "--proxy-mode", "iptables", noConntrackMax)
	agent := []string{"--agent", "127.0.0.1:10249"}

	var out, errOut string
	code := -1
	for deadline := time.Now().Add(30 * time.Second); code != exitOK; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("verify --agent: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		out, errOut, code = agentExit(t, ns, append(agent, "verify")...)
	}
	if !strings.HasPrefix(out, "OK: the kernel's rules do what the model says") {
		t.Fatalf("verify --agent: stdout:\n%s", out)
	}
	out, errOut, code = agentExit(t, ns, append(agent, "list", "--name", "web")...)
	if code != exitOK || !strings.Contains(out, "10.96.10.10:80/TCP") {
		t.Errorf("list --agent: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	deleteWebRule(t, ns)
	out, errOut, code = agentExit(t, ns, append(agent, "verify")...)
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: missing at 10.96.10.10:80/TCP (cluster IP)") {
		t.Errorf("verify --agent after a deleted rule: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// splitShell splits an iptables-save rule into words, honouring its
// double quotes.
func splitShell(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quoted {
		return nil, errors.New("unbalanced quote in " + s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// TestKernelNFTablesVerify: the same in mode nftables, where the kernel
// is read from nft's listing of the agent's table.
func TestKernelNFTablesVerify(t *testing.T) {
	netns.Require(t, "nft")
	ns := netns.New(t, "nftverify")
	mode := []string{"--proxy-mode", "nftables"}
	agentIn(t, ns, append(mode, "--demo", "--once", noConntrackMax)...)

	out, errOut, code := agentExit(t, ns, append(mode, "verify")...)
	if code != exitOK || !strings.HasPrefix(out, "OK: the kernel's rules do what the model says") {
		t.Fatalf("verify after --once: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = agentExit(t, ns, append(mode, "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")...)
	if code != exitOK || !strings.Contains(out, "  map service-ips: 10.96.10.10 . tcp . 80 : goto cluster-dnat-tcp-") || !strings.Contains(out, "agrees:     yes") {
		t.Errorf("explain --kernel: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// kube-proxy's table, left behind, takes the web service first.
	ns.MustRun("nft", "add", "table", "ip", "kube-proxy")
	ns.MustRun("nft", "add", "chain", "ip", "kube-proxy", "nat-prerouting", "{ type nat hook prerouting priority dstnat; policy accept; }")
	ns.MustRun("nft", "add", "rule", "ip", "kube-proxy", "nat-prerouting", "ip", "daddr", "10.96.10.10", "tcp", "dport", "80", "dnat", "to", "10.9.9.9:80")
	out, errOut, code = agentExit(t, ns, append(mode, "verify")...)
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: shadowed at 10.96.10.10:80/TCP (cluster IP)") {
		t.Errorf("verify with kube-proxy's table: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, _, code = agentExit(t, ns, append(mode, "explain", "203.0.113.9", "10.96.10.10:80", "--kernel")...)
	if code != exitFailure || !strings.Contains(out, "ip kube-proxy nat-prerouting: ip daddr 10.96.10.10 tcp dport 80 dnat to 10.9.9.9:80") ||
		!strings.Contains(out, "DISAGREES:  shadowed") {
		t.Errorf("explain --kernel with kube-proxy's table: exit %d, stdout:\n%s", code, out)
	}
	ns.MustRun("nft", "delete", "table", "ip", "kube-proxy")

	ns.MustRun("nft", "delete", "element", "ip", "proxykit", "service-ips", "{ 10.96.10.10 . tcp . 80 }")
	out, errOut, code = agentExit(t, ns, append(mode, "verify")...)
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: missing at 10.96.10.10:80/TCP (cluster IP)") ||
		!strings.Contains(errOut, "differ from the model for default/web:http/TCP\n") {
		t.Errorf("verify after a deleted element: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, _, code = agentExit(t, ns, append(mode, "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")...)
	if code != exitFailure || !strings.Contains(out, "DISAGREES:  missing") {
		t.Errorf("explain --kernel after a deleted element: exit %d, stdout:\n%s", code, out)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/conntrack"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/troubleshoot"
	v1 "k8s.io/api/core/v1"
)

// programmedDemo is a fake machine on which the agent programmed the demo
// manifests once.
func programmedDemo(t *testing.T) (host, map[v1.IPFamily]*xtables.FakeRunner) {
	t.Helper()
	runners := bothFamilies()
	h := fakeHost(runners)
	if code, _, errOut := runOnHost(t, h, "--demo", "--once"); code != exitOK {
		t.Fatalf("--once: exit %d, stderr:\n%s", code, errOut)
	}
	return h, runners
}

// deleteRule deletes the rule of chain whose text contains match.
func deleteRule(t *testing.T, r *xtables.FakeRunner, table, chain, match string) {
	t.Helper()
	for _, rule := range r.Ruleset().Rules(table, chain) {
		if strings.Contains(rule, match) {
			in := "*" + table + "\n-D " + chain + " " + rule + "\nCOMMIT\n"
			if err := r.Restore(t.Context(), xtables.RestoreBytes(in)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no rule of %s %s contains %q", table, chain, match)
}

func TestVerify(t *testing.T) {
	h, runners := programmedDemo(t)
	code, out, errOut := runOnHost(t, h, "verify")
	if code != exitOK || out != "OK: the kernel's rules do what the model says for 8 service ports (IPv4, IPv6)\n" {
		t.Fatalf("in sync: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	deleteRule(t, runners[v1.IPv4Protocol], "nat", "PK-SERVICES", "default/web:http cluster IP")
	code, out, errOut = runOnHost(t, h, "verify")
	wantOut := "default/web:http/TCP: missing at 10.96.10.10:80/TCP (cluster IP) from 198.51.100.7: no rule of the proxy matches; the model says DNAT to 10.244.0.11:8080, 10.244.1.12:8080, 10.244.2.13:8080\n"
	if code != exitFailure || !strings.Contains(errOut, "the kernel's rules differ from the model for default/web:http/TCP\n") {
		t.Errorf("after a deleted rule: exit %d, stderr:\n%s", code, errOut)
	}
	if diff := cmp.Diff(wantOut, out); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	code, out, _ = runOnHost(t, h, "verify", "-o", "json")
	var drift []troubleshoot.Mismatch
	if err := json.Unmarshal([]byte(out), &drift); err != nil || code != exitFailure || len(drift) != 1 || drift[0].Kind != troubleshoot.Missing {
		t.Errorf("-o json: exit %d, %v, %+v:\n%s", code, err, drift, out)
	}
}

func TestExplainKernel(t *testing.T) {
	h, runners := programmedDemo(t)
	code, out, errOut := runOnHost(t, h, "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"kernel rules the packet meets:\n  nat PREROUTING: -m comment --comment \"proxykit service portals\" -j PK-SERVICES\n",
		"\n  nat PK-POSTROUTING: -m mark ! --mark 0x00004000/0x00004000 -j RETURN\nkernel:     DNAT to 10.244.0.11:8080, 10.244.1.12:8080, 10.244.2.13:8080\nagrees:     yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	deleteRule(t, runners[v1.IPv4Protocol], "nat", "PK-SERVICES", "default/web:http cluster IP")
	code, out, _ = runOnHost(t, h, "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")
	if code != exitFailure || !strings.Contains(out, "DISAGREES:  missing: no rule of the proxy matches") {
		t.Errorf("after a deleted rule: exit %d:\n%s", code, out)
	}
}

func TestDiagnoseCommand(t *testing.T) {
	h, runners := programmedDemo(t)
	code, out, errOut := runOnHost(t, h, "diagnose", "default/web", "--kernel")
	if code != exitOK || !strings.HasSuffix(out, "verdict: OK: 3 endpoints, rules in place\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	h.flows = func(_ context.Context, f v1.IPFamily) ([]conntrack.Flow, error) {
		if f != v1.IPv4Protocol {
			return nil, nil
		}
		return []conntrack.Flow{{Protocol: v1.ProtocolTCP, Client: netip.MustParseAddrPort("10.244.0.9:40000"),
			Frontend: netip.MustParseAddrPort("10.96.10.10:80"), Endpoint: netip.MustParseAddrPort("10.244.3.3:8080")}}, nil
	}
	code, out, _ = runOnHost(t, h, "diagnose", "default/web:http", "--kernel")
	if code != exitOK || !strings.Contains(out, "warning: http/TCP (IPv4): stale conntrack entries: connections still go to endpoints no longer serving: 10.244.3.3:8080 (1)\n") {
		t.Errorf("with a stale flow: exit %d, stdout:\n%s", code, out)
	}
	h.flows = nil
	code, out, _ = runOnHost(t, h, "diagnose", "default/reports:http")
	if code != exitFailure || !strings.Contains(out, "verdict: http/TCP (IPv4): no endpoints") {
		t.Errorf("reports: exit %d, stdout:\n%s", code, out)
	}
	deleteRule(t, runners[v1.IPv4Protocol], "nat", "PK-SERVICES", "default/web:http cluster IP")
	code, out, _ = runOnHost(t, h, "diagnose", "default/web", "--kernel", "-o", "json")
	var r troubleshoot.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitFailure || r.OK || !strings.Contains(r.Verdict, "rules missing at 10.96.10.10:80/TCP") {
		t.Errorf("after a deleted rule: exit %d, %v, verdict %q", code, err, r.Verdict)
	}
}

func TestListCommand(t *testing.T) {
	code, out, errOut := runAgent(t, "list", "--namespace", "default", "--type", "nodeport")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	want := "FRONTEND    TYPE      SERVICE                BACKENDS\n" +
		":30080/TCP  NodePort  default/shop:http/TCP  "
	if !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 2 {
		t.Errorf("stdout:\n%s\nwant it to start with\n%s", out, want)
	}
	code, out, _ = runAgent(t, "list", "-o", "json")
	var rows []troubleshoot.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != exitOK || len(rows) == 0 {
		t.Errorf("-o json: exit %d, %v:\n%s", code, err, out)
	}
}

func TestTroubleshootCommandLines(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"diagnose"}, exitUsage, "diagnose needs NAMESPACE/SERVICE[:PORT]"},
		{[]string{"diagnose", "web"}, exitUsage, `diagnose: "web" is not NAMESPACE/SERVICE[:PORT]`},
		{[]string{"diagnose", "default/web", "--client", "me"}, exitUsage, `--client "me" is not an IP address`},
		{[]string{"diagnose", "default/web", "-o", "yaml"}, exitUsage, `--output "yaml" is not text or json`},
		{[]string{"diagnose", "default/web", "--type", "NodePort"}, exitUsage, "--type applies to list only"},
		{[]string{"list", "--type", "Headless"}, exitUsage, `--type "Headless" is not ClusterIP`},
		{[]string{"list", "--kernel"}, exitUsage, "--kernel applies to explain and diagnose only"},
		{[]string{"list", "extra"}, exitUsage, "list takes no operands"},
		{[]string{"verify", "--from", "pod"}, exitUsage, "--from applies to explain only"},
		{[]string{"--kernel"}, exitUsage, "--kernel applies to a subcommand only"},
		{[]string{"explain", "10.0.0.1", "10.96.0.1:443", "-o", "json"}, exitUsage, "--output applies to a subcommand only"},
		{[]string{"verify", "--dry-run"}, exitFailure, "verify: a dry run reads no kernel"},
		{[]string{"verify", "--proxy-mode", "nftables"}, exitFailure, "verify: nft cannot be read here"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runOnHost(t, fakeHost(bothFamilies()), tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.code, tt.stderr)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
		})
	}
}

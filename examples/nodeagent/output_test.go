package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// fakeHost is a machine whose iptables are FakeRunners (a family without
// one has no usable tools) and that cleans no conntrack.
func fakeHost(runners map[v1.IPFamily]*xtables.FakeRunner) host {
	return host{runner: func(f v1.IPFamily) (xtables.Runner, error) {
		if r, ok := runners[f]; ok {
			return r, nil
		}
		return nil, errors.New("ip6tables: not found")
	}}
}

func bothFamilies() map[v1.IPFamily]*xtables.FakeRunner {
	return map[v1.IPFamily]*xtables.FakeRunner{v1.IPv4Protocol: xtables.NewFakeRunner(), v1.IPv6Protocol: xtables.NewFakeRunner()}
}

// runOnHost runs the agent in-process on h.
func runOnHost(t *testing.T, h host, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var out, errOut bytes.Buffer
	code = runOn(context.Background(), h, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

var (
	klogHeader = regexp.MustCompile(`(?m)^([IWE])\d{4} [0-9:.]+ +\d+ [^ ]+:\d+\] `)
	elapsed    = regexp.MustCompile(`elapsed="[^"]*"`)
)

// operatorLines are the messages an operator reads at default verbosity
// that these tests are about; other lines (a sync's own) are left out.
var operatorLines = []string{
	"No --cluster-cidr",
	"IPv6 is not proxied",
	"Local traffic detection is ClusterCIDR",
	"No source given",
	"Starting proxy",
	"Sources synced without",
	"Programmed the rules once",
	"Printed the rules",
	"Removed the agent's rules",
	"Removed another proxy mode's objects",
	"Nothing to clean up",
}

// logLines returns the operator lines of stderr, without klog's header
// (but with its severity) and with the elapsed time blanked.
func logLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(klogHeader.ReplaceAllString(stderr, "$1 "), "\n") {
		for _, m := range operatorLines {
			if strings.Contains(l, `"`+m) {
				out = append(out, elapsed.ReplaceAllString(l, `elapsed="X"`))
				break
			}
		}
	}
	return out
}

const (
	noClusterCIDR = `I "No --cluster-cidr: traffic from outside the cluster to cluster IPs is not masqueraded, so its replies may bypass this node; set --cluster-cidr to the pods' CIDRs"`
	noNode        = `I "Sources synced without this proxy's Node: /healthz answers 503 and topology is unknown until it appears; check the node name" node="elsewhere"`
	noV6CIDR      = `I "Local traffic detection is ClusterCIDR, but no cluster CIDR of this IP family is set: none of its traffic counts as from a local pod" ipFamily="IPv6" clusterCIDRs=["10.244.0.0/16"]`
	noSource      = `I "No source given (--kubeconfig, --master, --manifests, or a pod's in-cluster config): printing the rules of the bundled demo manifests, as --dry-run does, and changing nothing on this node; --demo programs them"`
	demoStart     = `I "Starting proxy" node="demo-node" ipFamilies=["IPv4","IPv6"] dataplanes=["iptables (IPv4)","iptables (IPv6)"] sources=["demo manifests (built in)"] `
	programmed    = `I "Programmed the rules once" mode="iptables" ipFamilies=["IPv4","IPv6"] servicePorts=8 endpoints=16 elapsed="X"`
)

// TestOperatorOutput: at default verbosity the agent says what it runs,
// warns once about each likely misconfiguration and sums up --once.
func TestOperatorOutput(t *testing.T) {
	tests := []struct {
		name    string
		runners map[v1.IPFamily]*xtables.FakeRunner
		args    []string
		want    []string
	}{
		{
			name: "once, no cluster CIDR",
			args: []string{"--demo", "--once"},
			want: []string{
				noClusterCIDR,
				demoStart + `clusterCIDRs=[] nodePortAddresses=["all"]`,
				programmed,
			},
		},
		{
			name: "once, dual-stack with an IPv4 cluster CIDR, unknown node",
			args: []string{"--demo", "--once", "--cluster-cidr", "10.244.0.0/16", "--hostname-override", "Elsewhere"},
			want: []string{
				noV6CIDR,
				`I "Starting proxy" node="elsewhere" ipFamilies=["IPv4","IPv6"] dataplanes=["iptables (IPv4)","iptables (IPv6)"] sources=["demo manifests (built in)"] clusterCIDRs=["10.244.0.0/16"] nodePortAddresses=["all"]`,
				noNode,
				programmed,
			},
		},
		{
			name: "once, nothing to warn about",
			args: []string{"--demo", "--once", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "--nodeport-addresses", "192.168.49.0/24,primary"},
			want: []string{
				demoStart + `clusterCIDRs=["10.244.0.0/16","fd00:10:244::/56"] nodePortAddresses=["192.168.49.0/24","primary"]`,
				programmed,
			},
		},
		{
			name:    "once without ip6tables, masquerading all",
			runners: map[v1.IPFamily]*xtables.FakeRunner{v1.IPv4Protocol: xtables.NewFakeRunner()},
			args:    []string{"--demo", "--once", "--masquerade-all"},
			want: []string{
				`I "IPv6 is not proxied: ip6tables is not usable" err="ip6tables: not found"`,
				`I "Starting proxy" node="demo-node" ipFamilies=["IPv4"] dataplanes=["iptables (IPv4)"] sources=["demo manifests (built in)"] clusterCIDRs=[] nodePortAddresses=["all"] masqueradeAll=true`,
				`I "Programmed the rules once" mode="iptables" ipFamilies=["IPv4"] servicePorts=7 endpoints=13 elapsed="X"`,
			},
		},
		{
			name: "dry run",
			args: []string{"--dry-run", "--once", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56"},
			want: []string{
				noSource,
				demoStart + `clusterCIDRs=["10.244.0.0/16","fd00:10:244::/56"] nodePortAddresses=["all"]`,
				`I "Printed the rules of one sync (dry run: nothing was programmed)" mode="iptables" ipFamilies=["IPv4","IPv6"] servicePorts=8 endpoints=16 elapsed="X"`,
			},
		},
		{
			name: "cleanup with nothing programmed",
			args: []string{"--cleanup"},
			want: []string{`I "Nothing to clean up: no PK- chains found"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runners := tt.runners
			if runners == nil {
				runners = bothFamilies()
			}
			code, _, errOut := runOnHost(t, fakeHost(runners), tt.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if diff := cmp.Diff(tt.want, logLines(errOut)); diff != "" {
				t.Errorf("operator lines (-want +got):\n%s\nstderr:\n%s", diff, errOut)
			}
		})
	}
}

// TestCleanupSaysWhatItRemoved: --cleanup after --once names the chains
// it removed per family, and a second --cleanup finds nothing.
func TestCleanupSaysWhatItRemoved(t *testing.T) {
	h := fakeHost(bothFamilies())
	if code, _, errOut := runOnHost(t, h, "--demo", "--once"); code != exitOK {
		t.Fatalf("--once: exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range [][]string{
		{
			`I "Removed the agent's rules" ipFamily="IPv4" filterChains=7 natChains=28`,
			`I "Removed the agent's rules" ipFamily="IPv6" filterChains=7 natChains=9`,
		},
		{`I "Nothing to clean up: no PK- chains found"`},
	} {
		code, out, errOut := runOnHost(t, h, "--cleanup")
		if code != exitOK || out != "" {
			t.Fatalf("--cleanup: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
		}
		if diff := cmp.Diff(want, logLines(errOut)); diff != "" {
			t.Errorf("operator lines (-want +got):\n%s", diff)
		}
	}
}

// TestSourceErrorsNameWhatWasGiven: errors name the flag or file the user
// gave, never the source's position in the proxy's list.
func TestSourceErrorsNameWhatWasGiven(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--manifests", "/nonexistent/proxykit", "--dry-run", "--once"}, "nodeagent: --manifests /nonexistent/proxykit: no such file or directory\n"},
		{[]string{"--manifests", "/nonexistent/proxykit", "explain", "10.0.0.1", "10.96.0.1:80"}, "nodeagent: --manifests /nonexistent/proxykit: no such file or directory\n"},
		{[]string{"--manifests", dir, "--dry-run", "--once"}, "nodeagent: manifests " + dir + ": " + filepath.Join(dir, "bad.yaml") + ":1: yaml: did not find expected node content\n"},
	} {
		code, out, errOut := runOnHost(t, fakeHost(bothFamilies()), tc.args...)
		var last string
		if lines := strings.SplitAfter(errOut, "\n"); len(lines) > 1 {
			last = lines[len(lines)-2]
		}
		if code != exitFailure || out != "" || last != tc.want {
			t.Errorf("%v: exit %d, stdout %q, last stderr line %q; want exit %d and %q", tc.args, code, out, last, exitFailure, tc.want)
		}
	}
}

// TestVerbositySetsKlog: -v sets klog's verbosity and routes klog, which
// client-go logs through, to the agent's logger.
func TestVerbositySetsKlog(t *testing.T) {
	var buf bytes.Buffer
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(3), textlogger.Output(&buf)))
	undo := routeKlog(log, 3)
	klog.V(3).InfoS("legacy call at 3")
	klog.V(4).InfoS("legacy call at 4")
	klog.Background().V(3).Info("contextual call at 3")
	klog.FromContext(context.Background()).V(4).Info("contextual call at 4")
	enabled := []bool{klog.V(3).Enabled(), klog.V(4).Enabled()}
	undo()
	enabled = append(enabled, klog.V(1).Enabled())
	if diff := cmp.Diff([]bool{true, false, false}, enabled); diff != "" {
		t.Errorf("klog.V(3, 4, then 1 after undo).Enabled() (-want +got):\n%s", diff)
	}
	got := strings.Split(strings.TrimSpace(klogHeader.ReplaceAllString(buf.String(), "$1 ")), "\n")
	if diff := cmp.Diff([]string{`I "legacy call at 3"`, `I "contextual call at 3"`}, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

// TestClientGoLinesFollowVerbosity: client-go's own lines reach the
// agent's stderr at the level they have in kube-proxy.
func TestClientGoLinesFollowVerbosity(t *testing.T) {
	kubeconfig := fakeAPIServer(t)
	for _, tc := range []struct {
		v    string
		want bool
	}{{"0", false}, {"2", true}} {
		code, _, errOut := runAgent(t, "--kubeconfig", kubeconfig, "--hostname-override", "demo-node", "--dry-run", "--once", "-v", tc.v)
		if code != exitOK {
			t.Fatalf("-v %s: exit %d, stderr:\n%s", tc.v, code, errOut)
		}
		if got := strings.Contains(errOut, `"Caches populated"`); got != tc.want {
			t.Errorf("-v %s: client-go's \"Caches populated\" logged = %v, want %v; stderr:\n%s", tc.v, got, tc.want, errOut)
		}
		if want := `sources=["cluster via ` + kubeconfig + `"]`; !strings.Contains(errOut, want) {
			t.Errorf("-v %s: no %s in stderr:\n%s", tc.v, want, errOut)
		}
	}
}

// TestJSONLogs: --logging-format json writes one JSON object per line,
// the message and its values as keys.
func TestJSONLogs(t *testing.T) {
	code, _, errOut := runAgent(t, "--dry-run", "--once", "--logging-format=json", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		if _, ok := entry["ts"]; !ok {
			t.Errorf("no ts in %q", line)
		}
		if entry["msg"] == "Starting proxy" && entry["node"] != "demo-node" {
			t.Errorf("Starting proxy without node=demo-node: %q", line)
		}
		msgs = append(msgs, entry["msg"].(string))
	}
	if !slices.Contains(msgs, "Starting proxy") || !slices.Contains(msgs, "Printed the rules of one sync (dry run: nothing was programmed)") {
		t.Errorf("messages %q", msgs)
	}
}

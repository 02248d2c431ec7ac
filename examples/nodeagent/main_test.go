package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// agentArgsEnv makes the test binary act as the agent with these
// (JSON-encoded) arguments, so that a test can start it inside a network
// namespace as a whole process.
const agentArgsEnv = "NODEAGENT_TEST_ARGS"

func TestMain(m *testing.M) {
	if enc, ok := os.LookupEnv(agentArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(enc), &args); err != nil {
			panic(err)
		}
		os.Exit(run(context.Background(), args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runAgent runs the agent in-process.
func runAgent(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// Outside a pod, so that no flags means the demo manifests.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var out, errOut bytes.Buffer
	// The machine's iptables (for dry runs, which never call them), but
	// never its sysctls or OOM score.
	h := machine()
	h.node = nil
	code = runOn(context.Background(), h, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestNoFlagsPrintsDemoRules(t *testing.T) {
	code, out, errOut := runAgent(t)
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	// What it did, on stderr, for an operator.
	wantLog := []string{
		noSource,
		noClusterCIDR,
		demoStart + `clusterCIDRs=[] nodePortAddresses=["all"]`,
		`I "Printed the rules of one sync (dry run: nothing was programmed)" mode="iptables" ipFamilies=["IPv4","IPv6"] servicePorts=8 endpoints=16 elapsed="X"`,
	}
	if diff := cmp.Diff(wantLog, logLines(errOut)); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	for _, want := range []string{
		"# iptables-restore input (IPv4)\n*filter\n",
		"# iptables-restore input (IPv6)\n*filter\n",
		":PK-SERVICES - [0:0]",
		":PK-NODEPORTS - [0:0]",
		":PK-POSTROUTING - [0:0]",
		":PK-MARK-MASQ - [0:0]",
		`"default/web:http cluster IP" -m tcp -p tcp -d 10.96.10.10 --dport 80`,
		`"default/web:http cluster IP" -m tcp -p tcp -d fd00:10:96::a --dport 80`,
		`"kube-system/kube-dns:dns cluster IP" -m udp -p udp -d 10.96.0.10 --dport 53`,
		`"default/shop:http" -m tcp -p tcp --dport 30080`,
		`"ingress/ingress:https loadbalancer IP" -m tcp -p tcp -d 192.0.2.50 --dport 443`,
		`"ingress/ingress:https health check node port" -m tcp -p tcp --dport 32000 -j ACCEPT`,
		`"default/reports:http has no endpoints" -m tcp -p tcp -d 10.96.40.40 --dport 80 -j REJECT`,
		"--rcheck --seconds 10800 --reap",
		"COMMIT\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Count(out, "*nat\n") != 2 || strings.Count(out, "*filter\n") != 2 {
		t.Errorf("want one filter and one nat table per family, got:\n%s", out)
	}
	// The rules are deterministic: a second run prints the same bytes.
	if _, again, _ := runAgent(t); again != out {
		t.Errorf("second run differs:\n%s", cmp.Diff(out, again))
	}
}

func TestManifestsDryRun(t *testing.T) {
	dir := t.TempDir()
	data, err := demoFS.ReadFile("demo/dns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dns.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runAgent(t, "--manifests", dir, "--dry-run", "--once")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if !strings.Contains(out, "kube-system/kube-dns:dns cluster IP") || strings.Contains(out, "default/web") {
		t.Errorf("output should program kube-dns alone:\n%s", out)
	}
}

// TestNodePortAddressesPrimary: the keyword pins NodePorts to the demo
// node's InternalIP, as kube-proxy's --nodeport-addresses primary does,
// where by default every local address serves them.
func TestNodePortAddressesPrimary(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-m addrtype --dst-type LOCAL -j PK-NODEPORTS"},
		{[]string{"--nodeport-addresses", "primary"}, "-d 192.168.49.2 -j PK-NODEPORTS"},
		{[]string{"--nodeport-addresses", "127.0.0.0/8,primary"}, "-d 192.168.49.2 -j PK-NODEPORTS"},
	} {
		code, out, errOut := runAgent(t, append(tc.args, "--dry-run", "--once")...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr:\n%s", tc.args, code, errOut)
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("%v: no %q in the rules:\n%s", tc.args, tc.want, out)
		}
	}
}

// verdict parses explain's output into its fields, less the reason, which
// is for people.
func verdict(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k != "reason" {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func TestExplain(t *testing.T) {
	inferred := " (inferred from the source; choose with --from)"
	tests := []struct {
		name string
		args []string
		want map[string]string
	}{
		{
			name: "pod to a cluster IP",
			args: []string{"explain", "10.244.0.5", "10.96.10.10:80/TCP"},
			want: map[string]string{
				"packet": "10.244.0.5 -> 10.96.10.10:80/TCP", "from": "pod" + inferred, "action": "DNAT",
				"service":    "default/web:http/TCP",
				"endpoints":  "10.244.0.11:8080, 10.244.1.12:8080, 10.244.2.13:8080 (one is picked per connection)",
				"masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "UDP, protocol in lower case",
			args: []string{"explain", "10.244.0.5", "10.96.0.10:53/udp"},
			want: map[string]string{
				"packet": "10.244.0.5 -> 10.96.0.10:53/UDP", "from": "pod" + inferred, "action": "DNAT",
				"service":    "kube-system/kube-dns:dns/UDP",
				"endpoints":  "10.244.0.2:53, 10.244.1.3:53 (one is picked per connection)",
				"masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "IPv6 cluster IP",
			args: []string{"explain", "fd00:10:244::5", "[fd00:10:96::a]:80"},
			want: map[string]string{
				"packet": "fd00:10:244::5 -> [fd00:10:96::a]:80/TCP", "from": "pod" + inferred, "action": "DNAT",
				"service":    "default/web:http/TCP",
				"endpoints":  "[fd00:10:244::11]:8080, [fd00:10:244:1::12]:8080, [fd00:10:244:2::13]:8080 (one is picked per connection)",
				"masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "allowed source to an externalTrafficPolicy Local load balancer",
			args: []string{"explain", "203.0.113.9", "192.0.2.50:443/TCP"},
			want: map[string]string{
				"packet": "203.0.113.9 -> 192.0.2.50:443/TCP", "from": "outside" + inferred, "action": "DNAT",
				"service": "ingress/ingress:https/TCP", "endpoints": "10.244.0.30:8443",
				"masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "source outside loadBalancerSourceRanges",
			args: []string{"explain", "8.8.8.8", "192.0.2.50:443/TCP"},
			want: map[string]string{
				"packet": "8.8.8.8 -> 192.0.2.50:443/TCP", "from": "outside" + inferred, "action": "drop",
				"service": "ingress/ingress:https/TCP", "endpoints": "-", "masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "service without endpoints",
			args: []string{"explain", "10.244.0.5", "10.96.40.40:80/TCP"},
			want: map[string]string{
				"packet": "10.244.0.5 -> 10.96.40.40:80/TCP", "from": "pod" + inferred, "action": "reject",
				"service": "default/reports:http/TCP", "endpoints": "-", "masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "ClientIP affinity, origin given after the operands",
			args: []string{"explain", "10.244.0.5", "10.96.50.50:80/TCP", "--from", "outside"},
			want: map[string]string{
				"packet": "10.244.0.5 -> 10.96.50.50:80/TCP", "from": "outside", "action": "DNAT",
				"service":    "default/cart:http/TCP",
				"endpoints":  "10.244.0.40:8080, 10.244.1.41:8080 (one is picked per connection)",
				"masquerade": "no", "affinity": "yes",
			},
		},
		{
			name: "node port from the node itself is masqueraded",
			args: []string{"explain", "192.168.49.2", "192.168.49.2:30080/TCP"},
			want: map[string]string{
				"packet": "192.168.49.2 -> 192.168.49.2:30080/TCP", "from": "node" + inferred, "action": "DNAT",
				"service":    "default/shop:http/TCP",
				"endpoints":  "10.244.1.20:8080, 10.244.2.21:8080 (one is picked per connection)",
				"masquerade": "yes", "affinity": "no",
			},
		},
		{
			name: "off-cluster source with a cluster CIDR is masqueraded",
			args: []string{"--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "explain", "198.51.100.1", "10.96.10.10:80/TCP"},
			want: map[string]string{
				"packet": "198.51.100.1 -> 10.96.10.10:80/TCP", "from": "outside" + inferred, "action": "DNAT",
				"service":    "default/web:http/TCP",
				"endpoints":  "10.244.0.11:8080, 10.244.1.12:8080, 10.244.2.13:8080 (one is picked per connection)",
				"masquerade": "yes", "affinity": "no",
			},
		},
		{
			name: "a process on the node, said so",
			args: []string{"explain", "--from", "node", "127.0.0.1", "10.96.0.10:53/UDP"},
			want: map[string]string{
				"packet": "127.0.0.1 -> 10.96.0.10:53/UDP", "from": "node", "action": "DNAT",
				"service":    "kube-system/kube-dns:dns/UDP",
				"endpoints":  "10.244.0.2:53, 10.244.1.3:53 (one is picked per connection)",
				"masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "loopback is the node",
			args: []string{"explain", "127.0.0.1", "10.96.0.10:53/UDP"},
			want: map[string]string{
				"packet": "127.0.0.1 -> 10.96.0.10:53/UDP", "from": "node" + inferred, "action": "DNAT",
				"service":    "kube-system/kube-dns:dns/UDP",
				"endpoints":  "10.244.0.2:53, 10.244.1.3:53 (one is picked per connection)",
				"masquerade": "no", "affinity": "no",
			},
		},
		{
			name: "not a service; explain answers whatever the mode",
			args: []string{"--proxy-mode", "userspace", "explain", "10.244.0.5", "10.1.1.1:80/TCP", "--from", "pod"},
			want: map[string]string{
				"packet": "10.244.0.5 -> 10.1.1.1:80/TCP", "from": "pod", "action": "not a service",
				"service": "-", "endpoints": "-", "masquerade": "no", "affinity": "no",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runAgent(t, tt.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if diff := cmp.Diff(tt.want, verdict(out)); diff != "" {
				t.Errorf("(-want +got):\n%s\noutput:\n%s", diff, out)
			}
			if !strings.Contains(out, "\nreason:") {
				t.Errorf("no reason in:\n%s", out)
			}
		})
	}
}

func TestExplainManifests(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"node.yaml", "empty.yaml"} {
		data, err := demoFS.ReadFile("demo/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runAgent(t, "--manifests", dir, "--hostname-override", "Demo-Node ",
		"explain", "10.244.0.5", "10.96.40.40:80/TCP")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	want := map[string]string{
		"packet": "10.244.0.5 -> 10.96.40.40:80/TCP", "from": "pod (inferred from the source; choose with --from)",
		"action": "reject", "service": "default/reports:http/TCP", "endpoints": "-", "masquerade": "no", "affinity": "no",
	}
	if diff := cmp.Diff(want, verdict(out)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// lockedBuffer is a bytes.Buffer that a test may read while the agent
// writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestDryRunFollowsManifestsUntilStopped(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	data, err := demoFS.ReadFile("demo/dns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dns.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--manifests", dir, "--dry-run", "--nodeport-addresses", "localhost,all", "--iptables-min-sync-period", "0"}, &out, &errOut)
	}()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(out.String(), "kube-system/kube-dns:dns cluster IP") {
		select {
		case code := <-done:
			t.Fatalf("agent exited (%d) before it synced; stderr:\n%s", code, errOut.String())
		case <-deadline:
			t.Fatalf("no sync printed; stderr:\n%s", errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d after stop, stderr:\n%s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop")
	}
}

func TestBadCommandLines(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--bogus"}, exitUsage, "unknown flag: --bogus"},
		{[]string{"--proxy-mode", "kernelspace"}, exitUsage, `--proxy-mode: Unsupported value: "kernelspace": supported values: "iptables", "nftables", "ipvs", "userspace"`},
		{[]string{"--proxy-mode", "ipvs", "--ipvs-scheduler", "fastest", "--dry-run"}, exitFailure, `--ipvs-scheduler "fastest": want one of rr, wrr, lc, wlc, lblc, lblcr, dh, sh, mh, sed, nq`},
		{[]string{"--proxy-mode", "userspace", "--dry-run"}, exitFailure, "--proxy-mode userspace cannot --dry-run"},
		{[]string{"--proxy-mode", "ipvs", "--feature-gates", "KubeProxyIPVS=false"}, exitUsage, `--proxy-mode: Unsupported value: "ipvs"`},
		{[]string{"--feature-gates", "KubeletSeparateDiskGC=true"}, exitUsage, `--feature-gates: Invalid value: {"KubeletSeparateDiskGC":true}: unrecognized feature gate "KubeletSeparateDiskGC"`},
		{[]string{"--feature-gates", "WinDSR=false"}, exitUsage, "cannot set feature gate WinDSR to false: locked to true"},
		{[]string{"--feature-gates", "WinDSR"}, exitUsage, `invalid argument "WinDSR" for "--feature-gates" flag: missing bool value for WinDSR`},
		{[]string{"--kubeconfig", "a", "--manifests", "b"}, exitUsage, "--kubeconfig and --master are exclusive with --manifests"},
		{[]string{"--master", "https://10.0.0.1:6443", "--manifests", "b"}, exitUsage, "--kubeconfig and --master are exclusive with --manifests"},
		{[]string{"--once", "--cleanup"}, exitUsage, "--once and --cleanup are exclusive"},
		{[]string{"--proxy-mode", "userspace", "--once"}, exitUsage, "--once cannot run --proxy-mode userspace: its forwarders live in the agent's process"},
		{[]string{"--iptables-sync-period", "0s"}, exitUsage, "--iptables-sync-period: Invalid value: \"0s\": must be greater than 0"},
		{[]string{"--iptables-min-sync-period", "2m"}, exitUsage, "--iptables-sync-period: Invalid value: \"30s\": must be greater than or equal to iptables.minSyncPeriod (2m0s)"},
		{[]string{"--iptables-min-sync-period", "soon"}, exitUsage, `invalid argument "soon" for "--iptables-min-sync-period" flag`},
		{[]string{"--iptables-masquerade-bit", "32"}, exitUsage, "--iptables-masquerade-bit: Invalid value: 32: must be within the range [0, 31]"},
		{[]string{"--iptables-masquerade-bit", "0"}, exitUsage, "iptables.masqueradeBit (--iptables-masquerade-bit) 0 is not supported"},
		{[]string{"--oom-score-adj", "-1001"}, exitUsage, "--oom-score-adj: Invalid value: -1001: must be within the range [-1000, 1000]"},
		{[]string{"--conntrack-min", "-1"}, exitUsage, "--conntrack-min: Invalid value: -1: must be greater than or equal to 0"},
		{[]string{"--detect-local-mode", "InterfaceNamePrefix"}, exitUsage, `--pod-interface-name-prefix: Invalid value: "": must not be empty`},
		{[]string{"--detect-local-mode", "Guess"}, exitUsage, `--detect-local-mode: Unsupported value: "Guess"`},
		{[]string{"--metrics-bind-address", "localhost:10249"}, exitUsage, `--metrics-bind-address: Invalid value: "localhost": must be a valid IP`},
		{[]string{"--hostname-override", " "}, exitUsage, "--hostname-override: empty name"},
		{[]string{"--logging-format", "xml"}, exitUsage, `--logging-format: Unsupported value: "xml": supported values: "text", "json"`},
		{[]string{"--log-text-split-stream"}, exitUsage, "--log-text-split-stream and --log-json-split-stream are not supported"},
		{[]string{"--cluster-cidr", "10.0.0.0/8,10.1.0.0/16"}, exitUsage, "--cluster-cidr: Invalid value: \"10.0.0.0/8,10.1.0.0/16\": must be either a single CIDR or a dual-stack pair"},
		{[]string{"--cluster-cidr", "10.0.0.0"}, exitUsage, `--cluster-cidr: Invalid value: "10.0.0.0": must be a valid CIDR block`},
		{[]string{"--nodeport-addresses", "primary,192.168.0.0"}, exitUsage, `--nodeport-addresses: Invalid value: "192.168.0.0": must be a valid CIDR or one of the keywords`},
		{[]string{"--nodeport-addresses", "all,all"}, exitUsage, `--nodeport-addresses: Duplicate value: "all"`},
		{[]string{"--init-only", "--dry-run"}, exitFailure, "--init-only with --dry-run: a dry run changes nothing"},
		{[]string{"--config", "/nonexistent/kube-proxy.yaml"}, exitUsage, "--config open /nonexistent/kube-proxy.yaml: no such file or directory"},
		{[]string{"--from", "pod"}, exitUsage, "--from applies to explain only"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"explain", "10.0.0.1"}, exitUsage, "explain needs SRC and DST:PORT/PROTO"},
		{[]string{"explain", "pod-a", "10.96.0.1:443"}, exitUsage, `source "pod-a" is not an IP address`},
		{[]string{"explain", "10.0.0.1", "10.96.0.1"}, exitUsage, `destination "10.96.0.1" is not IP:PORT`},
		{[]string{"explain", "10.0.0.1", "10.96.0.1:443/ICMP"}, exitUsage, `protocol "ICMP" is not TCP, UDP or SCTP`},
		{[]string{"explain", "10.0.0.1", "[fd00::1]:443"}, exitUsage, "different IP families"},
		{[]string{"explain", "10.0.0.1", "10.96.0.1:443", "--from", "space"}, exitUsage, `--from "space" is not pod, node or outside`},
		{[]string{"--cleanup", "--dry-run"}, exitFailure, "a dry run programs nothing"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig", "--dry-run"}, exitFailure, "--kubeconfig:"},
		{[]string{"--demo", "--manifests", "demo"}, exitUsage, "--demo is exclusive with --manifests, --kubeconfig and --master"},
		{[]string{"--demo", "--kubeconfig", "/nonexistent/kubeconfig"}, exitUsage, "--demo is exclusive with --manifests, --kubeconfig and --master"},
		{[]string{"--proxy-mode", "userspace"}, exitFailure, "no source given (--kubeconfig, --master, --manifests, or a pod's in-cluster config), and --proxy-mode userspace cannot print its rules instead: give a source, or --demo to program the bundled demo manifests"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runAgent(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.code, tt.stderr)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, _, errOut := runAgent(t, "--help")
	if code != exitOK {
		t.Errorf("exit %d, usage:\n%s", code, errOut)
	}
	// The usage, then each group of flags under its heading, in order.
	var got []string
	for _, l := range strings.Split(errOut, "\n") {
		if strings.HasSuffix(l, " flags:") || strings.Contains(l, "nodeagent [flags] explain SRC DST:PORT/PROTO") ||
			strings.Contains(l, "--healthz-bind-address string") || strings.Contains(l, "-v, --v Level") {
			got = append(got, strings.Fields(l)[0])
		}
	}
	want := []string{"nodeagent", "Configuration", "Cluster", "Proxy", "Node", "--healthz-bind-address", "Logging", "-v,", "Agent"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("--help (-want +got):\n%s\n%s", diff, errOut)
	}
}

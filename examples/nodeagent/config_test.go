package main

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"k8s.io/klog/v2/textlogger"
)

// effective is what the agent runs with, from a command line: the
// proxy's configuration and what the agent sets up around it.
type effective struct {
	Mode          string
	Proxy         proxykit.Config
	MasqueradeBit int32
	Metrics       string
	Client        client
	Resync        time.Duration
	LogFormat     string
	Verbosity     int
	// Sysctls are the values the agent writes at start, on a machine of
	// 4 CPUs whose conntrack settings are the kernel's defaults.
	Sysctls     map[string]string
	OOMScoreAdj int
	Warnings    []string
}

type client struct {
	Kubeconfig, ContentType string
	QPS                     float32
	Burst                   int32
}

// kernelDefaults are a fresh kernel's conntrack settings.
func kernelDefaults() map[string]string {
	return map[string]string{
		"net/netfilter/nf_conntrack_max":                     "65536",
		"net/netfilter/nf_conntrack_tcp_timeout_established": "432000",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "60",
		"net/netfilter/nf_conntrack_tcp_be_liberal":          "0",
		"net/netfilter/nf_conntrack_udp_timeout":             "30",
		"net/netfilter/nf_conntrack_udp_timeout_stream":      "120",
		"hashsize": "16384",
	}
}

func effectiveOf(t *testing.T, args ...string) effective {
	t.Helper()
	o, err := parse(args, io.Discard)
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	sys := sysctl.NewFake(kernelDefaults())
	params := sysctl.NewFake(map[string]string{"hashsize": kernelDefaults()["hashsize"]})
	oom := 0
	n := nodeSettings{sysctl: sys, moduleParams: params, numCPU: 4, oomScoreAdj: func(v int) error { oom = v; return nil }}
	if err := n.apply(o.cfg, textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(io.Discard)))); err != nil {
		t.Fatalf("node settings: %v", err)
	}
	written := map[string]string{}
	for name, was := range kernelDefaults() {
		src := sysctl.Interface(sys)
		if name == "hashsize" {
			src = params
		}
		if v, _ := src.Get(name); v != was {
			written[name] = v
		}
	}
	cc := o.cfg.ClientConnection
	return effective{
		Mode:          o.proxyMode,
		Proxy:         o.proxyConfig(),
		MasqueradeBit: *o.cfg.IPTables.MasqueradeBit,
		Metrics:       o.cfg.MetricsBindAddress,
		Client:        client{cc.Kubeconfig, cc.ContentType, cc.QPS, cc.Burst},
		Resync:        o.cfg.ConfigSyncPeriod.Duration,
		LogFormat:     o.cfg.Logging.Format,
		Verbosity:     o.verbosity,
		Sysctls:       written,
		OOMScoreAdj:   oom,
		Warnings:      o.warnings,
	}
}

// cmpEffective compares effectives; the proxy's Logger, which the options
// never set, is left out.
var cmpEffective = []cmp.Option{
	cmpopts.EquateEmpty(),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmpopts.IgnoreFields(proxykit.Config{}, "Logger"),
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// kubeadmDefault is what kubeadm's kube-proxy ConfigMap runs: every
// kube-proxy default, the cluster CIDR of its podSubnet.
func kubeadmDefault() effective {
	return effective{
		Mode: "iptables",
		Proxy: proxykit.Config{
			Settings: dataplane.Settings{
				LocalDetector:      dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: prefixes("10.244.0.0/16")},
				LocalhostNodePorts: true,
			},
			MinSyncPeriod:      time.Second,
			SyncPeriod:         30 * time.Second,
			HealthzBindAddress: "0.0.0.0:10256",
			BindRetryPeriod:    5 * time.Second,
		},
		MasqueradeBit: 14,
		Metrics:       "127.0.0.1:10249",
		Client:        client{"/var/lib/kube-proxy/kubeconfig.conf", "application/vnd.kubernetes.protobuf", 5, 10},
		Resync:        15 * time.Minute,
		LogFormat:     "text",
		// 4 CPUs × 32768 = 131072 = conntrack.min.
		Sysctls: map[string]string{
			"net/netfilter/nf_conntrack_max": "131072",
			"hashsize":                       "32768",
			"net/netfilter/nf_conntrack_tcp_timeout_established": "86400",
			"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "3600",
		},
		OOMScoreAdj: -999,
	}
}

func TestConfigFiles(t *testing.T) {
	file := func(name string) string { return filepath.Join("testdata", "kubeproxyconfig", name) }
	tests := []struct {
		name string
		args []string
		want func(e *effective)
	}{
		{
			name: "kubeadm's ConfigMap, unchanged",
			args: []string{"--config", file("kubeadm-defaults.yaml")},
			want: func(e *effective) {},
		},
		{
			name: "ipvs with its scheduler: the ipvs section's periods",
			args: []string{"--config", file("ipvs.yaml")},
			want: func(e *effective) {
				e.Mode = "ipvs"
				e.Proxy.SyncPeriod, e.Proxy.MinSyncPeriod = time.Minute, 5*time.Second
				e.Metrics = "0.0.0.0:10249"
			},
		},
		{
			name: "nftables: the nftables section, NodePorts on the primary IPs",
			args: []string{"--config", file("nftables.yaml")},
			want: func(e *effective) {
				e.Mode = "nftables"
				e.Proxy.Settings.MasqueradeAll = true
				e.Proxy.Settings.NodePortPrimary = true
				e.Proxy.SyncPeriod, e.Proxy.MinSyncPeriod = 45*time.Second, 2*time.Second
				e.Client.QPS, e.Client.Burst = 50, 100
				e.Client.Kubeconfig = "/var/lib/kube-proxy/kubeconfig.conf"
				e.Sysctls = map[string]string{
					"net/netfilter/nf_conntrack_tcp_timeout_established": "7200",
					"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "3600",
				}
			},
		},
		{
			name: "dual-stack, local traffic by interface prefix, IPv6 bind address",
			args: []string{"--config", file("dualstack-interface-prefix.yaml")},
			want: func(e *effective) {
				e.Proxy.Settings = dataplane.Settings{
					LocalDetector:     dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: "veth"},
					NodePortAddresses: prefixes("192.168.49.0/24", "fd00:192:168:49::/64"),
					NodePortPrimary:   true,
				}
				e.Proxy.HealthzBindAddress = "[::]:10256"
				e.Metrics = "[::1]:10249"
				e.MasqueradeBit = 15
				e.Client.ContentType = "application/json"
				e.LogFormat, e.Verbosity = "json", 2
				e.OOMScoreAdj = -500
			},
		},
		{
			name: "Windows and ignored fields are warned about by name",
			args: []string{"--config", file("windows.yaml")},
			want: func(e *effective) {
				e.Client.Kubeconfig = ""
				e.Warnings = []string{
					"Ignoring portRange: kube-proxy ignores it too",
					"Ignoring showHiddenMetricsForVersion: the agent hides no metrics",
					"Ignoring winkernel: Windows only",
					"Ignoring bindAddress: the agent takes the node's IPs from its Node object",
				}
			},
		},
		{
			name: "an unknown field: decoded leniently with a warning, as kube-proxy does",
			args: []string{"--config", file("unknown-field.yaml")},
			want: func(e *effective) {
				e.Client.Kubeconfig = ""
				e.Warnings = []string{`--config testdata/kubeproxyconfig/unknown-field.yaml: decoded leniently, as kube-proxy does: strict decoding error: unknown field "iptables.masqueradeAl"`}
			},
		},
		{
			name: "flags beside --config: logging and --hostname-override win, the others are ignored and named",
			args: []string{"--config", file("kubeadm-defaults.yaml"), "-v=3", "--hostname-override", " Node-A ",
				"--proxy-mode=nftables", "--cluster-cidr", "10.0.0.0/8", "--masquerade-all", "--metrics-port=0", "--dry-run"},
			want: func(e *effective) {
				e.Verbosity = 3
				e.Proxy.NodeName = "node-a"
				e.Proxy.HealthzBindAddress = ""
				e.Proxy.DisableHealthCheckNodePorts = true
				e.Warnings = []string{"Ignoring --cluster-cidr, --masquerade-all, --metrics-port, --proxy-mode: --config is given, and kube-proxy then ignores these flags"}
			},
		},
		{
			name: "the same settings as flags",
			args: []string{"--kubeconfig", "/var/lib/kube-proxy/kubeconfig.conf", "--cluster-cidr=10.244.0.0/16"},
			want: func(e *effective) {},
		},
		{
			name: "flags: iptables periods in mode nftables, deprecated ports, conntrack",
			args: []string{"--proxy-mode", "nftables", "--iptables-sync-period", "1m", "--iptables-min-sync-period", "0",
				"--ipvs-sync-period", "5m", "--masquerade-all", "--healthz-port", "0", "--metrics-port", "9999",
				"--conntrack-max-per-core", "0", "--conntrack-tcp-be-liberal", "--conntrack-udp-timeout-stream", "3m",
				"--oom-score-adj", "0", "--kube-api-qps", "20", "--config-sync-period", "1h", "--logging-format", "json"},
			want: func(e *effective) {
				e.Mode = "nftables"
				e.Proxy.Settings = dataplane.Settings{MasqueradeAll: true, NodePortPrimary: true, LocalhostNodePorts: true}
				e.Proxy.SyncPeriod, e.Proxy.MinSyncPeriod = time.Minute, -1
				e.Proxy.HealthzBindAddress = ""
				e.Metrics = "127.0.0.1:9999"
				e.Client.Kubeconfig, e.Client.QPS = "", 20
				e.Resync = time.Hour
				e.LogFormat = "json"
				e.Sysctls = map[string]string{
					"net/netfilter/nf_conntrack_tcp_timeout_established": "86400",
					"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "3600",
					"net/netfilter/nf_conntrack_tcp_be_liberal":          "1",
					"net/netfilter/nf_conntrack_udp_timeout_stream":      "180",
				}
				e.OOMScoreAdj = 0
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := kubeadmDefault()
			tt.want(&want)
			got := effectiveOf(t, tt.args...)
			if diff := cmp.Diff(want, got, cmpEffective...); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestInvalidConfigFiles: every error names the file and the field.
func TestInvalidConfigFiles(t *testing.T) {
	dir := filepath.Join("testdata", "kubeproxyconfig")
	tests := []struct {
		file string
		want []string
	}{
		{"invalid-values.yaml", []string{
			`featureGates: Invalid value: {"NoSuchGate":true}: unrecognized feature gate "NoSuchGate"`,
			"iptables.masqueradeBit: Invalid value: 40: must be within the range [0, 31]",
			`mode: Unsupported value: "kernelspace"`,
			"conntrack.min: Invalid value: -5: must be greater than or equal to 0",
			`iptables.syncPeriod: Invalid value: "30s": must be greater than or equal to iptables.minSyncPeriod (1m0s)`,
			`healthzBindAddress: Invalid value: "localhost": must be a valid IP`,
			`nodePortAddresses[1]: Duplicate value: "all"`,
			`nodePortAddresses[2]: Invalid value: "10.1.2.3": must be a valid CIDR`,
			`clusterCIDR: Invalid value: "10.244.0.0/16,10.245.0.0/16": must be either a single CIDR or a dual-stack pair`,
		}},
		{"wrong-kind.yaml", []string{`no kind "KubeletConfiguration" is registered for version "kubelet.config.k8s.io/v1beta1"`}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			code, out, errOut := runAgent(t, "--config", path, "--dry-run")
			if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "nodeagent: --config "+path) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// TestWriteConfigTo: the written file is the effective configuration, and
// running from it gives the same agent.
func TestWriteConfigTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-proxy.yaml")
	args := []string{"--kubeconfig", "/k", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "--proxy-mode", "nftables",
		"--iptables-min-sync-period", "3s", "--nodeport-addresses", "10.0.0.0/8,primary", "--conntrack-udp-timeout", "20s", "-v", "4"}
	code, out, errOut := runAgent(t, append(args, "--write-config-to", path)...)
	if code != exitOK || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\n", "kind: KubeProxyConfiguration\n", "mode: nftables\n",
		"clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n", "  minSyncPeriod: 3s\n", "- primary\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("written config lacks %q:\n%s", want, data)
		}
	}
	if diff := cmp.Diff(effectiveOf(t, args...), effectiveOf(t, "--config", path), cmpEffective...); diff != "" {
		t.Errorf("flags vs the file they wrote (-flags +file):\n%s", diff)
	}
}

// TestConfigFileChangeEndsTheAgent: like kube-proxy, a running agent
// exits when its --config file is written, to be restarted on the new one.
func TestConfigFileChangeEndsTheAgent(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	data, err := demoFS.ReadFile("demo/dns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dns.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "config.conf")
	kpc := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\n"
	if err := os.WriteFile(conf, []byte(kpc), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", conf, "--manifests", dir, "--dry-run"}, &out, &errOut)
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
	if err := os.WriteFile(conf, []byte(kpc+"mode: nftables\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		want := "nodeagent: --config " + conf + ": the file changed; exiting so that it is read again, as kube-proxy does\n"
		if code != exitFailure || !strings.HasSuffix(errOut.String(), want) {
			t.Errorf("exit %d, stderr ends %q; want exit %d and %q", code, lastLine(errOut.String()), exitFailure, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop when its config file changed")
	}
}

func lastLine(s string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1]
}

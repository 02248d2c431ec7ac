package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// A KubeProxyConfiguration file and kube-proxy's flags saying the same
// program the same rules: the file is not a second way of configuring
// that could drift from the first.
func TestKernelConfigFileProgramsWhatFlagsDo(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-save")
	// maxPerCore 0: the conntrack table's hash size is the machine's,
	// not the namespace's, and a test must leave it alone.
	config := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(config, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: 10.244.0.0/16
conntrack:
  maxPerCore: 0
iptables:
  masqueradeAll: true
  masqueradeBit: 12
nodePortAddresses: [primary]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := netns.New(t, "file")
	agentIn(t, fromFile, "--config", config, "--demo", "--once")
	fromFlags := netns.New(t, "flags")
	agentIn(t, fromFlags, "--demo", "--proxy-mode", "iptables", "--cluster-cidr", "10.244.0.0/16", "--masquerade-all",
		"--iptables-masquerade-bit", "12", "--nodeport-addresses", "primary", noConntrackMax, "--once")
	file4, file6 := saved(t, fromFile)
	flags4, flags6 := saved(t, fromFlags)
	if diff := cmp.Diff(flags4+flags6, file4+file6); diff != "" {
		t.Errorf("the config file programmed other rules than the flags (-flags +file):\n%s", diff)
	}
	// What the file set, not the defaults, is in the rules.
	for _, want := range []string{"--mark 0x1000/0x1000", `-d 10.96.10.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j PK-MARK-MASQ`} {
		if !strings.Contains(file4, want) {
			t.Errorf("the config file's rules lack %q:\n%s", want, file4)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// recordingHost is a machine whose every kernel interface is a fake, so
// that a test can tell whether anything reached a ruleset.
type recordingHost struct {
	runners map[v1.IPFamily]*xtables.FakeRunner
	nft     map[v1.IPFamily]*knftables.Fake
	ipvs    map[v1.IPFamily]*ipvstest.Kernel
	routing []*userspace.FakePolicyRouting
}

func newRecordingHost() *recordingHost {
	return &recordingHost{
		runners: bothFamilies(),
		nft: map[v1.IPFamily]*knftables.Fake{
			v1.IPv4Protocol: knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable),
			v1.IPv6Protocol: knftables.NewFake(knftables.IPv6Family, nftables.DefaultTable),
		},
		ipvs: map[v1.IPFamily]*ipvstest.Kernel{v1.IPv4Protocol: ipvstest.NewKernel(), v1.IPv6Protocol: ipvstest.NewKernel()},
	}
}

func (r *recordingHost) host() host {
	h := fakeHost(r.runners)
	h.nft = func(f v1.IPFamily) (knftables.Interface, error) { return r.nft[f], nil }
	h.ipvs = func(f v1.IPFamily) (ipvs.Kernel, error) { return r.ipvs[f], nil }
	h.probeIPVS = func() error { return nil }
	h.routing = func() (userspace.PolicyRouting, error) {
		p := &userspace.FakePolicyRouting{}
		r.routing = append(r.routing, p)
		return p, nil
	}
	return h
}

// programmed says what reached a ruleset, "" when nothing did.
func (r *recordingHost) programmed() string {
	var b strings.Builder
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		for _, in := range r.runners[f].Restores() {
			fmt.Fprintf(&b, "%s iptables-restore:\n%s", f, in)
		}
		if d := r.nft[f].Dump(); d != "" {
			fmt.Fprintf(&b, "%s nft:\n%s", f, d)
		}
		if d := r.ipvs[f].IPVS.Dump(); d != "" {
			fmt.Fprintf(&b, "%s ipvs:\n%s", f, d)
		}
		// Another mode's start reads the IPVS objects (to remove what
		// mode ipvs left), which reaches no ruleset; making one does.
		if _, err := r.ipvs[f].Netlink.LinkByName(ipvs.DefaultLink); err == nil {
			fmt.Fprintf(&b, "%s: link %s made\n", f, ipvs.DefaultLink)
		}
		if sets := r.ipvs[f].Netlink.Sets(); len(sets) > 0 {
			fmt.Fprintf(&b, "%s ipsets: %v\n", f, sets)
		}
	}
	for _, p := range r.routing {
		if routes := p.Installed(); len(routes) > 0 {
			fmt.Fprintf(&b, "policy routes: %v\n", routes)
		}
	}
	return b.String()
}

// badInterfaceNames are names kube-proxy would write into its rules, and
// the agent refuses at start-up.
var badInterfaceNames = []string{
	"br0\n-A INPUT -j ACCEPT\n#", // adds a rule to an iptables-restore input
	"br 0",
	`br0"`,
	"br0'",
	"br0\n",
	"abcdefghijklmnop", // 16 bytes
}

// manifestsDir is a folder of the demo's DNS service, a source of the
// agent's own (not the demo, which a run without one only prints).
func manifestsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"dns.yaml", "node.yaml"} {
		data, err := demoFS.ReadFile("demo/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startOnHost runs the agent on h until it exits, which it does at once
// when the command line is refused; the deadline only bounds a run that
// was not (mode userspace, which has no --once).
func startOnHost(t *testing.T, h host, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code = runOn(ctx, h, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestBadInterfaceNames: in every mode, and in a dry run, a bridge or
// interface prefix no rule may hold is a start-up error naming the flag
// (or the file's field), and nothing reaches a ruleset. Mode ipvs used to
// write it into its iptables-restore input, and modes iptables and
// nftables to leave the detector out with a -v 1 line.
func TestBadInterfaceNames(t *testing.T) {
	dir := manifestsDir(t)
	quiet := []string{"--manifests", dir, "--metrics-bind-address", "", "--healthz-bind-address", "", "--hostname-override", "demo-node"}
	type run struct {
		mode string
		args []string
	}
	var runs []run
	for _, mode := range builtModes {
		if mode != "userspace" {
			runs = append(runs, run{mode, []string{"--once"}}, run{mode + " dry run", []string{"--once", "--dry-run"}})
		} else {
			runs = append(runs, run{mode, nil})
		}
	}
	for _, r := range runs {
		mode, _, _ := strings.Cut(r.mode, " ")
		base := append(append([]string{"--proxy-mode", mode}, quiet...), r.args...)
		t.Run(r.mode, func(t *testing.T) {
			if mode != "userspace" {
				// The same start-up with a good name programs the fakes:
				// the host would see a bad one reach a ruleset.
				rh := newRecordingHost()
				args := append(slices.Clone(base), "--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "cbr0")
				if code, _, errOut := startOnHost(t, rh.host(), args...); code != exitOK {
					t.Fatalf("with cbr0: exit %d, stderr:\n%s", code, errOut)
				}
				if !strings.Contains(r.mode, "dry run") && !strings.Contains(rh.programmed(), "cbr0") {
					t.Fatalf("with cbr0, the rules do not name it:\n%s", rh.programmed())
				}
			}
			for _, name := range badInterfaceNames {
				for _, flag := range []struct{ mode, name string }{{"BridgeInterface", "pod-bridge-interface"}, {"InterfaceNamePrefix", "pod-interface-name-prefix"}} {
					t.Run(fmt.Sprintf("--%s %q", flag.name, name), func(t *testing.T) {
						rh := newRecordingHost()
						args := append(slices.Clone(base), "--detect-local-mode", flag.mode, "--"+flag.name, name)
						code, out, errOut := startOnHost(t, rh.host(), args...)
						if want := fmt.Sprintf("--%s: Invalid value: %q: ", flag.name, name); code != exitUsage || !strings.Contains(errOut, want) {
							t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, exitUsage, want)
						}
						if out != "" {
							t.Errorf("stdout = %q, want nothing", out)
						}
						if p := rh.programmed(); p != "" {
							t.Errorf("reached a ruleset:\n%s", p)
						}
					})
				}
			}
			t.Run("--config", func(t *testing.T) {
				file := filepath.Join(t.TempDir(), "kube-proxy.yaml")
				cfg := fmt.Sprintf("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: %s\n"+
					"metricsBindAddress: \"\"\nhealthzBindAddress: \"\"\ndetectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: %q\n",
					mode, badInterfaceNames[0])
				if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
				rh := newRecordingHost()
				args := append([]string{"--config", file, "--manifests", dir}, r.args...)
				code, _, errOut := startOnHost(t, rh.host(), args...)
				if want := fmt.Sprintf("detectLocal.bridgeInterface: Invalid value: %q: ", badInterfaceNames[0]); code != exitUsage || !strings.Contains(errOut, want) {
					t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, exitUsage, want)
				}
				if p := rh.programmed(); p != "" {
					t.Errorf("reached a ruleset:\n%s", p)
				}
			})
		})
	}
}

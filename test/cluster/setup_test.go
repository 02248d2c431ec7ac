package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	built     struct {
		bins  Binaries
		agent string
		err   error
	}
	agentDir string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "proxykit-cluster-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaries skips t unless it can run the lab, then returns the control
// plane's and the agent's binaries, building them once per test binary.
func binaries(t *testing.T) (Binaries, string) {
	t.Helper()
	Require(t, "iptables", "iptables-save", "sysctl")
	buildOnce.Do(func() {
		ctx := context.Background()
		start := time.Now()
		built.bins, built.err = BuildControlPlane(ctx, os.Stderr)
		if built.err == nil {
			built.agent, built.err = BuildAgent(ctx, agentDir, os.Stderr)
		}
		t.Logf("binaries ready in %v", time.Since(start).Round(time.Millisecond))
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bins, built.agent
}

// TestBuild builds (or finds cached) the control plane, kube-proxy and the
// agent.
// .ci/run runs it alone in the background while the library's tests run,
// so that a fresh machine's cold build overlaps them.
func TestBuild(t *testing.T) {
	bins, agent := binaries(t)
	for _, p := range []string{bins.Etcd, bins.APIServer, bins.KubeProxy, agent} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}

// eventually calls check until it returns nil, failing t with its last
// error after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// backends connects n times from p to addr and returns the sorted set of
// pods that answered, or the error of a failed connection.
func backends(p *Pod, addr string, n int) ([]string, error) {
	seen := map[string]bool{}
	for range n {
		name, err := p.Get(addr, 500*time.Millisecond)
		if err != nil {
			return nil, err
		}
		seen[name] = true
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// podNames are the sorted names of pods.
func podNames(pods ...*Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

// servedBy checks that connections from p to addr reach exactly want
// (sampling enough connections to see each with high probability).
func servedBy(p *Pod, addr string, want ...*Pod) error {
	got, err := backends(p, addr, 8*len(want))
	if err != nil {
		return err
	}
	if w := podNames(want...); !slices.Equal(got, w) {
		return fmt.Errorf("from %s to %s: served by %v, want %v", p.Name, addr, got, w)
	}
	return nil
}

// unreachable checks that connections from p to addr fail.
func unreachable(p *Pod, addr string) error {
	if name, err := p.Get(addr, 300*time.Millisecond); err == nil {
		return fmt.Errorf("from %s to %s: served by %s, want no answer", p.Name, addr, name)
	}
	return nil
}

// rulesMention checks that node n's iptables rules mention s (or, with
// absent, do not).
func rulesMention(n *Node, s string, absent bool) error {
	out, err := n.NS.Run("iptables-save", "-t", "nat")
	if err != nil {
		return err
	}
	if strings.Contains(out, s) == absent {
		return fmt.Errorf("%s: rules mention %q: %v, want %v", n.Name, s, !absent, !absent)
	}
	return nil
}

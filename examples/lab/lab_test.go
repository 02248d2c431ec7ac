package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// TestMain runs the lab's children (pod servers, requests) when the lab
// under test starts this binary inside a namespace.
func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		os.Exit(child(args))
	}
	code := m.Run()
	if agentPath != "" {
		os.RemoveAll(filepath.Dir(agentPath))
	}
	os.Exit(code)
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// buildAgent builds the node agent once for every test.
func buildAgent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pklab-test-agent-")
		if err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "nodeagent")
		out, err := exec.Command("go", "-C", filepath.Join("..", "nodeagent"), "build", "-o", agentPath, ".").CombinedOutput()
		if err != nil {
			agentErr = err
			t.Logf("%s", out)
		}
	})
	if agentErr != nil {
		t.Fatalf("building the node agent: %v", agentErr)
	}
	return agentPath
}

func testPrefix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "pkl" + hex.EncodeToString(b[:])
}

// TestLab builds the lab from the bundled manifests in each mode, checks
// that traffic to the cluster IP spreads over every pod and leaves a pod
// once it is removed, and that nothing is left behind.
func TestLab(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "nft")
	agent := buildAgent(t)
	for _, mode := range []string{"iptables", "nftables", "userspace"} {
		t.Run(mode, func(t *testing.T) {
			prefix := testPrefix()
			l, err := Up(t.Context(), Config{Manifests: "manifests", Mode: mode, Agent: agent, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			down := sync.OnceValue(l.Down)
			t.Cleanup(func() { _ = down() })

			seen := answers(t, l, 30)
			for _, p := range l.Pods {
				if seen[p.Name] == 0 {
					t.Errorf("30 requests never reached %s: %v", p.Name, seen)
				}
			}
			if err := l.Remove("web-a"); err != nil {
				t.Fatal(err)
			}
			// The agent re-reads the manifests on its own time: look a
			// bounded number of times for 30 answers without web-a.
			for range 100 {
				if seen = answers(t, l, 30); seen["web-a"] == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if seen["web-a"] != 0 || seen["web-b"] == 0 || seen["web-c"] == 0 {
				t.Errorf("after removing web-a, 30 requests reached %v, want web-b and web-c only", seen)
			}

			if err := down(); err != nil {
				t.Errorf("Down: %v", err)
			}
			if left, err := Namespaces(prefix); err != nil || len(left) > 0 {
				t.Errorf("namespaces left behind: %v (%v)", left, err)
			}
		})
	}
}

// answers counts which pods answer n requests from the client; a failed
// request fails t.
func answers(t *testing.T, l *Lab, n int) map[string]int {
	t.Helper()
	got, err := l.Fetch(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, a := range got {
		if strings.HasPrefix(a, "error") {
			t.Fatalf("a request failed: %s", a)
		}
		seen[strings.Fields(a)[0]]++
	}
	return seen
}

// TestRunInterrupted runs the command as a person would, types commands,
// and interrupts it (what Ctrl-C does): the lab is removed.
func TestRunInterrupted(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save")
	agent := buildAgent(t)
	prefix, stateDir := testPrefix(), t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	in, typing := io.Pipe()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--agent", agent, "--prefix", prefix, "--manifests", "manifests", "--state-dir", stateDir}, in, out)
	}()
	t.Cleanup(func() {
		for _, ns := range mustNamespaces(t, prefix) {
			_ = deleteNS(ns)
		}
	})

	// The answers of three pods, and /proxyMode's.
	wantAll := []string{"× web-a", "× web-b", "× web-c", "lab> iptables\n"}
	typed := false
	for range 600 {
		s := out.String()
		if !typed && strings.Contains(s, "lab> ") {
			if _, err := io.WriteString(typing, "curl 30\nmode\n"); err != nil {
				t.Fatal(err)
			}
			typed = true
		}
		if strings.Contains(s, "× web-a") && strings.Count(s, "lab> ") >= 3 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	typing.Close()
	s := out.String()
	for _, w := range append(wantAll, "lab removed: no namespace left") {
		if !strings.Contains(s, w) {
			t.Errorf("the output lacks %q:\n%s", w, s)
		}
	}
	if left := mustNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

func mustNamespaces(t *testing.T, prefix string) []string {
	t.Helper()
	left, err := Namespaces(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDownRemovesOnlyWhatTheLabMade: --down after a lab that was never
// taken down (its process killed) kills the processes it started and
// deletes the namespaces it made, and nothing else: a namespace of the
// same prefix it did not make, and a process someone started inside the
// lab's own namespace, are left and named.
func TestDownRemovesOnlyWhatTheLabMade(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save")
	agent := buildAgent(t)
	prefix, stateDir := testPrefix(), t.TempDir()
	foreign := prefix + "-foreign"
	if out, err := exec.Command("ip", "netns", "add", foreign).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = deleteNS(foreign) })
	sleepIn := func(ns string) *exec.Cmd {
		c := exec.Command("ip", "netns", "exec", ns, "sleep", "300")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	theirs := sleepIn(foreign)

	l, err := Up(t.Context(), Config{Manifests: "manifests", Mode: "iptables", Agent: agent, Prefix: prefix, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down() }) // reaps the processes --down killed
	guest := sleepIn(l.Node)

	var out bytes.Buffer
	if err := run(t.Context(), []string{"--down", "--prefix", prefix, "--state-dir", stateDir}, nil, &out); err != nil {
		t.Fatalf("--down: %v\n%s", err, out.String())
	}
	if left := mustNamespaces(t, prefix); len(left) != 1 || left[0] != foreign {
		t.Errorf("namespaces left: %v, want only %s, which the lab did not make", left, foreign)
	}
	for _, c := range []*exec.Cmd{theirs, guest} {
		if !running(c.Process.Pid) {
			t.Errorf("process %d, not the lab's, was killed", c.Process.Pid)
		}
	}
	done := make(chan error, 1)
	go func() { done <- l.agent.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("the lab's agent (process %d) still runs after --down", l.agent.Process.Pid)
	}
	if want := fmt.Sprintf("left running: process %d in namespace %s, not started by the lab", guest.Process.Pid, l.Node); !strings.Contains(out.String(), want) {
		t.Errorf("--down did not say %q:\n%s", want, out.String())
	}
	if _, err := os.Stat(statePath(stateDir, prefix)); !os.IsNotExist(err) {
		t.Errorf("the lab's record is still there (%v)", err)
	}

	// With nothing recorded, --down removes nothing.
	out.Reset()
	if err := run(t.Context(), []string{"--down", "--prefix", prefix, "--state-dir", stateDir}, nil, &out); err != nil {
		t.Fatal(err)
	}
	if want := "left alone, not made by a lab: namespaces " + foreign; !strings.Contains(out.String(), want) {
		t.Errorf("a second --down did not say %q:\n%s", want, out.String())
	}
	if left := mustNamespaces(t, prefix); len(left) != 1 {
		t.Errorf("a second --down removed %s: left %v", foreign, left)
	}
}

// running reports whether process pid runs: it exists and is not a
// zombie (a child killed but not yet waited for).
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(data), ") ")
	return after != "" && after[0] != 'Z'
}

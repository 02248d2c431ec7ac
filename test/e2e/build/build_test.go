package build

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/modfile"
)

func TestDefaultCacheDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	got, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "proxykit", "e2e", "kubernetes-v1.37.2-etcd-v3.7.0-coredns-v1.15.0")
	if got != want {
		t.Errorf("DefaultCacheDir() = %q, want %q", got, want)
	}
}

// The cache key must name the versions go.mod really builds, and every
// go-build target must be a tool line, or go mod tidy drops what it needs.
func TestPlanMatchesGoMod(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(ModuleDir(), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, r := range mod.Require {
		versions[r.Mod.Path] = r.Mod.Version
	}
	got := map[string]string{
		"k8s.io/kubernetes":         versions["k8s.io/kubernetes"],
		"go.etcd.io/etcd/server/v3": versions["go.etcd.io/etcd/server/v3"],
	}
	want := map[string]string{"k8s.io/kubernetes": KubernetesVersion, "go.etcd.io/etcd/server/v3": EtcdVersion}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("go.mod versions (-constants +go.mod):\n%s", diff)
	}
	tools := map[string]bool{}
	for _, tl := range mod.Tool {
		tools[tl.Path] = true
	}
	_, targets := plan(t.TempDir(), t.TempDir())
	for _, tg := range targets {
		if tg.how == tool && !tools[tg.pkg] {
			t.Errorf("%s is built as a tool but go.mod has no tool line for it", tg.pkg)
		}
	}
}

func TestMissing(t *testing.T) {
	cache := t.TempDir()
	_, targets := plan(cache, filepath.Join(cache, "run", "x"))
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kube-proxy", "ginkgo", "agnhost", "regression-issue-74839"} {
		if err := os.WriteFile(filepath.Join(cache, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, tg := range missing(targets) {
		got = append(got, filepath.Base(tg.out))
	}
	// Neither the agent nor pause: they are built on every call.
	want := []string{"kubelet", "e2e.test", "coredns"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
}

func TestGoBuildName(t *testing.T) {
	for pkg, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":             "server",
		"k8s.io/kubernetes/cmd/kubelet":         "kubelet",
		"github.com/onsi/ginkgo/v2/ginkgo":      "ginkgo",
		"github.com/coredns/coredns@v1.15.0":    "coredns@v1.15.0",
		"k8s.io/kubernetes/test/images/v":       "v",
		"example.com/tool/v2beta":               "v2beta",
		"github.com/proxykit/proxykit/test/e2e": "e2e",
	} {
		if got := goBuildName(pkg); got != want {
			t.Errorf("goBuildName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

func TestRunDirPerCheckout(t *testing.T) {
	a, b := runDir("/c", "/src/one/test/e2e"), runDir("/c", "/src/two/test/e2e")
	if a == b || a != runDir("/c", "/src/one/test/e2e") || filepath.Dir(a) != "/c/run" {
		t.Errorf("runDir: %q and %q, want two stable directories under /c/run", a, b)
	}
}

func TestLockWaitsAndCancels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var log logBuffer
	if _, err := Lock(ctx, path, &log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second lock: %v, want context.DeadlineExceeded", err)
	}
	if log == "" {
		t.Error("the waiting lock logged nothing")
	}
}

type logBuffer string

func (l *logBuffer) Write(p []byte) (int, error) { *l += logBuffer(p); return len(p), nil }

// The one real build: the pause program, through the same code path as
// every fresh target. It must be static (it runs in an image with no
// libc) and stop on SIGTERM.
func TestBuildPause(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	cache := t.TempDir()
	_, targets := plan(cache, filepath.Join(cache, "run"))
	var pause target
	for _, tg := range targets {
		if tg.pkg == PausePackage {
			pause = tg
		}
	}
	if err := build(context.Background(), pause, testLog{t}); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(pause.out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an interpreter: not static", pause.out)
		}
	}
	f.Close()

	// Go's runtime catches SIGTERM before main runs, and nothing outside
	// shows when signal.Notify has: a signal that comes too early kills
	// the program. So: signal after growing delays until one run exits 0,
	// which a program without the handler never does.
	for _, delay := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, time.Second, 3 * time.Second} {
		err := runAndTerminate(pause.out, delay)
		if err == nil {
			return
		}
		t.Logf("SIGTERM after %s: %v", delay, err)
	}
	t.Error("pause never exited 0 on SIGTERM")
}

// runAndTerminate starts bin, sends it SIGTERM after delay and returns
// how it ended.
func runAndTerminate(bin string, delay time.Duration) error {
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(delay)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running 10s after SIGTERM")
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) { l.t.Logf("%s", p); return len(p), nil }

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"build-1/server", "install-2/coredns", "kubelet.tmp", "run/abc/nodeagent.tmp", "kubelet", "run/abc/nodeagent", "lock"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStale(dir)
	var left []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			left = append(left, rel)
		}
		return nil
	})
	if diff := cmp.Diff([]string{"kubelet", "lock", "run/abc/nodeagent"}, left); diff != "" {
		t.Errorf("left after removeStale (-want +got):\n%s", diff)
	}
}

func TestModuleDir(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(ModuleDir(), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if got := modfile.ModulePath(data); got != modulePath {
		t.Errorf("ModuleDir()'s go.mod is module %q, want %q", got, modulePath)
	}
}

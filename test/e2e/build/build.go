package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
)

// The versions built. go.mod pins the first two (its tool lines and the
// replaced staging modules); CoreDNS is installed at its own version with
// its own go.mod, because its dependency graph would drag Kubernetes'
// forward.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
	CoreDNSVersion    = "v1.15.0"
)

// Binaries are the paths of every executable the fixture runs.
type Binaries struct {
	// Kubernetes v1.37.2 and etcd v3.7.0, from go.mod's tool lines.
	Etcd, APIServer, ControllerManager, Scheduler, Kubelet, Kubectl, KubeProxy string
	// E2E is k8s.io/kubernetes/test/e2e compiled as a test binary
	// (e2e.test); Ginkgo is the CLI that runs it in parallel.
	E2E, Ginkgo string
	// Agnhost is the test images' multi-tool; Pause is the program of the
	// pause image (images/pause); RegressionIssue74839 is the server of the
	// Conntrack test that injects an out-of-window packet.
	Agnhost, Pause, RegressionIssue74839 string
	// CoreDNS is github.com/coredns/coredns at CoreDNSVersion.
	CoreDNS string
	// Agent is proxykit's node agent, built from this checkout.
	Agent string
}

// Options tune Build.
type Options struct {
	// CacheDir holds the versioned binaries. Zero: DefaultCacheDir().
	CacheDir string
	// Log receives the go command's output and a line per binary built.
	// Zero: discarded.
	Log io.Writer
}

// VersionKey names the cache directory: every version a cached binary
// depends on, so that a bump builds afresh and nothing else does.
func VersionKey() string {
	return "kubernetes-" + KubernetesVersion + "-etcd-" + EtcdVersion + "-coredns-" + CoreDNSVersion
}

// DefaultCacheDir is <os.UserCacheDir>/proxykit/e2e/<VersionKey>.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("e2e binary cache: %w", err)
	}
	return filepath.Join(dir, "proxykit", "e2e", VersionKey()), nil
}

// modulePath is the test/e2e module's path.
const modulePath = "github.com/proxykit/proxykit/test/e2e"

// ModuleDir is the root of the test/e2e module, where the go command
// resolves the pinned versions: the source directory this package was
// compiled from, or, in a binary built with -trimpath, which records no
// directory, the module found from the working directory up.
func ModuleDir() string {
	_, file, _, _ := runtime.Caller(0)
	if filepath.IsAbs(file) {
		return filepath.Dir(filepath.Dir(file))
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		for _, cand := range []string{dir, filepath.Join(dir, "test", "e2e")} {
			if data, err := os.ReadFile(filepath.Join(cand, "go.mod")); err == nil && modfile.ModulePath(data) == modulePath {
				return cand
			}
		}
		if dir == filepath.Dir(dir) {
			return wd
		}
	}
}

// Build returns every binary of Binaries: the versioned ones from the
// cache, building those missing, and the agent and pause program built
// afresh from this checkout on every call (into a run area of the cache
// keyed by the checkout's path, so two checkouts never swap binaries
// under each other's clusters). A cold build takes about half an hour on
// two cores; a warm one, the agent's link. Run the caller under nice to
// leave the machine usable: the go command inherits it.
func Build(ctx context.Context, opts Options) (Binaries, error) {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	dir := opts.CacheDir
	if dir == "" {
		var err error
		if dir, err = DefaultCacheDir(); err != nil {
			return Binaries{}, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("e2e binary cache: %w", err)
	}
	unlock, err := Lock(ctx, filepath.Join(dir, "lock"), log)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	removeStale(dir)

	bins, targets := plan(dir, runDir(dir, ModuleDir()))
	if err := buildPinned(ctx, dir, missing(targets), log); err != nil {
		return Binaries{}, err
	}
	for _, t := range targets {
		if t.how != fresh {
			continue
		}
		if err := build(ctx, t, log); err != nil {
			return Binaries{}, err
		}
	}
	return bins, nil
}

// runDir is where the binaries built from the checkout go: one directory
// per checkout path.
func runDir(cache, moduleDir string) string {
	sum := sha256.Sum256([]byte(moduleDir))
	return filepath.Join(cache, "run", hex.EncodeToString(sum[:6]))
}

// Lock takes an exclusive flock on path (creating it), so that two runs
// never build the same thing twice, and returns its release. It polls, so
// that ctx can cancel the wait, and says once on log that it waits.
func Lock(ctx context.Context, path string, log io.Writer) (func(), error) {
	if log == nil {
		log = io.Discard
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !waiting {
			fmt.Fprintf(log, "waiting for another run to release %s\n", path)
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// removeStale removes what a killed build left: temporary directories and
// binaries never renamed into place. Only a lock holder may: another
// run's build writes them.
func removeStale(dir string) {
	for _, pattern := range []string{"build-*", "install-*", "*.tmp", "run/*/*.tmp"} {
		matches, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range matches {
			_ = os.RemoveAll(m)
		}
	}
}

// buildPinned builds the missing versioned binaries. The go-build ones go
// through one go command, so that packages they share compile once and
// the links run in parallel; e2e.test follows and finds most of its
// packages compiled.
func buildPinned(ctx context.Context, dir string, missing []target, log io.Writer) error {
	var tools []target
	for _, t := range missing {
		if t.how == tool {
			tools = append(tools, t)
		}
	}
	if len(tools) > 0 {
		if err := buildTools(ctx, dir, tools, log); err != nil {
			return err
		}
	}
	for _, t := range missing {
		if t.how == tool {
			continue
		}
		if err := build(ctx, t, log); err != nil {
			return err
		}
	}
	return nil
}

// buildTools builds several main packages of the module with one go
// build -o DIR/, then moves each binary into place.
func buildTools(ctx context.Context, dir string, tools []target, log io.Writer) error {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return fmt.Errorf("e2e binary cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-trimpath", "-ldflags", versionFlags, "-o", tmp + "/"}
	var names []string
	for _, t := range tools {
		args = append(args, t.pkg)
		names = append(names, filepath.Base(t.out))
	}
	start := time.Now()
	fmt.Fprintf(log, "build: %s\n", strings.Join(names, ", "))
	runErr := goCommand(ctx, ModuleDir(), nil, log, args...)
	// A failed package leaves the others built; keep them.
	for _, t := range tools {
		if err := os.Rename(filepath.Join(tmp, goBuildName(t.pkg)), t.out); err != nil && runErr == nil {
			return fmt.Errorf("go build %s: %w", t.pkg, err)
		}
	}
	if runErr != nil {
		return fmt.Errorf("go build %s: %w", strings.Join(names, " "), runErr)
	}
	fmt.Fprintf(log, "build: %s done in %s\n", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

// goBuildName is the file name go build -o DIR/ gives a main package: its
// last path element, or the one before a major-version suffix.
func goBuildName(pkg string) string {
	elems := strings.Split(pkg, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		return elems[len(elems)-2]
	}
	return last
}

// build makes one target through a temporary name, so that an interrupted
// build never leaves a partial binary in the cache.
func build(ctx context.Context, t target, log io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(t.out), 0o755); err != nil {
		return fmt.Errorf("e2e binary cache: %w", err)
	}
	tmp := t.out + ".tmp"
	start := time.Now()
	fmt.Fprintf(log, "build: %s\n", filepath.Base(t.out))
	var err error
	switch t.how {
	case testBinary:
		err = goCommand(ctx, ModuleDir(), nil, log,
			"test", "-c", "-vet=off", "-trimpath", "-ldflags", versionFlags, "-o", tmp, t.pkg)
	case install:
		err = goInstall(ctx, t, tmp, log)
	default:
		// The agent and pause link no Kubernetes version to stamp.
		err = goCommand(ctx, t.dir, nil, log, "build", "-trimpath", "-ldflags", "-s -w", "-o", tmp, t.pkg)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("build %s (%s): %w", filepath.Base(t.out), t.pkg, err)
	}
	if err := os.Rename(tmp, t.out); err != nil {
		return fmt.Errorf("e2e binary cache: %w", err)
	}
	fmt.Fprintf(log, "build: %s done in %s\n", filepath.Base(t.out), time.Since(start).Round(time.Second))
	return nil
}

// goInstall runs go install pkg@version with GOBIN in a temporary
// directory: the module's own go.mod and go.sum pin its dependencies,
// whatever this module requires.
func goInstall(ctx context.Context, t target, tmp string, log io.Writer) error {
	gobin, err := os.MkdirTemp(filepath.Dir(t.out), "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gobin)
	if err := goCommand(ctx, t.dir, []string{"GOBIN=" + gobin}, log,
		"install", "-trimpath", "-ldflags", "-s -w", t.pkg); err != nil {
		return err
	}
	name, _, _ := strings.Cut(goBuildName(t.pkg), "@")
	return os.Rename(filepath.Join(gobin, name), tmp)
}

// versionFlags stamp the version every component reports: unset, kubelet
// and kubectl report v0.0.0 and the e2e framework's version checks fail.
const versionFlags = "-s -w -X k8s.io/component-base/version.gitVersion=" + KubernetesVersion +
	" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

// goCommand runs the go command in dir with static binaries, the
// caller's environment and env added.
func goCommand(ctx context.Context, dir string, env []string, log io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
}

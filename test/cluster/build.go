package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
)

// The versions built. KubernetesVersion's staging modules are replaced by
// their v0.37.2 releases in go.mod; EtcdVersion is the one
// k8s.io/kubernetes pins (a newer one drags the apiserver's dependencies
// forward).
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
)

// Binaries are the paths of the control plane's executables, and of
// upstream kube-proxy, which the replacement test runs beside the agent.
type Binaries struct {
	Etcd, APIServer, KubeProxy string
}

// CacheDir is where BuildControlPlane keeps the binaries: under the user's
// cache directory, keyed by the versions, so that a version bump builds
// afresh and nothing else does.
func CacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("control-plane cache: %w", err)
	}
	return filepath.Join(dir, "proxykit", "cluster", "kubernetes-"+KubernetesVersion+"-etcd-"+EtcdVersion), nil
}

// moduleDir is this module's root, where go build resolves the pinned
// versions.
func moduleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// BuildControlPlane returns the cached etcd, kube-apiserver and kube-proxy, building
// what is missing with go build (CGO_ENABLED=0, through the machine's Go
// build cache) and writing the build's output to log. A cold build takes
// 13–27 minutes on two cores; a cached one returns at once.
func BuildControlPlane(ctx context.Context, log io.Writer) (Binaries, error) {
	dir, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("control-plane cache: %w", err)
	}
	// Two test processes building at once would each pay the full cost.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, fmt.Errorf("control-plane cache: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, fmt.Errorf("control-plane cache lock: %w", err)
	}
	b := Binaries{
		Etcd:      filepath.Join(dir, "etcd"),
		APIServer: filepath.Join(dir, "kube-apiserver"),
		KubeProxy: filepath.Join(dir, "kube-proxy"),
	}
	for _, p := range []struct{ out, pkg string }{
		{b.Etcd, "go.etcd.io/etcd/server/v3"},
		{b.APIServer, "k8s.io/kubernetes/cmd/kube-apiserver"},
		{b.KubeProxy, "k8s.io/kubernetes/cmd/kube-proxy"},
	} {
		if _, err := os.Stat(p.out); err == nil {
			continue
		}
		if err := goBuild(ctx, moduleDir(), p.out, p.pkg, log); err != nil {
			return Binaries{}, err
		}
	}
	return b, nil
}

// versionFlags stamp the apiserver's version, which clients read; unset it
// reports v0.0.0.
const versionFlags = "-s -w -X k8s.io/component-base/version.gitVersion=" + KubernetesVersion +
	" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

// goBuild builds pkg into out through a temporary name, so that an
// interrupted build never leaves a partial binary in the cache.
func goBuild(ctx context.Context, dir, out, pkg string, log io.Writer) error {
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", versionFlags, "-o", tmp, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return os.Rename(tmp, out)
}

// BuildAgent builds the node agent of examples/nodeagent into dir and
// returns its path.
func BuildAgent(ctx context.Context, dir string, log io.Writer) (string, error) {
	out := filepath.Join(dir, "nodeagent")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(moduleDir(), "..", "..", "examples", "nodeagent")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build examples/nodeagent: %w", err)
	}
	return out, nil
}

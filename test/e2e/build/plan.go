package build

import (
	"os"
	"path/filepath"
)

// method is how a target is built.
type method int

const (
	// tool: a main package of this module's graph, go build.
	tool method = iota
	// testBinary: a package's tests, go test -c.
	testBinary
	// install: go install pkg@version, outside this module's graph.
	install
	// fresh: built from this checkout on every call.
	fresh
)

// target is one binary: where it goes, what builds it.
type target struct {
	out string // path of the binary
	pkg string // import path, or path@version for install
	dir string // where the go command runs (fresh and install targets)
	how method
}

// PausePackage is the pause program's import path.
const PausePackage = "github.com/proxykit/proxykit/test/e2e/images/pause"

// plan lays out Binaries under cache (versioned) and run (from the
// checkout) and lists how each is made.
func plan(cache, run string) (Binaries, []target) {
	in := func(name string) string { return filepath.Join(cache, name) }
	b := Binaries{
		Etcd:                 in("etcd"),
		APIServer:            in("kube-apiserver"),
		ControllerManager:    in("kube-controller-manager"),
		Scheduler:            in("kube-scheduler"),
		Kubelet:              in("kubelet"),
		Kubectl:              in("kubectl"),
		KubeProxy:            in("kube-proxy"),
		E2E:                  in("e2e.test"),
		Ginkgo:               in("ginkgo"),
		Agnhost:              in("agnhost"),
		RegressionIssue74839: in("regression-issue-74839"),
		CoreDNS:              in("coredns"),
		Pause:                filepath.Join(run, "pause"),
		Agent:                filepath.Join(run, "nodeagent"),
	}
	mod := ModuleDir()
	return b, []target{
		{out: b.Etcd, pkg: "go.etcd.io/etcd/server/v3"},
		{out: b.APIServer, pkg: "k8s.io/kubernetes/cmd/kube-apiserver"},
		{out: b.ControllerManager, pkg: "k8s.io/kubernetes/cmd/kube-controller-manager"},
		{out: b.Scheduler, pkg: "k8s.io/kubernetes/cmd/kube-scheduler"},
		{out: b.Kubelet, pkg: "k8s.io/kubernetes/cmd/kubelet"},
		{out: b.Kubectl, pkg: "k8s.io/kubernetes/cmd/kubectl"},
		{out: b.KubeProxy, pkg: "k8s.io/kubernetes/cmd/kube-proxy"},
		{out: b.Ginkgo, pkg: "github.com/onsi/ginkgo/v2/ginkgo"},
		{out: b.Agnhost, pkg: "k8s.io/kubernetes/test/images/agnhost"},
		{out: b.RegressionIssue74839, pkg: "k8s.io/kubernetes/test/images/regression-issue-74839"},
		{out: b.E2E, pkg: "k8s.io/kubernetes/test/e2e", how: testBinary},
		{out: b.CoreDNS, pkg: "github.com/coredns/coredns@" + CoreDNSVersion, dir: mod, how: install},
		{out: b.Pause, pkg: PausePackage, dir: mod, how: fresh},
		{out: b.Agent, pkg: ".", dir: filepath.Join(mod, "..", "..", "examples", "nodeagent"), how: fresh},
	}
}

// missing lists the versioned targets whose binary is not in the cache.
func missing(targets []target) []target {
	var out []target
	for _, t := range targets {
		if t.how == fresh {
			continue
		}
		if _, err := os.Stat(t.out); err != nil {
			out = append(out, t)
		}
	}
	return out
}

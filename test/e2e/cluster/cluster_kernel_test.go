package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/test/e2e/build"
	"github.com/proxykit/proxykit/test/e2e/images"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Environment of the kernel tests.
const (
	requireKernelEnv = "PROXYKIT_REQUIRE_KERNEL"
	// binDirsEnv lists (colon-separated) directories holding the programs
	// by their usual names (etcd, kube-apiserver, ..., nodeagent), instead
	// of the build cache; the first directory holding a program wins.
	binDirsEnv = "PROXYKIT_E2E_BINDIR"
	// imagesEnv lists (colon-separated) the image tarballs to import.
	imagesEnv = "PROXYKIT_E2E_IMAGES"
	// nodesEnv is how many nodes TestClusterUp brings up (default 1).
	nodesEnv = "PROXYKIT_E2E_NODES"
	// workDirEnv keeps the cluster's files and logs in a directory of its
	// own instead of a temporary one removed after the test.
	workDirEnv = "PROXYKIT_E2E_WORKDIR"
)

// testBinaries finds the programs and images, or skips. The versioned
// programs take half an hour to build, which the e2e command does and a
// test run must not: so their absence from the build cache skips even
// under PROXYKIT_REQUIRE_KERNEL=1, which fails only the absence of root.
// With them cached, build.Build makes only the agent and pause afresh.
// PROXYKIT_E2E_BINDIR and PROXYKIT_E2E_IMAGES name programs and tarballs
// built elsewhere instead.
func testBinaries(t *testing.T) (build.Binaries, []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		msg := "the cluster test needs root (namespaces, mounts, cgroups)"
		if os.Getenv(requireKernelEnv) == "1" {
			t.Fatalf("%s (%s=1 forbids skipping)", msg, requireKernelEnv)
		}
		t.Skip(msg)
	}
	if os.Getenv(binDirsEnv) != "" {
		return binariesFromDirs(t)
	}
	cache, err := build.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns", "agnhost"} {
		if _, err := os.Stat(filepath.Join(cache, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Skipf("the cluster test needs the e2e command's build cache (%s lacks %s): go -C test/e2e run . builds it, or set %s and %s",
			cache, strings.Join(missing, ", "), binDirsEnv, imagesEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := build.Build(ctx, build.Options{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := images.Build(ctx, filepath.Join(cache, "images"), bin)
	if err != nil {
		t.Fatal(err)
	}
	return bin, imgs
}

// binariesFromDirs finds the programs in PROXYKIT_E2E_BINDIR's directories
// and the images in PROXYKIT_E2E_IMAGES, or skips.
func binariesFromDirs(t *testing.T) (build.Binaries, []string) {
	t.Helper()
	dirs := filepath.SplitList(os.Getenv(binDirsEnv))
	find := func(name string) string {
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
		}
		return ""
	}
	b := build.Binaries{
		Etcd: find("etcd"), APIServer: find("kube-apiserver"), ControllerManager: find("kube-controller-manager"),
		Scheduler: find("kube-scheduler"), Kubelet: find("kubelet"), Kubectl: find("kubectl"),
		KubeProxy: find("kube-proxy"), CoreDNS: find("coredns"), Agent: find("nodeagent"),
	}
	var missing []string
	for name, p := range map[string]string{
		"etcd": b.Etcd, "kube-apiserver": b.APIServer, "kube-controller-manager": b.ControllerManager,
		"kube-scheduler": b.Scheduler, "kubelet": b.Kubelet, "coredns": b.CoreDNS, "nodeagent": b.Agent,
	} {
		if p == "" {
			missing = append(missing, name)
		}
	}
	imgs := filepath.SplitList(os.Getenv(imagesEnv))
	if len(missing) > 0 || len(imgs) == 0 {
		t.Skipf("%s lacks %s, or %s names no image tarball", binDirsEnv, strings.Join(missing, ", "), imagesEnv)
	}
	return b, imgs
}

// TestClusterUp brings up a cluster (one node, or PROXYKIT_E2E_NODES),
// runs the node agent in iptables mode, serves agnhost pods (one per node)
// behind a ClusterIP Service, checks the Service answers from every node
// and every pod from every node, and checks Down leaves nothing.
func TestClusterUp(t *testing.T) {
	bin, images := testBinaries(t)
	nodes := 1
	if s := os.Getenv(nodesEnv); s != "" {
		var err error
		if nodes, err = strconv.Atoi(s); err != nil {
			t.Fatalf("%s=%q: %v", nodesEnv, s, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	workDir := os.Getenv(workDirEnv)
	if workDir == "" {
		workDir = t.TempDir()
	}
	mountsBefore := hostMounts(t, workDir)
	tunablesBefore := hostTunables(t)
	start := time.Now()
	c, err := Up(ctx, Config{Nodes: nodes, Bin: bin, Images: images, WorkDir: workDir, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("up in %v", time.Since(start).Round(time.Millisecond))
	if diff := cmp.Diff(tunablesBefore, hostTunables(t)); diff != "" {
		t.Errorf("the machine's kernel settings changed under the cluster (-before +after):\n%s", diff)
	}
	downed := false
	defer func() {
		if !downed {
			if err := c.Down(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}()
	if err := c.StartProxy(ctx, Proxy{Name: "proxykit", Binary: bin.Agent, Mode: "iptables"}); err != nil {
		t.Fatal(err)
	}
	checkServiceFromEveryNode(ctx, t, c)
	if err := c.StopProxy(ctx); err != nil {
		t.Error(err)
	}
	left := c.footprint(t)
	downed = true
	since := time.Now()
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	left.check(t, since)
	if after := hostMounts(t, workDir); after != mountsBefore {
		t.Errorf("host mounts changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, after)
	}
}

// footprint is what a running cluster holds that Down must release.
type footprint struct {
	cgroups    []string        // the cluster's directory in every hierarchy
	holders    []int           // PIDs of the namespace holders
	namespaces map[string]bool // their net and mnt namespaces ("net:[4026...]")
	workDir    string          // in every fixture process's command line but the holders'
}

func (c *Cluster) footprint(t *testing.T) footprint {
	t.Helper()
	f := footprint{namespaces: map[string]bool{}, workDir: c.cfg.WorkDir}
	for _, h := range c.cg.hs {
		f.cgroups = append(f.cgroups, filepath.Join(h.Mount, c.cg.base()))
	}
	holders := []*process{c.runner}
	for _, n := range c.nodes {
		holders = append(holders, n.holder)
	}
	for _, h := range holders {
		f.holders = append(f.holders, h.pid())
		for _, kind := range []string{"net", "mnt"} {
			ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", h.pid(), kind))
			if err != nil {
				t.Fatal(err)
			}
			f.namespaces[ns] = true
		}
	}
	return f
}

// check fails t if anything of f is left: a cgroup, a holder, a process
// in one of the namespaces or running a program with WorkDir in its
// command line. Zombies hold nothing (an orphan waits for the machine's
// init to reap it), and processes started after since are not the
// cluster's: the kernel reuses a dead namespace's number.
func (f footprint) check(t *testing.T, since time.Time) {
	t.Helper()
	for _, dir := range f.cgroups {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("cgroup %s left", dir)
		}
	}
	for _, pid := range f.holders {
		if st, ok := procState(pid); ok && !st.zombie {
			t.Errorf("holder %d left", pid)
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if st, ok := procState(pid); !ok || st.zombie || st.started.After(since) {
			continue
		}
		for _, kind := range []string{"net", "mnt"} {
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind)); err == nil && f.namespaces[ns] {
				t.Errorf("process %d left in the cluster's namespace %s", pid, ns)
			}
		}
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), f.workDir+"/") {
			t.Errorf("process %d left: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
}

type procStat struct {
	zombie  bool
	started time.Time
}

// procState reads a process's state and start time from /proc; false if
// it is gone.
func procState(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// The command (field 2) may hold spaces and parentheses: fields
	// count from the last ')'.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(rest) < 20 {
		return procStat{}, false
	}
	ticks, _ := strconv.ParseInt(rest[19], 10, 64) // field 22: start time after boot, in clock ticks (100 Hz on Linux)
	return procStat{zombie: rest[0] == "Z", started: bootTime().Add(time.Duration(ticks) * 10 * time.Millisecond)}, true
}

// bootTime is when the machine booted (/proc/stat's btime).
func bootTime() time.Time {
	b, _ := os.ReadFile("/proc/stat")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			sec, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(sec, 0)
		}
	}
	return time.Time{}
}

// checkServiceFromEveryNode runs one agnhost netexec pod per node behind a
// ClusterIP Service and checks, from every node, that each pod answers on
// its own IP (pod-to-pod across nodes) and that the Service answers.
func checkServiceFromEveryNode(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	cs := c.Client()
	ns := "default"
	var podIPs []string
	for i := 1; i <= c.Nodes(); i++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("netexec-%d", i), Labels: map[string]string{"app": "netexec"}},
			Spec: corev1.PodSpec{
				NodeName: NodeName(i),
				Containers: []corev1.Container{{
					Name: "netexec", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
					ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"netexec", "--http-port=8080"},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "netexec"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "netexec"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= c.Nodes(); i++ {
		name := fmt.Sprintf("netexec-%d", i)
		deadline := time.Now().Add(3 * time.Minute)
		for {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				podIPs = append(podIPs, p.Status.PodIP)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s not running: %v %+v; kubelet log:\n%s", name, err, p.Status, tail(c.logPath(NodeName(i), "kubelet"), 30))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Logf("pods running at %v; Service %s", podIPs, svc.Spec.ClusterIP)
	for i := 1; i <= c.Nodes(); i++ {
		for _, ip := range podIPs {
			curl(ctx, t, c, i, fmt.Sprintf("http://%s:8080/hostname", ip))
		}
		curl(ctx, t, c, i, fmt.Sprintf("http://%s:80/hostname", svc.Spec.ClusterIP))
	}
}

// curl fetches url from node i, retrying for a while (the proxy syncs the
// new Service in its own time).
func curl(ctx context.Context, t *testing.T, c *Cluster, i int, url string) {
	t.Helper()
	var out []byte
	var err error
	for try := 0; try < 60; try++ {
		out, err = c.NodeCommand(ctx, i, "curl", "-sS", "--max-time", "2", url).CombinedOutput()
		if err == nil {
			t.Logf("%s: %s -> %s", NodeName(i), url, strings.TrimSpace(string(out)))
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("%s: %s: %v: %s", NodeName(i), url, err, out)
}

// hostTunables are the machine's values of the kernel settings kubelet
// sets.
func hostTunables(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	for path := range kubeletTunables() {
		b, err := os.ReadFile("/proc/sys/" + path)
		if err != nil {
			t.Fatal(err)
		}
		got[path] = strings.TrimSpace(string(b))
	}
	return got
}

// hostMounts are the host's mounts the fixture could leave: over the
// directories a node mounts over, or from WorkDir. Other tests on the
// machine mount and unmount elsewhere at any time.
func hostMounts(t *testing.T, workDir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	watched := append(nodeTmpfs[:], "/etc/resolv.conf", "/var/run")
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mnt := unescapeMount(f[4])
		if strings.HasPrefix(mnt, "/run/netns/pk-") {
			// The library's kernel tests (internal/netns) name theirs so.
			continue
		}
		hit := strings.Contains(l, workDir) || strings.Contains(l, cgroupTree)
		for _, w := range watched {
			hit = hit || mnt == w || strings.HasPrefix(mnt, w+"/")
		}
		if hit {
			lines = append(lines, strings.Join(f[3:], " "))
		}
	}
	return strings.Join(lines, "\n")
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a running cluster; Down removes it.
type Cluster struct {
	cfg   Config
	cg    cgroups
	lock  *os.File // this cluster's lock, held until Down
	start time.Time

	runner   *process
	runnerNS vnetns.NsHandle
	dial     nsDialer
	nodes    []*node
	client   kubernetes.Interface

	mu     sync.Mutex
	procs  []*process // everything started, holders included, in order
	proxy  []*process // the running proxy, one per node
	proxyP Proxy
	vm     vmState
}

// node is one node of a running cluster.
type node struct {
	i       int
	name    string
	ip      netip.Addr
	holder  *process
	podCIDR netip.Prefix
}

// Up brings up the cluster cfg describes, after reclaiming what an earlier
// run left, and returns when every node is Ready and CoreDNS answers. On
// error nothing it started is left running (the logs stay in WorkDir).
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hs, err := hostHierarchies()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, start: time.Now(), runnerNS: -1}
	if err := c.claim(ctx, hs); err != nil {
		return nil, err
	}
	if err := c.up(ctx); err != nil {
		if derr := c.Down(context.WithoutCancel(ctx)); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	return c, nil
}

// claim reclaims what dead runs left and makes this cluster's cgroup
// directory, locked until Down, under the tree's lock.
func (c *Cluster) claim(ctx context.Context, hs []hierarchy) error {
	unlock, err := lockTree(ctx, hs)
	if err != nil {
		return err
	}
	defer unlock()
	if err := reclaimDead(ctx, hs, c.cfg.Log); err != nil {
		return err
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("cluster: id: %w", err)
	}
	c.cg = cgroups{hs: hs, id: "c-" + hex.EncodeToString(b[:])}
	if err := c.cg.makeDir(""); err != nil {
		return err
	}
	if c.lock, err = lockCluster(hs, c.cg.id); err != nil {
		return err
	}
	c.logf("cgroups under %s", c.cg.base())
	return nil
}

func (c *Cluster) up(ctx context.Context) error {
	if err := c.writeFiles(); err != nil {
		return err
	}
	for i := 1; i <= c.cfg.Nodes; i++ {
		if err := c.cg.makeDir(fmt.Sprintf("node-%d", i)); err != nil {
			return err
		}
	}
	if err := c.startFabric(ctx); err != nil {
		return err
	}
	for i := 1; i <= c.cfg.Nodes; i++ {
		if err := c.startNodeNS(ctx, i); err != nil {
			return err
		}
	}
	c.logf("namespaces and links of %d node(s) ready", c.cfg.Nodes)
	apiReady := make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.startControlPlane(gctx, apiReady) })
	for _, n := range c.nodes {
		g.Go(func() error { return c.startNodeRuntime(gctx, n, apiReady) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := c.wireNodes(ctx); err != nil {
		return err
	}
	if err := c.waitNodesReady(ctx); err != nil {
		return err
	}
	if err := c.waitDNS(ctx); err != nil {
		return err
	}
	if c.cfg.VM != nil {
		if err := c.startVMs(ctx); err != nil {
			return err
		}
	}
	c.logf("cluster of %d node(s) up", c.cfg.Nodes)
	return nil
}

// Kubeconfig is the administrator's kubeconfig, valid from the runner
// namespace (Command) and from every node.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.cfg.WorkDir, "admin.kubeconfig") }

// Nodes is how many nodes the cluster has.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Command returns a command that runs name with args in the runner
// namespace (outside the cluster, beside its nodes on the fabric), in the
// fixture's cgroup tree so that Reclaim finds it if the run is killed.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := nsenterArgs(c.runner.pid(), append([]string{name}, args...)...)
	return c.cg.command(ctx, procCgroup("runner", "commands"), argv[0], argv[1:]...)
}

// NodeCommand returns a command that runs name with args in node i's
// network and mount namespaces (1-based), as a process on that node.
func (c *Cluster) NodeCommand(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	n := c.nodes[i-1]
	argv := nsenterArgs(n.holder.pid(), append([]string{name}, args...)...)
	return c.cg.command(ctx, procCgroup(n.name, "commands"), argv[0], argv[1:]...)
}

// HTTPClient is an HTTP client whose connections start in the runner
// namespace.
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: c.dial.DialContext, DisableKeepAlives: true}, Timeout: 5 * time.Second}
}

// Client is a client of the API server as its administrator.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Down stops everything Up and StartProxy started and removes the
// namespaces, mounts and cgroups; it leaves only WorkDir's files.
func (c *Cluster) Down(ctx context.Context) error {
	if c.cfg.VM != nil && c.runnerNS >= 0 {
		c.saveVMLogs(ctx)
	}
	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.proxy = nil
	c.mu.Unlock()
	if c.runnerNS >= 0 {
		_ = c.runnerNS.Close()
		c.runnerNS = -1
	}
	err := reclaim(ctx, c.cg, c.cfg.Log)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return errors.Join(err, fmt.Errorf("cluster: down: waiting for %s: %w", p.name, ctx.Err()))
		}
	}
	if err == nil {
		err = c.leftovers()
	}
	if c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
	if unlock, lerr := lockTree(ctx, c.cg.hs); lerr != nil {
		err = errors.Join(err, lerr)
	} else {
		err = errors.Join(err, removeTreeIfEmpty(c.cg.hs))
		unlock()
	}
	c.logf("down")
	return err
}

// leftovers names what Down should have removed and did not: the
// cluster's cgroups (its holders, whose namespaces live as long as they
// do, were in them).
func (c *Cluster) leftovers() error {
	var errs []error
	for _, h := range c.cg.hs {
		dir := filepath.Join(h.Mount, c.cg.base())
		if _, err := os.Stat(dir); err == nil {
			errs = append(errs, fmt.Errorf("cluster: down left cgroup %s", dir))
		}
	}
	return errors.Join(errs...)
}

// track remembers p for Down.
func (c *Cluster) track(p *process) *process {
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// restConfig is cfgPath's client configuration, connecting from the
// runner namespace (the fixture itself runs in the host's, which has no
// route to the cluster).
func (c *Cluster) restConfig(cfgPath string) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfgPath)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", cfgPath, err)
	}
	rc.Dial = c.dial.DialContext
	rc.QPS, rc.Burst = 50, 100
	rc.Timeout = 15 * time.Second
	return rc, nil
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.cfg.Log, "[%6.1fs] %s\n", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

// logPath is the log file of process name on node.
func (c *Cluster) logPath(node, name string) string {
	return filepath.Join(c.cfg.WorkDir, node, name+".log")
}

// procCgroup is the leaf cgroup (relative to the tree) of a process.
func procCgroup(node, name string) string { return filepath.Join("procs", node, name) }

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Proxy timeouts.
const (
	proxyHealthTimeout = 2 * time.Minute
	proxyStopGrace     = 30 * time.Second
)

// proxyArgs are the flags StartProxy passes on node n: kube-proxy's
// command line, which the node agent mirrors. --conntrack-max-per-core=0
// leaves the conntrack table's size alone: nf_conntrack_max and the hash
// size are the machine's, shared by every node. The TCP timeouts keep
// their defaults: they are per network namespace, so each proxy sets its
// node's, as the suite checks ("should set TCP CLOSE_WAIT timeout"). The
// OOM score stays as is (root lacks CAP_SYS_RESOURCE here). /healthz
// listens on every address of the node, as kube-proxy's default: the
// suite asks localhost from host-network pods ("should check kube-proxy
// urls") and the node IP from outside.
func (c *Cluster) proxyArgs(n *node, p Proxy) []string {
	args := []string{
		"--kubeconfig=" + c.path("kube-proxy.kubeconfig"),
		"--hostname-override=" + n.name,
		"--cluster-cidr=" + ClusterCIDR,
		"--conntrack-max-per-core=0",
		"--oom-score-adj=0",
		"--healthz-bind-address=0.0.0.0:" + strconv.Itoa(ProxyHealthzPort),
		"--metrics-bind-address=127.0.0.1:10249",
	}
	if p.Mode != "" {
		args = append(args, "--proxy-mode="+p.Mode)
	}
	return append(args, p.Args...)
}

// StartProxy runs p on every node, in the node's namespaces, and returns
// once every node's /healthz answers 200. A proxy already running is an
// error: StopProxy first. On error, StopProxy stops what did start.
func (c *Cluster) StartProxy(ctx context.Context, p Proxy) error {
	if p.Name == "" || p.Binary == "" {
		return fmt.Errorf("cluster: StartProxy: Proxy needs a Name and a Binary (got %q, %q)", p.Name, p.Binary)
	}
	if c.cfg.VM != nil {
		return c.startVMProxy(ctx, p)
	}
	c.mu.Lock()
	running := len(c.proxy) > 0
	c.mu.Unlock()
	if running {
		return fmt.Errorf("cluster: StartProxy %s: %s is running", p.Name, c.proxyP.Name)
	}
	// Each proxy started is StopProxy's to stop, even if a later one fails.
	var procs []*process
	for _, n := range c.nodes {
		proc, err := c.startOn(n, p.Name, append([]string{p.Binary}, c.proxyArgs(n, p)...)...)
		if err != nil {
			return err
		}
		procs = append(procs, proc)
		c.mu.Lock()
		c.proxy, c.proxyP = procs, p
		c.mu.Unlock()
	}
	for k, n := range c.nodes {
		if err := c.waitProxyHealthy(ctx, n, procs[k]); err != nil {
			return err
		}
	}
	c.logf("%s (mode %q) healthy on %d node(s)", p.Name, p.Mode, len(c.nodes))
	return nil
}

// waitProxyHealthy polls node n's proxy /healthz from the runner.
func (c *Cluster) waitProxyHealthy(ctx context.Context, n *node, proc *process) error {
	ctx, cancel := context.WithTimeout(ctx, proxyHealthTimeout)
	defer cancel()
	url := fmt.Sprintf("http://%s:%d/healthz", n.ip, ProxyHealthzPort)
	client := c.HTTPClient()
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if proc.exited() {
			return proc.failure("exited before %s answered 200", url)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return proc.failure("%s: %v (last: %s)", url, err, last)
		}
	}
}

// StopProxy stops the proxy StartProxy started (SIGTERM, then SIGKILL
// after a grace period) and runs `<binary> --cleanup --proxy-mode <mode>`
// on every node, so the next proxy starts on a node as clean as a new
// one. Without a running proxy it does nothing.
func (c *Cluster) StopProxy(ctx context.Context) error {
	if c.cfg.VM != nil {
		return c.stopVMProxy(ctx)
	}
	c.mu.Lock()
	procs, p := c.proxy, c.proxyP
	c.proxy = nil
	c.mu.Unlock()
	if len(procs) == 0 {
		return nil
	}
	for _, proc := range procs {
		proc.stop(proxyStopGrace)
	}
	var errs []error
	for _, n := range c.nodes {
		argv := []string{p.Binary, "--cleanup"}
		if p.Mode != "" {
			argv = append(argv, "--proxy-mode="+p.Mode)
		}
		if err := c.inNS(ctx, n.name, n.holder, argv...); err != nil {
			errs = append(errs, fmt.Errorf("cluster: %s: %s --cleanup: %w", n.name, p.Name, err))
		}
	}
	c.logf("%s stopped and cleaned up on %d node(s)", p.Name, len(c.nodes))
	return errors.Join(errs...)
}

package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hostPath is path inside n's mount namespace as the host sees it.
func (n *node) hostPath(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.holder.pid()), path)
}

// startNodeRuntime starts containerd on n, then imports the images while
// kubelet, started once the API server is ready, registers the node: no
// pod needs an image before Up returns.
func (c *Cluster) startNodeRuntime(ctx context.Context, n *node, apiReady <-chan struct{}) error {
	ctrd, err := c.startOn(n, "containerd", "containerd", "--config", c.path(containerdFile))
	if err != nil {
		return err
	}
	if err := c.waitContainerd(ctx, n, ctrd); err != nil {
		return err
	}
	imported := make(chan error, 1)
	go func() { imported <- c.importImages(ctx, n) }()
	select {
	case <-apiReady:
	case <-ctx.Done():
		<-imported
		return ctx.Err()
	}
	if _, err := c.startOn(n, "kubelet", c.cfg.Bin.Kubelet,
		"--kubeconfig="+c.path(n.name+".kubeconfig"), "--config="+c.path(filepath.Join(n.name, "kubelet.yaml")),
		"--hostname-override="+n.name, "--node-ip="+n.ip.String(), "--v=1"); err != nil {
		<-imported
		return err
	}
	return <-imported
}

// importImages imports every image tarball into n's containerd.
func (c *Cluster) importImages(ctx context.Context, n *node) error {
	for _, img := range c.cfg.Images {
		if err := c.inNS(ctx, n.name, n.holder, "ctr", "-n", "k8s.io", "images", "import", img); err != nil {
			return fmt.Errorf("cluster: %s: import %s: %w", n.name, img, err)
		}
	}
	c.logf("%s: %d image(s) imported", n.name, len(c.cfg.Images))
	return nil
}

// waitContainerd waits until containerd answers on its socket.
func (c *Cluster) waitContainerd(ctx context.Context, n *node, ctrd *process) error {
	ctx, cancel := context.WithTimeout(ctx, socketTimeout)
	defer cancel()
	var last error
	for {
		if _, err := os.Stat(n.hostPath(containerdSocket)); err == nil {
			if last = c.inNS(ctx, n.name, n.holder, "ctr", "version"); last == nil {
				return nil
			}
		}
		if ctrd.exited() {
			return ctrd.failure("exited before answering on %s", containerdSocket)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return ctrd.failure("no answer on %s: %v (last: %v)", containerdSocket, err, last)
		}
	}
}

// wireNodes waits for kube-controller-manager to give every node its pod
// subnet, then writes each node's CNI configuration and routes every
// subnet through its node.
func (c *Cluster) wireNodes(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, nodesTimeout)
	defer cancel()
	pending := slices.Clone(c.nodes)
	for len(pending) > 0 {
		list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, obj := range list.Items {
				for k, n := range pending {
					if obj.Name != n.name || obj.Spec.PodCIDR == "" {
						continue
					}
					if n.podCIDR, err = netip.ParsePrefix(obj.Spec.PodCIDR); err != nil {
						return fmt.Errorf("cluster: node %s: podCIDR %q: %w", n.name, obj.Spec.PodCIDR, err)
					}
					if err := c.writeCNIConfig(n); err != nil {
						return err
					}
					c.logf("%s: podCIDR %s", n.name, n.podCIDR)
					pending = slices.Delete(pending, k, k+1)
					break
				}
			}
		}
		if len(pending) == 0 {
			break
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			kcm := c.logPath(NodeName(1), "kube-controller-manager")
			return fmt.Errorf("%w; %s (which allocates podCIDRs) ends:\n%s",
				c.nodeFailure(pending[0], "no podCIDR: %v", err), kcm, tail(kcm, 15))
		}
	}
	return c.routePodCIDRs(ctx)
}

// writeCNIConfig writes n's CNI configuration where its containerd reads
// it, renamed into place so containerd never reads half a file.
func (c *Cluster) writeCNIConfig(n *node) error {
	b, err := cniConfigJSON(n.podCIDR)
	if err != nil {
		return err
	}
	dst := n.hostPath(cniConfFile)
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("cluster: %s: CNI config: %w", n.name, err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		return fmt.Errorf("cluster: %s: CNI config: %w", n.name, err)
	}
	return nil
}

// waitNodesReady waits until every node reports Ready.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, nodesTimeout)
	defer cancel()
	for {
		list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		var notReady []string
		if err == nil {
			ready := map[string]bool{}
			for _, obj := range list.Items {
				for _, cond := range obj.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready[obj.Name] = true
					}
				}
			}
			for _, n := range c.nodes {
				if !ready[n.name] {
					notReady = append(notReady, n.name)
				}
			}
			if len(notReady) == 0 {
				c.logf("%d node(s) Ready", len(c.nodes))
				return nil
			}
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return c.nodeFailure(c.nodeNamed(notReady), "not Ready (%v)", err)
		}
	}
}

// nodeNamed is the node of the first name, or node 1.
func (c *Cluster) nodeNamed(names []string) *node {
	for _, n := range c.nodes {
		if len(names) > 0 && n.name == names[0] {
			return n
		}
	}
	return c.nodes[0]
}

// nodeFailure is an error about n carrying its kubelet's log's tail.
func (c *Cluster) nodeFailure(n *node, format string, args ...any) error {
	log := c.logPath(n.name, "kubelet")
	return fmt.Errorf("cluster: %s: %s; %s ends:\n%s", n.name, fmt.Sprintf(format, args...), log, tail(log, 25))
}

// waitDNS waits until CoreDNS resolves the kubernetes Service's name,
// asked directly (no proxy runs yet to serve the kube-dns Service).
func (c *Cluster) waitDNS(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiServerTimeout)
	defer cancel()
	server := net.JoinHostPort(NodeIP(1).String(), "53")
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return c.dial.DialContext(ctx, network, server)
	}}
	name := "kubernetes.default.svc." + ClusterDomain + "."
	for {
		addrs, lookupErr := r.LookupHost(ctx, name)
		if lookupErr == nil && slices.Contains(addrs, APIServiceIP) {
			c.logf("CoreDNS answers: %s is %s", name, strings.Join(addrs, ","))
			return nil
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			log := c.logPath(NodeName(1), "coredns")
			return fmt.Errorf("cluster: CoreDNS at %s does not resolve %s to %s (%v; last answer %v, %v); %s ends:\n%s",
				server, name, APIServiceIP, err, addrs, lookupErr, log, tail(log, 25))
		}
	}
}

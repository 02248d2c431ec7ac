package cluster

import (
	"context"
	"fmt"
	"net/netip"

	vnetns "github.com/vishvananda/netns"
	"k8s.io/client-go/kubernetes"
)

// Links, addresses and routes are made with ip(8) run through nsenter in
// the namespace they belong to, like every other step inside a node (the
// mounts, the sysctls, the programs): one mechanism, no OS thread of the
// fixture ever switched except to dial, and each step a command a person
// can replay by hand from the progress log.

// inNS runs argv in holder's network and mount namespaces, in cgroup leaf
// procs/<node>/setup.
func (c *Cluster) inNS(ctx context.Context, node string, holder *process, argv ...string) error {
	_, err := c.cg.run(ctx, procCgroup(node, "setup"), nsenterArgs(holder.pid(), argv...)...)
	return err
}

// startFabric starts the runner namespace with bridge br0, and the client
// of the API server that dials from there.
func (c *Cluster) startFabric(ctx context.Context) error {
	h, err := c.startHolder(ctx, "runner")
	if h != nil {
		c.runner = c.track(h)
	}
	if err != nil {
		return err
	}
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", BridgeIP, fabricBits), "dev", "br0"},
		{"ip", "link", "set", "br0", "up"},
	} {
		if err := c.inNS(ctx, "runner", c.runner, argv...); err != nil {
			return err
		}
	}
	ns, err := vnetns.GetFromPid(c.runner.pid())
	if err != nil {
		return fmt.Errorf("cluster: open the runner's network namespace: %w", err)
	}
	c.runnerNS = ns
	c.dial = nsDialer{ns: ns}
	rc, err := c.restConfig(c.Kubeconfig())
	if err != nil {
		return err
	}
	if c.client, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("cluster: client: %w", err)
	}
	return nil
}

// startNodeNS starts node i's namespaces: tmpfs over /run, /var/lib and
// /var/log, kubelet's kernel settings (kubeletTunables) and resolv.conf
// pointing at CoreDNS, eth0 (its peer on br0) with
// the node IP and a default route through the runner, forwarding on and
// bridged traffic through iptables (br_netfilter's switch is per
// namespace).
func (c *Cluster) startNodeNS(ctx context.Context, i int) error {
	n := &node{i: i, name: NodeName(i), ip: NodeIP(i)}
	h, err := c.startHolder(ctx, n.name)
	if h != nil {
		n.holder = c.track(h)
		c.nodes = append(c.nodes, n)
	}
	if err != nil {
		return err
	}
	peer := fmt.Sprintf("veth-n%d", i)
	var steps [][]string
	for _, dir := range nodeTmpfs {
		steps = append(steps, []string{"mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", dir})
	}
	for path := range kubeletTunables() {
		steps = append(steps, []string{"mount", "--bind", c.path(tunableFile(path)), "/proc/sys/" + path})
	}
	steps = append(steps,
		[]string{"mount", "--bind", c.path(resolvFile), "/etc/resolv.conf"},
		[]string{"mkdir", "-p", cniConfDir},
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		[]string{"sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"},
	)
	for _, argv := range steps {
		if err := c.inNS(ctx, n.name, n.holder, argv...); err != nil {
			return err
		}
	}
	pfx := netip.PrefixFrom(n.ip, fabricBits)
	for _, s := range []struct {
		in   *process
		argv []string
	}{
		{c.runner, []string{"ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", fmt.Sprint(n.holder.pid())}},
		{c.runner, []string{"ip", "link", "set", peer, "master", "br0", "up"}},
		{n.holder, []string{"ip", "addr", "add", pfx.String(), "dev", "eth0"}},
		{n.holder, []string{"ip", "link", "set", "eth0", "up"}},
		{n.holder, []string{"ip", "route", "add", "default", "via", BridgeIP, "dev", "eth0"}},
	} {
		node := n.name
		if s.in == c.runner {
			node = "runner"
		}
		if err := c.inNS(ctx, node, s.in, s.argv...); err != nil {
			return err
		}
	}
	return nil
}

// routePodCIDRs routes every node's pod subnet through its node IP, from
// the runner and every other node.
func (c *Cluster) routePodCIDRs(ctx context.Context) error {
	for _, dst := range c.nodes {
		route := []string{"ip", "route", "replace", dst.podCIDR.String(), "via", dst.ip.String()}
		if err := c.inNS(ctx, "runner", c.runner, route...); err != nil {
			return err
		}
		for _, n := range c.nodes {
			if n != dst {
				if err := c.inNS(ctx, n.name, n.holder, route...); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

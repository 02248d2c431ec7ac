package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// startHolder starts the process that holds a new network and mount
// namespace (private mount propagation, so nothing mounted inside reaches
// the host) for as long as it lives, and waits until it is inside them.
// unshare without --fork execs the holder itself: its PID is the one
// nsenter -t needs.
func (c *Cluster) startHolder(ctx context.Context, node string) (*process, error) {
	p, err := c.cg.startProcess(procCgroup(node, "holder"), node+" holder", c.logPath(node, "holder"),
		"unshare", "--net", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	if err != nil {
		return nil, err
	}
	// Command and NodeCommand start processes here at any time.
	if err := c.cg.makeDir(procCgroup(node, "commands")); err != nil {
		return p, err
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return p, fmt.Errorf("cluster: own network namespace: %w", err)
	}
	for {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.pid())); err == nil && ns != self {
			if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.pid())); err == nil && string(cmd) == "sleep\n" {
				return p, nil
			}
		}
		if p.exited() {
			return p, p.failure("exited before entering its namespaces")
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return p, p.failure("entering its namespaces: %v", err)
		}
	}
}

// nsDialer dials from inside a network namespace: the socket is made on an
// OS thread switched into it, and a socket stays in the namespace it was
// made in.
type nsDialer struct {
	ns vnetns.NsHandle
}

func (d nsDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := d.do(func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// do runs fn on an OS thread switched into the namespace. The thread is
// switched back afterwards, and left locked (so discarded by the runtime)
// only if that fails.
func (d nsDialer) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("cluster: own network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := vnetns.Set(d.ns); err != nil {
			errc <- fmt.Errorf("cluster: enter the runner's network namespace: %w", err)
			return
		}
		defer func() {
			if vnetns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
		}()
		errc <- fn()
	}()
	return <-errc
}

package userspace

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
	vnetns "github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"
)

// TestKernelConformance runs every scenario case a real kernel can
// reproduce against redirect mode in a node namespace: REDIRECT rules,
// the forwarders' sockets and real TCP and UDP connections, on a routed
// pod network (Calico's: pods behind veths without an address).
func TestKernelConformance(t *testing.T) {
	kernelConformance(t, kerneltest.PodNetworkRouted)
}

// TestKernelConformanceBridge is TestKernelConformance with every pod a
// port of a bridge that holds the pods' gateway (kubenet's cbr0).
func TestKernelConformanceBridge(t *testing.T) {
	kernelConformance(t, kerneltest.PodNetworkBridge)
}

// kernelHarness is a kerneltest.Harness over the userspace dataplane, in
// the userspace mode.
type kernelHarness struct {
	*kerneltest.Harness
}

func (kernelHarness) Mode() dataplane.Mode { return dataplane.ModeUserspace }

func kernelConformance(t *testing.T, n kerneltest.PodNetwork) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save")
	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), n.Reproducible)
	dataplanetest.RunScenarios(t, scenarios, func(t *testing.T) dataplanetest.Harness {
		t.Parallel()
		var dp *Dataplane
		return kernelHarness{kerneltest.New(t, kerneltest.Config{
			PodNetwork: n,
			New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
				dialer, err := dialerHere()
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { dialer.ns.Close() })
				dp, err = New(Config{Family: family, Redirect: &RedirectConfig{}, Dialer: dialer, Logger: logr.Discard()})
				return dp, err
			},
			ForgetAffinity: func() error {
				dp.forgetAffinity()
				return nil
			},
			Disturb: func(d dataplanetest.Disturbance) error { return dp.disturb(d) },
			Proxy:   true,
		})}
	})
}

// forgetAffinity drops every ClientIP pin.
func (d *Dataplane) forgetAffinity() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.ports {
		e.state.mu.Lock()
		e.state.pins = nil
		e.state.mu.Unlock()
	}
}

// nsDialer dials from the network namespace it was made in, whichever
// thread the forwarder's goroutine runs on: a test's node namespace is not
// the process's.
type nsDialer struct {
	ns vnetns.NsHandle
}

// dialerHere returns an nsDialer of the calling thread's namespace.
func dialerHere() (*nsDialer, error) {
	h, err := vnetns.Get()
	if err != nil {
		return nil, err
	}
	return &nsDialer{ns: h}, nil
}

func (n *nsDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	if err := vnetns.Set(n.ns); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter the node namespace: %w", err)
	}
	// A thread that cannot go back stays locked, and dies with its
	// goroutine.
	defer func() {
		if vnetns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// disturb changes the redirect rules as another program would: FlushAll
// flushes nat and filter ("iptables -F"), RemoveOne deletes the first
// service rule, AddForeign puts a RETURN atop the service chain.
func (d *Dataplane) disturb(dist dataplanetest.Disturbance) error {
	r := d.redir
	var in string
	switch dist {
	case dataplanetest.FlushAll:
		in = "*nat\n-F\nCOMMIT\n*filter\n-F\nCOMMIT\n"
	case dataplanetest.RemoveOne:
		in = "*nat\n-D " + r.services + " 1\nCOMMIT\n"
	case dataplanetest.AddForeign:
		in = "*nat\n-I " + r.services + " 1 -j RETURN\nCOMMIT\n"
	default:
		return dataplanetest.ErrCannotDisturb
	}
	return r.runner.Restore(context.Background(), xtables.RestoreBytes(in))
}

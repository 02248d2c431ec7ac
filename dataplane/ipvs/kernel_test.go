package ipvs

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/internal/vmtest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// requireIPVS skips t unless the kernel has IPVS and dummy links and
// iptables-restore is on PATH. Under PROXYKIT_REQUIRE_KERNEL=1 a missing
// one fails t inside the test VM; on a host without them t skips, as
// TestKernelTestsInVM runs it in the VM (and fails where it cannot).
func requireIPVS(t testing.TB) {
	t.Helper()
	netns.Require(t, "iptables-restore")
	probe := netns.New(t, "ipvsprobe")
	var missing []string
	if err := probe.Do(Probe); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := probe.Run("ip", "link", "add", "pkprobe0", "type", "dummy"); err != nil {
		missing = append(missing, "dummy links: "+strings.TrimSpace(err.Error()))
	}
	if len(missing) == 0 {
		return
	}
	msg := "kernel test needs IPVS and dummy links: " + strings.Join(missing, "; ")
	if os.Getenv(netns.RequireKernelEnv) == "1" && vmtest.Inside() {
		t.Fatalf("%s (%s=1 forbids skipping)", msg, netns.RequireKernelEnv)
	}
	t.Skip(msg + " (TestKernelTestsInVM runs it in a VM)")
}

// kernelHarness is a kerneltest.Harness over the IPVS dataplane, in the
// IPVS mode.
type kernelHarness struct {
	*kerneltest.Harness
}

func (kernelHarness) Mode() dataplane.Mode { return dataplane.ModeIPVS }

// TestKernelConformance runs the suite's reproducible cases through IPVS
// in a lab's node namespace, with real connections deciding each verdict,
// on a routed pod network (Calico's: pods behind veths without an
// address).
func TestKernelConformance(t *testing.T) {
	conformanceIn(t, kerneltest.PodNetworkRouted)
}

// TestKernelConformanceBridge is TestKernelConformance with every pod a
// port of a bridge that holds the pods' gateway (kubenet's cbr0).
func TestKernelConformanceBridge(t *testing.T) {
	conformanceIn(t, kerneltest.PodNetworkBridge)
}

func conformanceIn(t *testing.T, n kerneltest.PodNetwork) {
	requireIPVS(t)
	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), n.Reproducible)
	dataplanetest.RunScenarios(t, scenarios, func(t *testing.T) dataplanetest.Harness {
		// Scenarios have namespaces of their own; most of their time is
		// spent waiting for connections a verdict drops.
		t.Parallel()
		return kernelHarness{kerneltest.New(t, kerneltest.Config{
			PodNetwork: n,
			New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
				return New(Config{Family: family})
			},
			ForgetAffinity: forgetPersistence,
		})}
	})
}

// TestKernelGracefulTermination: an endpoint removed while a TCP
// connection to it is open keeps serving that connection at weight 0,
// new connections go to the other endpoint, and the real server is
// deleted once the connection closes.
func TestKernelGracefulTermination(t *testing.T) {
	requireIPVS(t)
	ctx := t.Context()
	node, client := netns.New(t, "node"), netns.New(t, "client")
	netns.Veth(t, node, "eth0", []string{"192.168.0.2/24"}, client, "eth0", []string{"192.168.0.9/24"})
	client.MustRun("ip", "route", "add", "default", "via", "192.168.0.2")
	eps := []netip.AddrPort{netip.MustParseAddrPort("10.1.0.2:8080"), netip.MustParseAddrPort("10.2.0.2:8080")}
	for i, ep := range eps {
		pod := netns.New(t, fmt.Sprintf("ep%d", i))
		gw := fmt.Sprintf("10.%d.0.1", i+1)
		netns.Veth(t, node, fmt.Sprintf("veth%d", i), []string{gw + "/24"}, pod, "eth0", []string{ep.Addr().String() + "/24"})
		pod.MustRun("ip", "route", "add", "default", "via", gw)
		serveEcho(t, pod, ep)
	}

	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName})
	b.UpdateService(nil, dataplanetest.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 0, 8080)}
	}))
	slice := dataplanetest.MakeSlice("ns1", "svc1", 0, func(sl *discovery.EndpointSlice) {
		sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
		for _, ep := range eps {
			sl.Endpoints = append(sl.Endpoints, dataplanetest.ReadyEndpoint(ep.Addr().String(), ""))
		}
	})
	b.UpdateEndpointSlice(nil, slice)
	var d *Dataplane
	if err := node.Do(func() (err error) {
		if d, err = New(Config{}); err != nil {
			return err
		}
		return d.Sync(ctx, b.Build().States[0])
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Do(func() error { return d.Cleanup(context.Background()) }) })

	var conn net.Conn
	if err := client.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", "172.30.0.41:80", 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	first := echo(t, conn, r, "hello")
	// Remove the endpoint that serves the open connection.
	upd := slice.DeepCopy()
	upd.Endpoints = nil
	for _, ep := range eps {
		if ep.String() != first {
			upd.Endpoints = append(upd.Endpoints, dataplanetest.ReadyEndpoint(ep.Addr().String(), ""))
		}
	}
	upd.ResourceVersion = "2"
	b.UpdateEndpointSlice(slice, upd)
	if err := node.Do(func() error { return d.Sync(ctx, b.Build().States[0]) }); err != nil {
		t.Fatal(err)
	}
	if got := d.Draining(); len(got) != 1 || !strings.HasSuffix(got[0], first) {
		t.Fatalf("Draining() = %v, want %s", got, first)
	}
	if got := echo(t, conn, r, "still there"); got != first {
		t.Errorf("the open connection moved to %s", got)
	}
	for range 5 {
		var other string
		if err := client.Do(func() error {
			c, err := net.DialTimeout("tcp", "172.30.0.41:80", 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			other = echo(t, c, bufio.NewReader(c), "new")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if other == first {
			t.Fatalf("a new connection reached the draining endpoint %s", first)
		}
	}
	conn.Close()
	// The kernel counts the connection active until it has seen the
	// close; poll, bounded.
	for i := 0; ; i++ {
		if err := node.Do(func() error { _, err := d.Reconcile(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		if len(d.Draining()) == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("the drained real server is still there: %v", d.Draining())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serveEcho answers every line on ep with the endpoint's address.
func serveEcho(t *testing.T, ns *netns.NS, ep netip.AddrPort) {
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", ep.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintln(c, ep.String())
				}
			}()
		}
	}()
}

// echo sends a line on c and returns the endpoint that answered.
func echo(t *testing.T, c net.Conn, r *bufio.Reader, msg string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, msg); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

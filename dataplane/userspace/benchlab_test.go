package userspace

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchLab is where a benchmark's client, server and proxy run: each
// function opens its sockets in its side's network namespace.
type benchLab struct {
	// listen opens the server's listening socket.
	listen func(b *testing.B) net.Listener
	// dial connects from the client's side.
	dial func(b *testing.B, to netip.AddrPort) *net.TCPConn
	// proxy starts a Dataplane on the node forwarding one service to
	// server, and returns the address clients reach it at.
	proxy func(b *testing.B, server netip.AddrPort) (*Dataplane, netip.AddrPort)
}

// runLabs runs bench as a sub-benchmark in each topology.
func runLabs(b *testing.B, bench func(b *testing.B, lab *benchLab)) {
	for _, lab := range []struct {
		name  string
		start func(*testing.B) *benchLab
	}{{"loopback", loopbackLab}, {"veth", vethLab}} {
		b.Run(lab.name, func(b *testing.B) { bench(b, lab.start(b)) })
	}
}

// loopbackLab runs client, proxy and server on 127.0.0.1: four TCP
// endpoints on the same CPUs, a proxy's worst case.
func loopbackLab(*testing.B) *benchLab {
	return &benchLab{
		listen: func(b *testing.B) net.Listener {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			return ln
		},
		dial: dialBench,
		proxy: func(b *testing.B, server netip.AddrPort) (*Dataplane, netip.AddrPort) {
			return startProxy(b, server, Config{Listen: loopbackListen}, func(f func() error) error { return f() })
		},
	}
}

// The veth lab's addresses: the client and the server each on a veth to
// the node, which routes between them.
const (
	vethClient     = "10.123.1.2"
	vethNodeClient = "10.123.1.1" // the node's side of the client's veth
	vethNodeServer = "10.123.2.1"
	vethServer     = "10.123.2.2"
)

// vethLab is what a node sees: a client namespace and a server
// namespace, each joined by a veth to a node namespace that routes
// between them and runs the proxy. "Direct" is the same client-to-server
// path through the node without the proxy. It skips without root.
func vethLab(b *testing.B) *benchLab {
	netns.Require(b, "sysctl")
	client, node, server := netns.New(b, "bcli"), netns.New(b, "bnode"), netns.New(b, "bsrv")
	netns.Veth(b, client, "eth0", []string{vethClient + "/24"}, node, "cli0", []string{vethNodeClient + "/24"})
	netns.Veth(b, node, "srv0", []string{vethNodeServer + "/24"}, server, "eth0", []string{vethServer + "/24"})
	client.MustRun("ip", "route", "add", "default", "via", vethNodeClient)
	server.MustRun("ip", "route", "add", "default", "via", vethNodeServer)
	node.MustRun("sysctl", "-qw", "net.ipv4.ip_forward=1")
	return &benchLab{
		listen: func(b *testing.B) net.Listener {
			var ln net.Listener
			inNS(b, server, func() (err error) {
				ln, err = net.Listen("tcp", vethServer+":0")
				return err
			})
			return ln
		},
		dial: func(b *testing.B, to netip.AddrPort) *net.TCPConn {
			var c *net.TCPConn
			inNS(b, client, func() (err error) {
				c, err = net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(to))
				return err
			})
			return c
		},
		proxy: func(b *testing.B, srv netip.AddrPort) (*Dataplane, netip.AddrPort) {
			var dialer *nsDialer
			inNS(b, node, func() (err error) {
				dialer, err = dialerHere()
				return err
			})
			b.Cleanup(func() { dialer.ns.Close() })
			listen := func(Destination) (netip.AddrPort, bool) { return netip.MustParseAddrPort(vethNodeClient + ":0"), true }
			return startProxy(b, srv, Config{Listen: listen, Dialer: dialer}, node.Do)
		},
	}
}

// inNS runs f on a thread in ns, failing b on error.
func inNS(b *testing.B, ns *netns.NS, f func() error) {
	b.Helper()
	if err := ns.Do(f); err != nil {
		b.Fatal(err)
	}
}

func dialBench(b *testing.B, a netip.AddrPort) *net.TCPConn {
	b.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(a))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// proxyTo returns a loopback Dataplane forwarding one service to server,
// and the address its forwarder listens on.
func proxyTo(b *testing.B, server netip.AddrPort) (*Dataplane, netip.AddrPort) {
	return loopbackLab(b).proxy(b, server)
}

// startProxy returns a Dataplane configured by cfg forwarding one service
// to server, and the address its forwarder listens on; within runs its
// Sync, so that the forwarder's socket is opened in the node's namespace.
func startProxy(b *testing.B, server netip.AddrPort, cfg Config, within func(func() error) error) (*Dataplane, netip.AddrPort) {
	b.Helper()
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "bench", Name: "svc"}, Protocol: v1.ProtocolTCP}
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: v1.ProtocolTCP,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {{Addr: server, EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
		}),
	}
	cfg.Logger = logr.Discard()
	d, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Cleanup(context.Background()) })
	if err := within(func() error { return d.Sync(b.Context(), state) }); err != nil {
		b.Fatal(err)
	}
	for _, a := range d.Listeners() {
		return d, a
	}
	b.Fatal("no listener")
	return nil, netip.AddrPort{}
}

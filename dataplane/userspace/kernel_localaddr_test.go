package userspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// TestKernelLocalAddressesFollowed: the kernel's addresses of one family
// are the node's, read at the start and again as they are added and
// removed; an address on two links stays until it leaves both.
func TestKernelLocalAddressesFollowed(t *testing.T) {
	netns.Require(t)
	for _, tc := range []struct {
		family v1.IPFamily
		// first is on nic0 from the start; added goes on nic0, then on
		// nic1 too, then leaves nic0; other is the other family's, on
		// nic0. marker, added with a change that leaves added where it
		// was, shows that change was read.
		first, added, other, marker string
	}{
		{family: v1.IPv4Protocol, first: "192.168.0.2", added: "10.50.0.3", other: "fd00::2", marker: "10.50.0.9"},
		{family: v1.IPv6Protocol, first: "fd00::2", added: "fd00:50::3", other: "192.168.0.2", marker: "fd00:50::9"},
	} {
		t.Run(string(tc.family), func(t *testing.T) {
			node := netns.New(t, "node")
			node.MustRun("ip", "link", "add", "nic0", "type", "veth", "peer", "name", "nic1")
			node.MustRun("ip", "link", "set", "nic0", "up")
			node.MustRun("ip", "link", "set", "nic1", "up")
			// addr is the ip(8) command that adds or deletes a host
			// address a on link.
			addr := func(op, a, link string) []string {
				cmd := []string{"addr", op, a + "/32", "dev", link}
				if strings.Contains(a, ":") {
					cmd[2] = a + "/128"
					if op == "add" {
						cmd = append(cmd, "nodad")
					}
				}
				return cmd
			}
			for _, a := range []string{tc.first, tc.other} {
				node.MustRun("ip", addr("add", a, "nic0")...)
			}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			var k *kernelAddresses
			if err := node.Do(func() (err error) {
				k, err = watchKernelAddresses(ctx, &wg, tc.family, logr.Discard())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); wg.Wait() }()
			steps := []struct {
				name string
				cmds [][]string
				want map[string]bool
			}{
				{"at the start", nil, map[string]bool{tc.first: true}},
				{"an address added", [][]string{addr("add", tc.added, "nic0")}, map[string]bool{tc.first: true, tc.added: true}},
				{"on a second link", [][]string{addr("add", tc.added, "nic1")}, map[string]bool{tc.first: true, tc.added: true}},
				{"gone from the first link", [][]string{addr("del", tc.added, "nic0"), addr("add", tc.marker, "nic1")}, map[string]bool{tc.first: true, tc.added: true, tc.marker: true}},
				{"gone from both", [][]string{addr("del", tc.added, "nic1"), addr("del", tc.first, "nic0"), addr("del", tc.marker, "nic1")}, map[string]bool{}},
			}
			for _, st := range steps {
				for _, c := range st.cmds {
					node.MustRun("ip", c...)
				}
				// The set follows a notification: poll, a bounded number
				// of times.
				var diff string
				for range 500 {
					got := map[string]bool{}
					for _, a := range []string{tc.first, tc.added, tc.other, tc.marker} {
						if k.Local(netip.MustParseAddr(a)) {
							got[a] = true
						}
					}
					if diff = cmp.Diff(st.want, got); diff == "" {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				if diff != "" {
					t.Errorf("%s: local addresses (-want +got):\n%s", st.name, diff)
				}
			}
		})
	}
}

// TestKernelNodeTrafficFromSecondAddress runs redirect mode on a node
// whose Node object lists 192.168.0.2 while a second NIC holds 10.50.0.2,
// for an externalTrafficPolicy Local service whose only endpoint is on
// another node. The node reaches its external IP, LoadBalancer VIP and
// node port (on both addresses) from the second address, over TCP and
// UDP, and from an address added after the Sync; an outside client's
// connection is dropped.
func TestKernelNodeTrafficFromSecondAddress(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save")
	requireTransparent(t)
	node, client, pod := netns.New(t, "node"), netns.New(t, "client"), netns.New(t, "pod")
	netns.Veth(t, node, "eth0", []string{"192.168.0.2/24"}, client, "eth0", []string{"192.168.0.9/24"})
	netns.Veth(t, node, "eth1", []string{"10.50.0.2/24"}, client, "eth1", []string{"10.50.0.9/24"})
	netns.Veth(t, node, "veth0", []string{"10.1.0.1/24"}, pod, "eth0", []string{"10.1.0.2/24"})
	pod.MustRun("ip", "route", "add", "default", "via", "10.1.0.1")
	client.MustRun("ip", "route", "add", "default", "via", "192.168.0.2")
	node.MustRun("ip", "route", "add", "default", "via", "192.168.0.9")
	ep := netip.MustParseAddrPort("10.1.0.2:8080")
	serveGreeting(t, pod, ep)

	c := newCluster()
	c.b.UpdateNode(dataplanetest.MakeNode(dataplanetest.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.2"}}
	}))
	c.service("web", "172.30.0.41", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.ExternalIPs = []string{"10.60.0.1"}
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.Ports = append(s.Spec.Ports, dataplanetest.ServicePort("dns", v1.ProtocolUDP, 80, 30080, 8080))
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "10.70.0.1"}}
	}, "http/TCP/80")
	c.b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns", "web", 1, func(sl *discovery.EndpointSlice) {
		sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("http", v1.ProtocolTCP, 8080), dataplanetest.SlicePort("dns", v1.ProtocolUDP, 8080)}
		sl.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint(ep.Addr().String(), "node2")}
	}))
	var d *Dataplane
	if err := node.Do(func() error {
		dialer, err := dialerHere()
		if err != nil {
			return err
		}
		t.Cleanup(func() { dialer.ns.Close() })
		if d, err = New(Config{Redirect: &RedirectConfig{}, Dialer: dialer, Logger: logr.Discard()}); err != nil {
			return err
		}
		return d.Sync(t.Context(), c.build())
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Do(func() error { return d.Cleanup(context.Background()) }) })

	// An address added after the Sync, once the forwarder has read it.
	node.MustRun("ip", "addr", "add", "10.50.0.3/32", "dev", "eth1")
	if !polled(func() bool {
		d.routesMu.RLock()
		defer d.routesMu.RUnlock()
		return d.routes.local != nil && d.routes.local.Local(netip.MustParseAddr("10.50.0.3"))
	}) {
		t.Fatal("the forwarder never read the address added after the Sync")
	}

	served := ep.String()
	tests := []struct {
		name     string
		from     *netns.NS
		nw       string
		src, dst string
		want     string
	}{
		{"node to external IP", node, "tcp", "10.50.0.2", "10.60.0.1:80", served},
		{"node to LoadBalancer VIP", node, "tcp", "10.50.0.2", "10.70.0.1:80", served},
		{"node to node port on the Node IP", node, "tcp", "10.50.0.2", "192.168.0.2:30080", served},
		{"node to node port on its own address", node, "tcp", "10.50.0.2", "10.50.0.2:30080", served},
		{"node to external IP over UDP", node, "udp", "10.50.0.2", "10.60.0.1:80", served},
		{"node to external IP from an address added later", node, "tcp", "10.50.0.3", "10.60.0.1:80", served},
		{"node to external IP from the Node IP", node, "tcp", "192.168.0.2", "10.60.0.1:80", served},
		{"outside to external IP", client, "tcp", "192.168.0.9", "10.60.0.1:80", "no answer"},
	}
	for _, tc := range tests {
		var got string
		if err := tc.from.Do(func() error {
			got = askFrom(tc.nw, netip.MustParseAddr(tc.src), tc.dst)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s (%s %s -> %s): %s, want %s", tc.name, tc.nw, tc.src, tc.dst, got, tc.want)
		}
	}
}

// polled reports whether cond held within 500 tries 10 ms apart.
func polled(cond func() bool) bool {
	for range 500 {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// askFrom sends "hi\n" over nw from src to dst and returns the line answered,
// "no answer" when nothing came within two seconds, or the error.
func askFrom(nw string, src netip.Addr, dst string) string {
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
	if nw == "udp" {
		d.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
	}
	c, err := d.Dial(nw, dst)
	if err != nil {
		return answerTo(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return err.Error()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return answerTo(err)
	}
	return strings.TrimSpace(line)
}

// answerTo is what askFrom returns for err: "no answer" for a timeout.
func answerTo(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "no answer"
	}
	return err.Error()
}

// serveGreeting answers at ep inside ns, until the test ends, with the
// line "<ep>": on TCP to every connection, on UDP to every datagram.
func serveGreeting(t *testing.T, ns *netns.NS, ep netip.AddrPort) {
	t.Helper()
	var (
		ln net.Listener
		pc net.PacketConn
	)
	if err := ns.Do(func() (err error) {
		if ln, err = net.Listen("tcp", ep.String()); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", ep.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	greeting := []byte(fmt.Sprintf("%s\n", ep))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write(greeting)
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(greeting, from)
		}
	}()
}

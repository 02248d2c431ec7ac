package userspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// exposureFamily is one family of TestKernelForwardersOnlyThroughRules'
// lab: the node's address on the client's link and on the pod's, the
// client's, the pod's (the only endpoint) and the service addresses.
type exposureFamily struct {
	family                     v1.IPFamily
	nodeIPs                    [2]string
	client, pod, clusterIP, ip string
	prefix                     int
}

var exposureFamilies = []exposureFamily{
	{v1.IPv4Protocol, [2]string{"192.168.0.2", "10.1.0.1"}, "192.168.0.9", "10.1.0.2", "172.30.0.10", "10.60.0.1", 24},
	{v1.IPv6Protocol, [2]string{"fd00::2", "fd00:1::1"}, "fd00::9", "fd00:1::2", "fd00:30::10", "fd00:60::1", 64},
}

// TestKernelForwardersOnlyThroughRules runs redirect mode, both families,
// on a node with a client on one link and a pod (the endpoint) on another,
// for a service with a cluster IP, an external IP and node ports, TCP and
// UDP. The frontends serve the client and the node; then every port on
// which a socket of the node listens is tried from the client at each of
// the node's addresses, and none answers: a forwarder's own port takes
// only what the rules send it. A program of the node that connects
// straight to a forwarder's port on loopback is refused too.
func TestKernelForwardersOnlyThroughRules(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save", "sysctl")
	requireTransparent(t)
	node, client, pod := netns.New(t, "node"), netns.New(t, "client"), netns.New(t, "pod")
	// Every refusal's ICMP error is sent at once.
	node.MustRun("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0")
	var nodeAddrs, clientAddrs, podAddrs, podGW []string
	for _, f := range exposureFamilies {
		p := "/" + strconv.Itoa(f.prefix)
		nodeAddrs, clientAddrs = append(nodeAddrs, f.nodeIPs[0]+p), append(clientAddrs, f.client+p)
		podAddrs, podGW = append(podAddrs, f.pod+p), append(podGW, f.nodeIPs[1]+p)
	}
	netns.Veth(t, node, "eth0", nodeAddrs, client, "eth0", clientAddrs)
	netns.Veth(t, node, "veth0", podGW, pod, "eth0", podAddrs)
	for _, f := range exposureFamilies {
		ip := "-4"
		if f.family == v1.IPv6Protocol {
			ip = "-6"
		}
		client.MustRun("ip", ip, "route", "add", "default", "via", f.nodeIPs[0])
		// The node's own packets to a service address need a route
		// before its OUTPUT rules redirect them.
		node.MustRun("ip", ip, "route", "add", "default", "via", f.client)
		pod.MustRun("ip", ip, "route", "add", "default", "via", f.nodeIPs[1])
		serveGreeting(t, pod, netip.AddrPortFrom(netip.MustParseAddr(f.pod), 8080))
	}

	var planes []*Dataplane
	for _, f := range exposureFamilies {
		if err := node.Do(func() error {
			dialer, err := dialerHere()
			if err != nil {
				return err
			}
			t.Cleanup(func() { dialer.ns.Close() })
			d, err := New(Config{Family: f.family, Redirect: &RedirectConfig{}, Dialer: dialer, Logger: logr.Discard()})
			if err != nil {
				return err
			}
			planes = append(planes, d)
			return d.Sync(t.Context(), f.state())
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		node.Do(func() error {
			for _, d := range planes {
				d.Cleanup(context.Background())
			}
			return nil
		})
	})

	// The frontends serve, from outside and from the node.
	for _, f := range exposureFamilies {
		served := hostPortOf(f.pod, 8080)
		for _, dst := range []string{hostPortOf(f.clusterIP, 80), hostPortOf(f.ip, 80), hostPortOf(f.nodeIPs[0], 30080), hostPortOf(f.nodeIPs[1], 30080)} {
			for _, nw := range []string{"tcp", "udp"} {
				for _, from := range []struct {
					name string
					ns   *netns.NS
				}{{"client", client}, {"node", node}} {
					if got := knock(from.ns, nw, dst); got != served {
						t.Errorf("from the %s, %s %s: %s, want %s", from.name, nw, dst, got, served)
					}
				}
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	tcp, udp, err := node.ListeningPorts()
	if err != nil {
		t.Fatal(err)
	}
	// Two forwarders per frontend of each family and protocol (the
	// service addresses' on loopback, the node ports' on every address)
	// and the ingress sockets on the service addresses: not fewer.
	if len(tcp) < 3 || len(udp) < 3 {
		t.Fatalf("the node listens on TCP ports %v and UDP ports %v: fewer than the forwarders", tcp, udp)
	}
	var exposed []string
	for _, f := range exposureFamilies {
		for _, ip := range f.nodeIPs {
			for _, c := range []struct {
				nw    string
				ports []uint16
			}{{"tcp", tcp}, {"udp", udp}} {
				for _, port := range c.ports {
					dst := hostPortOf(ip, int(port))
					if got := knock(client, c.nw, dst); got != "refused" && got != "no answer" {
						exposed = append(exposed, fmt.Sprintf("%s %s: %s", c.nw, dst, got))
					}
				}
			}
		}
	}
	if len(exposed) > 0 {
		out, _ := node.Run("ss", "-ltnup")
		t.Errorf("from outside, ports of the node answer that no rule leads to:\n%s\nsockets of the node:\n%s", strings.Join(exposed, "\n"), out)
	}

	// A program of the node reaching a forwarder's port on loopback
	// directly is refused as well; only the redirects get there.
	for _, d := range planes {
		for dst, at := range d.Listeners() {
			if !at.Addr().IsLoopback() {
				continue
			}
			nw := strings.ToLower(string(dst.Protocol))
			if got := knock(node, nw, at.String()); got != "refused" {
				t.Errorf("from the node straight to the forwarder of %s at %s: %s, want refused", dst, at, got)
			}
		}
	}
}

// state is the family's State: service ns/web with the cluster IP, an
// external IP and node port 30080, over TCP and UDP port 80, its one
// endpoint the pod's port 8080.
func (f exposureFamily) state() *dataplane.State {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{f.family}, NodeName: dataplanetest.NodeName})
	b.UpdateNode(dataplanetest.MakeNode(dataplanetest.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: f.nodeIPs[0]}}
	}))
	b.UpdateService(nil, dataplanetest.MakeService("ns", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = f.clusterIP
		s.Spec.ClusterIPs = []string{f.clusterIP}
		s.Spec.IPFamilies = []v1.IPFamily{f.family}
		s.Spec.ExternalIPs = []string{f.ip}
		s.Spec.Ports = []v1.ServicePort{
			dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, 30080, 8080),
			dataplanetest.ServicePort("dns", v1.ProtocolUDP, 80, 30080, 8080),
		}
	}))
	b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns", "web", 1, func(sl *discovery.EndpointSlice) {
		if f.family == v1.IPv6Protocol {
			sl.AddressType = discovery.AddressTypeIPv6
		}
		sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("http", v1.ProtocolTCP, 8080), dataplanetest.SlicePort("dns", v1.ProtocolUDP, 8080)}
		sl.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint(f.pod, "node2")}
	}))
	return b.Build().States[0]
}

func hostPortOf(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// knock sends "hi\n" over nw from ns to dst and returns the line answered,
// "refused" (a TCP reset, an ICMP port unreachable), "no answer" when
// nothing came within a second, or the error.
func knock(ns *netns.NS, nw, dst string) string {
	var got string
	err := ns.Do(func() error {
		c, err := net.DialTimeout(nw, dst, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("hi\n")); err != nil {
			return err
		}
		got, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	var ne net.Error
	switch {
	case err == nil:
		return strings.TrimSpace(got)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return "refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer"
	}
	return err.Error()
}

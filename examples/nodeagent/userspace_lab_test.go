package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// usFamily is one IP family of the userspace lab. Service addresses are
// Svc (cluster IPs) or Ext (external and LoadBalancer IPs) followed by a
// number, the same in both families.
type usFamily struct {
	Name, AddrType string
	// NodeIPs are the node's: on the client's link (its InternalIP) and
	// on the uplink to the sink.
	NodeIPs      [2]string
	Client, Sink string
	Pods         [2]string
	Svc, Ext     string
	// Local are the prefixes of Svc and Ext, which the sink holds.
	Local           [2]string
	NodePortBase    int
	Allowed, Denied []string
}

var (
	usV4 = usFamily{Name: "v4", AddrType: "IPv4", NodeIPs: [2]string{"10.1.0.1", "10.9.0.1"},
		Client: "10.1.0.2", Sink: "10.9.0.2", Pods: [2]string{"10.2.1.2", "10.2.2.2"},
		Svc: "10.96.0.", Ext: "203.0.113.", Local: [2]string{"10.96.0.0/24", "203.0.113.0/24"}, NodePortBase: 30000,
		Allowed: []string{"10.1.0.0/24", "10.9.0.0/24"}, Denied: []string{"192.0.2.0/24"}}
	usV6 = usFamily{Name: "v6", AddrType: "IPv6", NodeIPs: [2]string{"fd00:1::1", "fd00:9::1"},
		Client: "fd00:1::2", Sink: "fd00:9::2", Pods: [2]string{"fd00:2::1:2", "fd00:2::2:2"},
		Svc: "fd00:96::", Ext: "2001:db8::", Local: [2]string{"fd00:96::/64", "2001:db8::/64"}, NodePortBase: 31000,
		Allowed: []string{"fd00:1::/64", "fd00:9::/64"}, Denied: []string{"2001:db8:ff::/64"}}
	usFamilies = []usFamily{usV4, usV6}
)

// usClusterCIDR covers the pods of both families: their traffic is local.
const usClusterCIDR = "10.2.0.0/16,fd00:2::/64"

// The service address numbered n with port.
func (f usFamily) svc(n, port int) string { return hostPort(f.Svc+strconv.Itoa(n), port) }
func (f usFamily) ext(n, port int) string { return hostPort(f.Ext+strconv.Itoa(n), port) }

// NodePort is the family's node port numbered n.
func (f usFamily) NodePort(n int) int { return f.NodePortBase + n }

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// Calico's gateway for its pods: 169.254.1.1, which no link holds and the
// veth answers for by proxy ARP, and for IPv6 the link-local address of a
// veth whose MAC is calicoMAC.
const (
	calicoMAC       = "ee:ee:ee:ee:ee:ee"
	calicoLinkLocal = "fe80::ecee:eeff:feee:eeee"
)

// usLab is a node shaped as a real one: forwarding, a default route to a
// sink, an outside client on a link of its own, two addresses per family
// (on the client's link and on the uplink), and pods on Calico's
// address-less veths, each reached through a /32 (/128) route.
type usLab struct {
	node, client *netns.NS
	pods         [2]*netns.NS
}

func newUSLab(t *testing.T) *usLab {
	l := &usLab{node: usHost(t, "usnode"), client: usHost(t, "uscli")}
	// No ICMP rate limit and no redirects: every reject's ICMP error is
	// sent.
	l.node.MustRun("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0")
	newUSSink(t, l.node)
	netns.Veth(t, l.node, "cli0", []string{usV4.NodeIPs[0] + "/24", usV6.NodeIPs[0] + "/64"},
		l.client, "eth0", []string{usV4.Client + "/24", usV6.Client + "/64"})
	l.client.MustRun("ip", "route", "add", "default", "via", usV4.NodeIPs[0])
	l.client.MustRun("ip", "-6", "route", "add", "default", "via", usV6.NodeIPs[0])
	for i := range l.pods {
		l.pods[i] = l.addPod(t, i+1)
		serveAs(t, l.pods[i], fmt.Sprintf("pod%d", i+1),
			[]string{hostPort(usV4.Pods[i], 8080), hostPort(usV6.Pods[i], 8080)},
			[]string{hostPort(usV4.Pods[i], 5353), hostPort(usV6.Pods[i], 5353)})
	}
	return l
}

// usHost is a namespace whose links' IPv6 addresses are usable at once.
func usHost(t *testing.T, name string) *netns.NS {
	ns := netns.New(t, name)
	ns.MustRun("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	return ns
}

// newUSSink links the node's default routes to a namespace that holds
// every service address and answers on them as "sink": traffic the
// proxy lets through untranslated shows as that, not as a drop.
func newUSSink(t *testing.T, node *netns.NS) {
	sink := usHost(t, "ussink")
	netns.Veth(t, node, "uplink", []string{usV4.NodeIPs[1] + "/24", usV6.NodeIPs[1] + "/64"},
		sink, "eth0", []string{usV4.Sink + "/24", usV6.Sink + "/64"})
	node.MustRun("ip", "route", "add", "default", "via", usV4.Sink)
	node.MustRun("ip", "-6", "route", "add", "default", "via", usV6.Sink)
	sink.MustRun("ip", "route", "add", "default", "via", usV4.NodeIPs[1])
	sink.MustRun("ip", "-6", "route", "add", "default", "via", usV6.NodeIPs[1])
	// IPv6 binds only to addresses of links, not of local routes.
	sink.MustRun("sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1")
	var udp []string
	for _, f := range usFamilies {
		for _, prefix := range f.Local {
			sink.MustRun("ip", "route", "add", "local", prefix, "dev", "lo")
		}
		udp = append(udp, f.svc(12, 53), f.svc(13, 53))
	}
	serveAs(t, sink, "sink", []string{":80"}, udp)
}

// addPod makes the n-th pod as Calico does and routes its addresses to
// it.
func (l *usLab) addPod(t *testing.T, n int) *netns.NS {
	pod := usHost(t, fmt.Sprintf("uspod%d", n))
	link := fmt.Sprintf("pod%d", n)
	v4, v6 := usV4.Pods[n-1], usV6.Pods[n-1]
	l.node.MustRun("ip", "link", "add", link, "address", calicoMAC, "type", "veth", "peer", "name", "eth0", "netns", pod.Name)
	// Proxy ARP at once: there is no other answer to wait for.
	l.node.MustRun("sysctl", "-qw", "net.ipv4.conf."+link+".proxy_arp=1", "net.ipv4.neigh."+link+".proxy_delay=0")
	l.node.MustRun("ip", "link", "set", link, "up")
	pod.MustRun("ip", "addr", "add", v4+"/32", "dev", "eth0")
	pod.MustRun("ip", "-6", "addr", "add", v6+"/128", "dev", "eth0", "nodad")
	pod.MustRun("ip", "link", "set", "eth0", "up")
	pod.MustRun("ip", "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	pod.MustRun("ip", "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	pod.MustRun("ip", "-6", "route", "add", "default", "via", calicoLinkLocal, "dev", "eth0")
	l.node.MustRun("ip", "route", "add", v4+"/32", "dev", link)
	l.node.MustRun("ip", "-6", "route", "add", v6+"/128", "dev", link)
	waitLinkLocal(t, l.node, link)
	return pod
}

// waitLinkLocal waits until link holds the pods' IPv6 gateway: the kernel
// adds it once the veth's carrier is up.
func waitLinkLocal(t *testing.T, ns *netns.NS, link string) {
	t.Helper()
	for range 200 {
		out := ns.MustRun("ip", "-6", "addr", "show", "dev", link)
		if strings.Contains(out, calicoLinkLocal+"/64") && !strings.Contains(out, "tentative") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s has no usable %s after 4s", link, calicoLinkLocal)
}

// serveAs answers, inside ns, every TCP connection and UDP datagram to the
// given addresses with name and a newline, until the test ends. A UDP
// socket is bound to its exact address, so that its replies leave from the
// address the client sent to.
func serveAs(t *testing.T, ns *netns.NS, name string, tcp, udp []string) {
	t.Helper()
	for _, addr := range tcp {
		var ln net.Listener
		if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, name)
				c.Close()
			}
		}()
	}
	for _, addr := range udp {
		var pc net.PacketConn
		if err := ns.Do(func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo([]byte(name+"\n"), from)
			}
		}()
	}
}

// What a probe can come to besides an answer.
const (
	outRefused = "refused"
	outDropped = "dropped"
	// outSilent is a TCP connection accepted and never answered.
	outSilent = "connected, no reply"
)

// Silence longer than these is a drop. A TCP reject can take a second
// (the ICMP error may arrive while connect holds the socket and be seen
// only at the SYN's retransmission); an answer in this lab takes well
// under a millisecond, the proxy's dial to a pod included.
const (
	tcpSilence = 2500 * time.Millisecond
	udpSilence = 1500 * time.Millisecond
)

// probe sends one TCP connection or UDP datagram from ns to addr and says
// what came of it: the name of whoever answered, outRefused, outDropped,
// outSilent, or the error.
func probe(ns *netns.NS, network, addr string) string {
	var (
		got       string
		connected bool
	)
	err := ns.Do(func() error {
		c, err := net.DialTimeout(network, addr, tcpSilence)
		if err != nil {
			return err
		}
		defer c.Close()
		connected = network == "tcp"
		_ = c.SetDeadline(time.Now().Add(udpSilence))
		// Only a datagram is sent: a TCP server answers unasked and
		// closes, and closing with the client's bytes unread resets the
		// connection, which can discard the answer before it is read.
		// A datagram the node sends fails with EPERM when a rule drops
		// or rejects it; which one did shows in the read: the reject's
		// ICMP error, or silence.
		if !connected {
			if _, err := c.Write([]byte("hi\n")); err != nil && !errors.Is(err, syscall.EPERM) {
				return err
			}
		}
		got, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	var ne net.Error
	switch {
	case err == nil:
		return strings.TrimSpace(got)
	case errors.Is(err, syscall.ECONNREFUSED):
		return outRefused
	case errors.As(err, &ne) && ne.Timeout() && connected:
		return outSilent
	case errors.As(err, &ne) && ne.Timeout():
		return outDropped
	}
	return err.Error()
}

// startAgent starts the agent as a whole process inside ns and returns
// what stops it, which the test's end calls too, and what it printed so
// far; its output is logged when the test failed.
func startAgent(t *testing.T, ns *netns.NS, args ...string) (stop func(), output func() string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(self)
	cmd.Env = append(os.Environ(), agentArgsEnv+"="+string(enc), "KUBERNETES_SERVICE_HOST=")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("agent output:\n%s", out.String())
			}
		})
	}
	t.Cleanup(stop)
	return stop, out.String
}

package conntrack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// lab is a client namespace routed through a node namespace that DNATs a
// service IP to one of two pod namespaces.
type lab struct {
	client, node, podA, podB *netns.NS
}

const (
	svcIP      = "10.96.0.10"
	podAIP     = "10.244.1.2"
	podBIP     = "10.244.2.2"
	podPort    = 5353
	clientPort = 40000
)

func newLab(t *testing.T) *lab {
	t.Helper()
	netns.Require(t, "iptables-restore", "conntrack")
	l := &lab{
		client: netns.New(t, "ctcli"),
		node:   netns.New(t, "ctnode"),
		podA:   netns.New(t, "ctpoda"),
		podB:   netns.New(t, "ctpodb"),
	}
	netns.Veth(t, l.client, "c0", []string{"10.100.0.2/24"}, l.node, "n0", []string{"10.100.0.1/24", "10.100.0.3/24"})
	netns.Veth(t, l.node, "na", []string{"10.244.1.1/24"}, l.podA, "pa", []string{podAIP + "/24"})
	netns.Veth(t, l.node, "nb", []string{"10.244.2.1/24"}, l.podB, "pb", []string{podBIP + "/24"})
	l.client.MustRun("ip", "route", "add", "default", "via", "10.100.0.1")
	l.node.MustRun("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	return l
}

// program replaces the node's nat table with DNAT rules, one per line of
// "-A PREROUTING ..." arguments.
func (l *lab) program(t *testing.T, rules ...string) {
	t.Helper()
	input := "*nat\n:PREROUTING ACCEPT [0:0]\n" + strings.Join(rules, "\n") + "\nCOMMIT\n"
	cmd := l.node.Command("iptables-restore")
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s\n%s", err, out, input)
	}
}

func dnat(dst string, port int, to string) string {
	return fmt.Sprintf("-A PREROUTING -d %s/32 -p udp --dport %d -j DNAT --to-destination %s:%d", dst, port, to, podPort)
}

// listen opens a UDP socket inside ns and forwards the sequence number of
// every datagram it receives to the returned channel until the test ends.
func listen(t *testing.T, ns *netns.NS, addr string) <-chan uint32 {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	got := make(chan uint32, 1024)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(got)
				return
			}
			if n >= 4 {
				got <- binary.BigEndian.Uint32(buf)
			}
		}
	}()
	return got
}

// dial opens a UDP socket in the client namespace from a fixed source port,
// so that every datagram belongs to one conntrack entry.
func (l *lab) dial(t *testing.T, srcPort int, dst string) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	if err := l.client.Do(func() (err error) {
		conn, err = net.DialUDP("udp4",
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("10.100.0.2"), uint16(srcPort))),
			net.UDPAddrFromAddrPort(netip.MustParseAddrPort(dst)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// nodeHandle is a netlink handle whose sockets live in the node namespace,
// so the Cleaner can be called from any goroutine.
func (l *lab) nodeHandle(t *testing.T) *netlink.Handle {
	t.Helper()
	nsh, err := vnetns.GetFromName(l.node.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// entries lists the node's UDP conntrack entries with the conntrack tool, as
// an operator would see them, independently of the netlink library.
func (l *lab) entries(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := l.node.Command("conntrack", append([]string{"-L", "-p", "udp"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("conntrack -L: %v", err)
	}
	return strings.FieldsFunc(string(out), func(r rune) bool { return r == '\n' })
}

// waitFor reads ch until it yields a sequence number of at least from, or
// fails the test after a bounded wait.
func waitFor(t *testing.T, ch <-chan uint32, from uint32, what string) uint32 {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case seq, ok := <-ch:
			if !ok {
				t.Fatalf("%s: listener closed", what)
			}
			if seq >= from {
				return seq
			}
		case <-deadline:
			t.Fatalf("%s: no datagram arrived", what)
		}
	}
}

// drain returns the sequence numbers waiting in ch.
func drain(ch <-chan uint32) []uint32 {
	var seqs []uint32
	for {
		select {
		case seq := <-ch:
			seqs = append(seqs, seq)
		default:
			return seqs
		}
	}
}

func TestKernelStaleEndpointMovesFlow(t *testing.T) {
	l := newLab(t)
	atA := listen(t, l.podA, fmt.Sprintf("%s:%d", podAIP, podPort))
	atB := listen(t, l.podB, fmt.Sprintf("%s:%d", podBIP, podPort))
	l.program(t, dnat(svcIP, 53, podAIP))
	conn := l.dial(t, clientPort, svcIP+":53")

	// A one-way stream, as statsd or syslog clients send: a datagram every
	// 50 ms, bounded so the test ends whatever happens.
	stop := make(chan struct{})
	var lastSent atomic.Uint32
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var buf [4]byte
		for seq := uint32(1); seq <= 600; seq++ {
			binary.BigEndian.PutUint32(buf[:], seq)
			_, _ = conn.Write(buf[:])
			lastSent.Store(seq)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer close(stop)
	latest := lastSent.Load

	waitFor(t, atA, 1, "before the switch, at A")
	l.program(t, dnat(svcIP, 53, podBIP))
	switched := latest() + 1
	// Without cleanup the entry outlives the rule: the stream stays on A.
	for i := uint32(0); i < 10; i++ {
		waitFor(t, atA, switched+i, "after the switch, at A")
	}
	if got := drain(atB); len(got) != 0 {
		t.Fatalf("B received %v before any cleanup; the conntrack entry should have kept the flow on A", got)
	}
	if e := l.entries(t, "--orig-dst", svcIP, "--reply-src", podAIP); len(e) != 1 {
		t.Fatalf("conntrack entries through A = %q, want one", e)
	}

	c := New(Config{Netlink: l.nodeHandle(t), Logger: testr.New(t)})
	port := servicemodel.PortName{Port: "dns", Protocol: v1.ProtocolUDP}
	port.Namespace, port.Name = "kube-system", "dns"
	n, err := c.CleanStale(context.Background(), dataplane.StaleFlows{Endpoints: []endpoints.StaleEndpoint{
		{Port: port, Addr: netip.AddrPortFrom(netip.MustParseAddr(podAIP), podPort)},
	}})
	if err != nil || n != 1 {
		t.Fatalf("Clean = %d, %v; want 1 entry deleted", n, err)
	}
	cleaned := latest() + 1

	firstB := waitFor(t, atB, cleaned, "after cleanup, at B")
	for i := uint32(1); i <= 5; i++ {
		waitFor(t, atB, firstB+i, "after cleanup, at B")
	}
	for _, seq := range drain(atA) {
		if seq >= firstB {
			t.Errorf("A received datagram %d after B took over at %d", seq, firstB)
		}
	}
	if e := l.entries(t, "--orig-dst", svcIP, "--reply-src", podBIP); len(e) != 1 {
		t.Errorf("conntrack entries through B = %q, want one", e)
	}
}

func TestKernelStaleFrontends(t *testing.T) {
	l := newLab(t)
	atA := listen(t, l.podA, fmt.Sprintf("%s:%d", podAIP, podPort))
	// A process on the node serving the node-port number on an address the
	// DNAT rule does not cover: its flow is not the service's.
	own := listen(t, l.node, "10.100.0.3:30053")
	l.program(t,
		dnat(svcIP, 53, podAIP),
		dnat("10.96.0.11", 53, podAIP),
		dnat("10.100.0.1", 30053, podAIP),
	)
	flows := []struct {
		srcPort int
		dst     string
		at      <-chan uint32
	}{
		{40001, svcIP + ":53", atA},
		{40002, "10.96.0.11:53", atA},
		{40003, "10.100.0.1:30053", atA},
		{40004, "10.100.0.3:30053", own},
	}
	for i, f := range flows {
		conn := l.dial(t, f.srcPort, f.dst)
		seq := uint32(100 + i)
		var buf [4]byte
		binary.BigEndian.PutUint32(buf[:], seq)
		if _, err := conn.Write(buf[:]); err != nil {
			t.Fatal(err)
		}
		waitFor(t, f.at, seq, f.dst)
	}
	if e := l.entries(t); len(e) != len(flows) {
		t.Fatalf("conntrack entries = %q, want %d", e, len(flows))
	}

	// Clean from a thread inside the node namespace with the default
	// handle, as an agent running on the node does.
	var n int
	err := l.node.Do(func() error {
		var err error
		n, err = New(Config{Logger: testr.New(t)}).CleanStale(context.Background(), dataplane.StaleFlows{Frontends: []servicemodel.Frontend{
			{IP: netip.MustParseAddr(svcIP), Port: 53, Protocol: v1.ProtocolUDP},
			{Port: 30053, Protocol: v1.ProtocolUDP},
			// The same address over SCTP must not take the UDP flow.
			{IP: netip.MustParseAddr("10.96.0.11"), Port: 53, Protocol: v1.ProtocolSCTP},
		}})
		return err
	})
	if err != nil || n != 2 {
		var cerr *Error
		t.Fatalf("Clean = %d, %v (typed: %v); want 2 entries deleted", n, err, errors.As(err, &cerr))
	}
	for _, check := range []struct {
		dst  string
		want int
	}{{svcIP, 0}, {"10.100.0.1", 0}, {"10.96.0.11", 1}, {"10.100.0.3", 1}} {
		if e := l.entries(t, "--orig-dst", check.dst); len(e) != check.want {
			t.Errorf("entries to %s = %q, want %d", check.dst, e, check.want)
		}
	}
}

// TestKernelNodePortBeforeService: clients that sent to a node port before
// its service existed (one refused by the node, one answered by a process on
// the node listening on that number) keep their un-NATed entries once the
// service's DNAT rule appears; reconciling the service's port moves both to
// the endpoint without either changing its source port.
func TestKernelNodePortBeforeService(t *testing.T) {
	l := newLab(t)
	atA := listen(t, l.podA, fmt.Sprintf("%s:%d", podAIP, podPort))
	own := listen(t, l.node, "10.100.0.3:30053")
	// The node already proxies another service, so conntrack tracks its
	// traffic (a namespace without NAT rules tracks nothing).
	other := dnat(svcIP, 53, podAIP)
	l.program(t, other)
	refused := l.dial(t, 40011, "10.100.0.1:30053")
	answered := l.dial(t, 40012, "10.100.0.3:30053")
	var buf [4]byte
	send := func(conn *net.UDPConn, seq uint32) {
		t.Helper()
		binary.BigEndian.PutUint32(buf[:], seq)
		if _, err := conn.Write(buf[:]); err != nil && !errors.Is(err, unix.ECONNREFUSED) {
			t.Fatal(err)
		}
	}
	// expectRefused sends seq and waits, bounded, for the node's port
	// unreachable: the datagram was not DNATed.
	expectRefused := func(seq uint32, what string) {
		t.Helper()
		send(refused, seq)
		if err := refused.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := refused.Read(make([]byte, 64)); !errors.Is(err, unix.ECONNREFUSED) {
			t.Fatalf("%s: read = %v, want connection refused", what, err)
		}
	}

	expectRefused(1, "before the service")
	send(answered, 1)
	waitFor(t, own, 1, "before the service, at the node's own listener")

	// The service appears: node port 30053 on every local address to A,
	// as kube-proxy's KUBE-NODEPORTS matches it.
	l.program(t, other, fmt.Sprintf("-A PREROUTING -m addrtype --dst-type LOCAL -p udp --dport 30053 -j DNAT --to-destination %s:%d", podAIP, podPort))
	expectRefused(2, "after the service appeared, before cleanup")
	send(answered, 2)
	waitFor(t, own, 2, "after the service appeared, at the node's own listener")
	for _, dst := range []string{"10.100.0.1", "10.100.0.3"} {
		if e := l.entries(t, "--orig-dst", dst, "--orig-port-dst", "30053", "--reply-src", dst); len(e) != 1 {
			t.Fatalf("un-NATed entries to %s:30053 = %q, want one", dst, e)
		}
	}

	pn := servicemodel.PortName{Port: "dns", Protocol: v1.ProtocolUDP}
	pn.Namespace, pn.Name = "kube-system", "dns"
	st := &dataplane.State{
		Family: v1.IPv4Protocol,
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: pn, ClusterIP: netip.MustParseAddr(svcIP), Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{pn: {{
			Addr:         netip.AddrPortFrom(netip.MustParseAddr(podAIP), podPort),
			EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true},
		}}}),
	}
	c := New(Config{Netlink: l.nodeHandle(t), Logger: testr.New(t)})
	n, err := c.CleanStale(context.Background(), dataplane.StaleFlows{Family: v1.IPv4Protocol, Ports: []servicemodel.PortName{pn}, State: st})
	if err != nil || n != 2 {
		t.Fatalf("CleanStale = %d, %v; want 2 entries deleted", n, err)
	}

	send(refused, 3)
	waitFor(t, atA, 3, "refused client after cleanup, at A")
	send(answered, 4)
	waitFor(t, atA, 4, "answered client after cleanup, at A")
	for _, dst := range []string{"10.100.0.1", "10.100.0.3"} {
		if e := l.entries(t, "--orig-dst", dst, "--orig-port-dst", "30053", "--reply-src", podAIP); len(e) != 1 {
			t.Errorf("entries from %s:30053 through A = %q, want one", dst, e)
		}
	}
	for _, port := range []string{"40011", "40012"} {
		if e := l.entries(t, "--orig-port-src", port); len(e) != 1 {
			t.Errorf("entries from source port %s = %q, want one: the client kept its port", port, e)
		}
	}
}

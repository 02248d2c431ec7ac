package userspace

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/servicemodel"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

func TestTCPRoundRobinAndHalfClose(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	bk.serve("10.0.0.2:8080")
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1", "10.0.0.2"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)

	var got []string
	for range 4 {
		got = append(got, endpointOf(t, a))
	}
	want := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.1:8080", "10.0.0.2:8080"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints reached (-want +got):\n%s", diff)
	}

	// The client's half-close reaches the endpoint, whose answer and
	// close come back.
	_, conn := greet(t, a)
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(conn)
	if err != nil || string(rest) != "hello" {
		t.Errorf("after half-close read %q, %v; want %q, EOF", rest, err, "hello")
	}
}

func TestTCPNoEndpointsRefused(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	port := freePort(t)
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{Listen: func(Destination) (netip.AddrPort, bool) { return port, true }})
	mustSync(t, d, c.build())
	if ep := endpointOf(t, port); ep != "10.0.0.1:8080" {
		t.Fatalf("reached %s", ep)
	}

	c.endpoints("web", nil, "http/TCP/8080")
	mustSync(t, d, c.build())
	_, err := net.DialTimeout("tcp", port.String(), 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial without endpoints: %v, want connection refused", err)
	}
}

func TestTCPDialFailover(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	bk.serve("10.0.0.2:8080")
	bk.fail("10.0.0.1:8080", true)
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1", "10.0.0.2"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)
	for range 4 {
		if ep := endpointOf(t, a); ep != "10.0.0.2:8080" {
			t.Errorf("reached %s, want the live 10.0.0.2:8080", ep)
		}
	}
}

func TestAffinityPinsAndExpires(t *testing.T) {
	name := servicemodel.PortName{Port: "http", Protocol: v1.ProtocolTCP}
	sp := &servicemodel.ServicePort{Name: name, SessionAffinity: affinity.SessionAffinity{ClientIP: true, Timeout: time.Minute}}
	candidates := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:80"), netip.MustParseAddrPort("10.0.0.2:80")}
	v := &portView{sp: sp, cluster: candidates}
	m, err := newMetrics(nil, "test", v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	ps := newPortState(name, RoundRobin, 10, m.port(name))
	alice, bob := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	type step struct {
		client netip.Addr
		at     time.Duration
		want   string
	}
	steps := []step{
		{alice, 0, "10.0.0.1:80"},
		// Each use refreshes the pin.
		{alice, 30 * time.Second, "10.0.0.1:80"},
		{alice, 89 * time.Second, "10.0.0.1:80"},
		// A minute after alice's last use her pin is gone: round-robin
		// moves her on, and she is pinned anew.
		{alice, 149 * time.Second, "10.0.0.2:80"},
		{alice, 150 * time.Second, "10.0.0.2:80"},
		{bob, 151 * time.Second, "10.0.0.1:80"},
		{alice, 152 * time.Second, "10.0.0.2:80"},
	}
	var got, want []string
	for _, s := range steps {
		ep, ok := ps.pick(v, s.client, candidates, nil, t0.Add(s.at))
		if !ok {
			t.Fatalf("pick for %s found nothing", s.client)
		}
		got, want = append(got, ep.String()), append(want, s.want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("picks (-want +got):\n%s", diff)
	}

	// An endpoint that leaves the candidates takes its pins along.
	ps.retarget(&portView{sp: sp, cluster: candidates[:1]}, time.Second)
	if ep, _ := ps.pick(v, alice, candidates[:1], nil, t0.Add(143*time.Second)); ep != candidates[0] {
		t.Errorf("after its endpoint left, alice reached %s", ep)
	}
}

func TestAffinityThroughForwarder(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	bk.serve("10.0.0.2:8080")
	c := newCluster()
	c.service("web", "10.96.0.10", func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	}, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1", "10.0.0.2"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)
	first := endpointOf(t, a)
	for range 5 {
		if ep := endpointOf(t, a); ep != first {
			t.Fatalf("a pinned client reached %s after %s", ep, first)
		}
	}
}

func TestDrainRemovedEndpoint(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	bk.serve("10.0.0.2:8080")
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{DrainTimeout: 200 * time.Millisecond})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)
	ep, open := greet(t, a)
	defer open.Close()
	if ep != "10.0.0.1:8080" {
		t.Fatalf("reached %s", ep)
	}

	c.endpoints("web", []string{"10.0.0.2"}, "http/TCP/8080")
	mustSync(t, d, c.build())
	if ep := endpointOf(t, a); ep != "10.0.0.2:8080" {
		t.Errorf("a new connection reached %s, want 10.0.0.2:8080", ep)
	}
	// The open connection still works until the drain timeout ends it.
	if _, err := open.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = open.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	if _, err := io.ReadFull(open, buf); err != nil {
		t.Fatalf("the draining connection: %v", err)
	}
	if _, err := io.ReadAll(open); err != nil {
		t.Errorf("the drained connection ended with %v, want EOF", err)
	}
}

func TestTCPIdleTimeout(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{TCPIdleTimeout: 200 * time.Millisecond})
	mustSync(t, d, c.build())
	_, idle := greet(t, listener(t, d, "10.96.0.10:80", v1.ProtocolTCP))
	defer idle.Close()
	// Nothing moves: the proxy closes the connection, both ways.
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(idle); err != nil {
		t.Errorf("the idle connection ended with %v, want EOF", err)
	}
	eventually(t, "the idle connection is forgotten", func() bool { return active(d) == 0 })
}

// TestCapSendBuffer checks the send buffer a proxied socket gets from its
// round-trip time: the kernel doubles what it is given, and keeps
// autotuning a socket whose round trip asks for the autotuned maximum.
func TestCapSendBuffer(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	accepted, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	got, want := map[string]int{}, map[string]int{}
	for name, c := range map[string]*net.TCPConn{"dialed": dialed, "accepted": accepted} {
		rtt, before := sockInfo(t, c)
		want[name] = before
		if size := max(minSendBuffer, rtt*sendBufferRate); rtt > 0 && size < sendBufferAutotune {
			want[name] = 2 * size
		}
		capSendBuffer(c)
		_, got[name] = sockInfo(t, c)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SO_SNDBUF (-want +got):\n%s", diff)
	}
	// Not a socket: nothing to cap.
	p, q := net.Pipe()
	defer q.Close()
	capSendBuffer(p)
	p.Close()
}

// sockInfo returns c's smoothed round-trip time in µs and its SO_SNDBUF.
func sockInfo(t *testing.T, c *net.TCPConn) (rtt, sndbuf int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr, berr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		sndbuf, berr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(ierr, berr); err != nil {
		t.Fatal(err)
	}
	return int(info.Rtt), sndbuf
}

func TestMaxConnections(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{MaxConnections: 1})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)
	_, open := greet(t, a)
	// The reset may come before or after connect returns.
	over, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
	if err == nil {
		_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = over.Read(make([]byte, 1))
		over.Close()
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection past the bound: %v, want a reset", err)
	}
	open.Close()
	eventually(t, "the slot is free again", func() bool {
		conn, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
		if err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		return err == nil
	})
}

// freePort returns a loopback address nobody listens on.
func freePort(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

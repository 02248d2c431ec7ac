package userspace

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ask sends msg from c and returns the answer's endpoint.
func ask(t testing.TB, c *net.UDPConn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer to %q: %v", msg, err)
	}
	ep, echoed, _ := strings.Cut(string(buf[:n]), " ")
	if echoed != msg {
		t.Fatalf("answer %q to %q", buf[:n], msg)
	}
	return ep
}

func TestUDPSessions(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:53")
	bk.serve("10.0.0.2:53")
	c := newCluster()
	c.service("dns", "10.96.0.10", nil, "dns/UDP/53")
	c.endpoints("dns", []string{"10.0.0.1", "10.0.0.2"}, "dns/UDP/53")
	// Long enough that a busy machine's late answer finds its session,
	// short enough for eventually below.
	d := newDataplane(t, bk, Config{UDPIdleTimeout: time.Second})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:53", v1.ProtocolUDP)

	dial := func() *net.UDPConn {
		conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(a))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	alice, bob := dial(), dial()
	first := ask(t, alice, "a1")
	// One client, one session: its datagrams stay with its endpoint,
	// while another client's session takes the next one.
	for _, m := range []string{"a2", "a3"} {
		if ep := ask(t, alice, m); ep != first {
			t.Errorf("alice's %s reached %s, her session's endpoint is %s", m, ep, first)
		}
	}
	if ep := ask(t, bob, "b1"); ep == first {
		t.Errorf("bob's session reached %s too; round-robin should move on", ep)
	}

	d.mu.Lock()
	f := d.fwds[destKey{addr: netip.MustParseAddr("10.96.0.10"), port: 53, proto: v1.ProtocolUDP}]
	d.mu.Unlock()
	sessions := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.sessions)
	}
	if n := sessions(); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}
	eventually(t, "idle sessions end", func() bool { return sessions() == 0 })
	// A new session after the timeout.
	ask(t, alice, "a4")
	if n := sessions(); n != 1 {
		t.Errorf("%d sessions after alice spoke again, want 1", n)
	}

	// An endpoint removed takes its sessions along at once, and the
	// next datagram opens a session to a live one.
	c.endpoints("dns", []string{"10.0.0.2"}, "dns/UDP/53")
	mustSync(t, d, c.build())
	for _, m := range []string{"a5", "a6"} {
		if ep := ask(t, alice, m); ep != "10.0.0.2:53" {
			t.Errorf("after the endpoint change alice's %s reached %s", m, ep)
		}
	}
}

// TestUDPRepliesFromTheAddressReached: a forwarder listening on every
// address answers from the address the client sent to, which a connected
// client socket (and conntrack, behind REDIRECT) requires.
func TestUDPRepliesFromTheAddressReached(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:53")
	c := newCluster()
	c.service("dns", "10.96.0.10", nil, "dns/UDP/53")
	c.endpoints("dns", []string{"10.0.0.1"}, "dns/UDP/53")
	d := newDataplane(t, bk, Config{Listen: func(Destination) (netip.AddrPort, bool) {
		return netip.MustParseAddrPort("0.0.0.0:0"), true
	}})
	mustSync(t, d, c.build())
	port := listener(t, d, "10.96.0.10:53", v1.ProtocolUDP).Port()
	// 127.0.0.2 is local but not what the route back to 127.0.0.1
	// prefers as source.
	conn, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")),
		net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ep := ask(t, conn, "q"); ep != "10.0.0.1:53" {
		t.Errorf("reached %s", ep)
	}
}

package kerneltest

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// Timeouts of one connection. A packet the dataplane drops shows as
// silence, so these are how long a connection may take to be answered
// before it counts as dropped; in a lab of veth pairs an answer takes well
// under a millisecond. A TCP reject can take a second: an ICMP error that
// arrives while connect(2) still holds the socket lock (likely, on veth) is
// only noted, and the connection is refused when the retransmitted SYN
// draws the error again, after the initial RTO of one second.
const (
	silentTCP   = 1500 * time.Millisecond
	silentUDP   = 700 * time.Millisecond
	answerAfter = 2 * time.Second
)

type listenKey struct {
	ns      string
	network string
	addr    netip.AddrPort
}

// listen starts a responder for network at addr inside h, once. Bound to
// the exact address, a UDP reply leaves from the address the request was
// sent to, which is what conntrack and the client's connected socket
// expect.
func (l *lab) listen(h *host, network string, addr netip.AddrPort) error {
	key := listenKey{h.ns.Name, network, addr}
	if l.serving[key] {
		return nil
	}
	var (
		ln net.Listener
		pc net.PacketConn
	)
	if err := h.ns.Do(func() (err error) {
		if network == "tcp" {
			ln, err = net.Listen("tcp", addr.String())
		} else {
			pc, err = net.ListenPacket("udp", addr.String())
		}
		return err
	}); err != nil {
		return fmt.Errorf("listen on %s/%s in %s: %w", addr, network, h.ns.Name, err)
	}
	l.serving[key] = true
	if ln != nil {
		l.t.Cleanup(func() { ln.Close() })
		go answerTCP(ln, addr)
	} else {
		l.t.Cleanup(func() { pc.Close() })
		go answerUDP(pc, addr)
	}
	return nil
}

// answerTCP tells every connection the address it reached and the client
// address it came from, until ln is closed.
func answerTCP(ln net.Listener, reached netip.AddrPort) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		_ = c.SetDeadline(time.Now().Add(answerAfter))
		fmt.Fprintf(c, "%s %s\n", reached, client)
		c.Close()
	}
}

// answerUDP is answerTCP for datagrams.
func answerUDP(pc net.PacketConn, reached netip.AddrPort) {
	buf := make([]byte, 64)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		client := from.(*net.UDPAddr).AddrPort().Addr().Unmap()
		_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s %s\n", reached, client)), from)
	}
}

type outcome int

const (
	answered outcome = iota
	refused
	silent
)

// answer is what one connection showed.
type answer struct {
	outcome outcome
	// reached and client are set when answered: the address the packet
	// arrived at and the source it arrived from.
	reached netip.AddrPort
	client  netip.Addr
}

func (a answer) String() string {
	switch a.outcome {
	case refused:
		return "refused"
	case silent:
		return "silence"
	}
	return fmt.Sprintf("an answer from %s seeing %s", a.reached, a.client)
}

// connect makes one connection from src (inside ns) to dst and reports
// what came of it. An error is something that is none of the outcomes (an
// unreachable network, a malformed answer): the lab is broken, not the
// dataplane's verdict. With proxy, a TCP connection that is accepted and
// then reset or never answered is refused or silent.
//
// ports gives the TCP source ports to try, each once: a port the client
// still holds is skipped.
func connect(ns *netns.NS, network string, src netip.Addr, dst netip.AddrPort, proxy bool, ports func() uint16) (answer, error) {
	var a answer
	err := ns.Do(func() error {
		c, err := dial(network, src, dst, ports)
		if err != nil {
			return classify(&a, err)
		}
		defer c.Close()
		wait := answerAfter
		if network == "udp" {
			// A dropped datagram is the only sign of a Drop, and a UDP
			// Dial sends nothing: the wait for the answer is the test.
			wait = silentUDP
			if _, err := c.Write([]byte("hello")); err != nil {
				return classify(&a, err)
			}
		}
		_ = c.SetDeadline(time.Now().Add(wait))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			if network == "tcp" && proxy && errors.Is(err, syscall.ECONNRESET) {
				a.outcome = refused
				return nil
			}
			if network == "tcp" && !proxy {
				return fmt.Errorf("connected to %s but no answer: %w", dst, err)
			}
			return classify(&a, err)
		}
		return parseAnswer(&a, line)
	})
	if err != nil {
		return answer{}, fmt.Errorf("%s %s -> %s in %s: %w", network, src, dst, ns.Name, err)
	}
	return a, nil
}

// maxPortTries bounds the source ports one TCP connection tries.
const maxPortTries = 16

// dial connects from src to dst: over UDP from a port the kernel picks,
// over TCP from the first of ports the client can bind.
func dial(network string, src netip.Addr, dst netip.AddrPort, ports func() uint16) (net.Conn, error) {
	d := net.Dialer{Timeout: silentTCP}
	if network == "udp" {
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		return d.Dial(network, dst.String())
	}
	var err error
	for range maxPortTries {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, ports()))
		var c net.Conn
		if c, err = d.Dial(network, dst.String()); !errors.Is(err, syscall.EADDRINUSE) {
			return c, err
		}
	}
	return nil, err
}

// sourcePorts returns the lab's TCP source ports, in turn from a random
// start through the range a client's kernel picks from. A node keeps
// state for a closed connection (TIME_WAIT) that a client's kernel does
// not know of: a userspace proxy that closed first, say, holds the
// client's address and port for a minute. A new connection that happens
// to reuse them meets that state rather than the dataplane's rules (a
// packet of a local socket is not forwarded), so no probe of a lab reuses
// the port of another.
func sourcePorts() func() uint16 {
	const first, last = 20000, 60999
	var next atomic.Uint32
	next.Store(first + rand.Uint32N(last-first))
	return func() uint16 {
		return uint16(first + (next.Add(1)-first)%(last-first+1))
	}
}

// classify turns a dial or read error into an outcome, or returns it.
func classify(a *answer, err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		a.outcome = refused
	case errors.As(err, &ne) && ne.Timeout():
		a.outcome = silent
	default:
		return err
	}
	return nil
}

func parseAnswer(a *answer, line string) error {
	f := strings.Fields(line)
	if len(f) != 2 {
		return fmt.Errorf("malformed answer %q", line)
	}
	reached, err1 := netip.ParseAddrPort(f[0])
	client, err2 := netip.ParseAddr(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("malformed answer %q: %w", line, err)
	}
	a.outcome, a.reached, a.client = answered, reached, client
	return nil
}

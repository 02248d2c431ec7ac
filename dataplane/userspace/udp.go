package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxykit/proxykit/dataplane"
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 64 << 10

// serveUDP reads datagrams from clients until pc, one of f's sockets, is
// closed, forwarding each through its client's session, whose replies
// leave from pc.
func (d *Dataplane) serveUDP(ctx context.Context, f *forwarder, pc *net.UDPConn) {
	defer d.wg.Done()
	buf := make([]byte, maxDatagram)
	var oob []byte
	if pc.LocalAddr().(*net.UDPAddr).IP.IsUnspecified() {
		if err := askPktinfo(pc); err != nil {
			d.log.Error(err, "Cannot learn which address datagrams reach; replies may leave from another", "frontend", f.fe)
		} else {
			oob = make([]byte, 128)
		}
	}
	for {
		n, oobn, _, from, err := pc.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		local, reply := pktinfo(oob[:oobn])
		s := d.session(ctx, f, pc, from, local, reply)
		if s == nil {
			continue
		}
		if _, err := s.backend.Write(buf[:n]); err == nil {
			s.ps.m.toEndpoint.Add(float64(n))
			s.active.Store(time.Now().UnixNano())
		}
	}
}

// session returns the session of client on f, opening one if there is
// none; nil when the datagram is not forwarded. local is the address the
// datagram reached, when known; pc and reply are the socket and the
// control message that send replies from where the client sent to.
func (d *Dataplane) session(ctx context.Context, f *forwarder, pc *net.UDPConn, client netip.AddrPort, local netip.Addr, reply []byte) *udpFlow {
	f.mu.Lock()
	s := f.sessions[client]
	f.mu.Unlock()
	if s != nil {
		return s
	}
	dec := d.decide(f, netip.AddrPortFrom(local, f.key.port), client.Addr())
	if dec.action != dataplane.DNAT {
		if dec.view != nil {
			// A bound socket cannot answer with an ICMP error for one
			// client: rejected datagrams are dropped.
			dec.view.state.m.dropped.Inc()
		}
		return nil
	}
	ps := dec.view.state
	s = &udpFlow{ps: ps, f: f, pc: pc, client: client, oob: reply, idle: d.cfg.UDPIdleTimeout}
	if !ps.admit(s) {
		ps.m.overLimit.Inc()
		return nil
	}
	var tried []netip.AddrPort
	for range min(maxDialAttempts, len(dec.candidates)) {
		ep, ok := ps.pick(dec.view, client.Addr(), dec.candidates, tried, time.Now())
		if !ok {
			break
		}
		tried = append(tried, ep)
		dctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
		c, err := d.dialer.DialContext(dctx, "udp", ep.String())
		cancel()
		if err == nil {
			s.backend, s.ep = c, ep
			break
		}
		ps.m.dialFailures.Inc()
		ps.unpin(client.Addr(), ep)
	}
	if s.backend == nil {
		ps.release(s)
		return nil
	}
	s.active.Store(time.Now().UnixNano())
	f.mu.Lock()
	if f.sessions == nil {
		// The forwarder was unbound meanwhile.
		f.mu.Unlock()
		s.backend.Close()
		ps.release(s)
		return nil
	}
	f.sessions[client] = s
	f.mu.Unlock()
	if ps.stale(s.ep) {
		s.close()
		ps.release(s)
		return nil
	}
	ps.m.accepted.Inc()
	d.wg.Add(1)
	go d.replies(s)
	return s
}

// udpFlow is one client's session: a socket connected to its endpoint.
type udpFlow struct {
	ps     *portState
	f      *forwarder
	pc     *net.UDPConn
	client netip.AddrPort
	// oob sends replies from the address the client reached; nil when
	// the socket's own address is that.
	oob     []byte
	backend net.Conn
	ep      netip.AddrPort
	idle    time.Duration
	// active is the UnixNano of the last datagram either way.
	active atomic.Int64
	once   sync.Once
}

func (s *udpFlow) endpoint() netip.AddrPort { return s.ep }

// drain ends the session at once: kube-proxy clears the conntrack entries
// of a UDP endpoint that goes, so that the client's next datagram picks a
// live one.
func (s *udpFlow) drain(time.Duration) { s.close() }

func (s *udpFlow) close() {
	s.once.Do(func() {
		s.f.mu.Lock()
		if s.f.sessions[s.client] == s {
			delete(s.f.sessions, s.client)
		}
		s.f.mu.Unlock()
		s.backend.Close()
	})
}

// replies forwards the endpoint's datagrams to the client until the
// session is idle for UDPIdleTimeout or closed.
func (d *Dataplane) replies(s *udpFlow) {
	defer d.wg.Done()
	defer s.ps.release(s)
	defer s.close()
	buf := make([]byte, maxDatagram)
	for {
		last := time.Unix(0, s.active.Load())
		if time.Since(last) >= s.idle {
			return
		}
		_ = s.backend.SetReadDeadline(last.Add(s.idle))
		n, err := s.backend.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			// Closed, or an ICMP error from the endpoint: the session
			// is over, the next datagram opens another.
			return
		}
		if _, _, err := s.pc.WriteMsgUDPAddrPort(buf[:n], s.oob, s.client); err == nil {
			s.ps.m.toClient.Add(float64(n))
			s.active.Store(time.Now().UnixNano())
		}
	}
}

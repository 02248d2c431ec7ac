package userspace

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"golang.org/x/sys/unix"
)

// maxDialAttempts is how many endpoints one connection tries.
const maxDialAttempts = 3

// reset closes c with a TCP reset, as a REJECT rule answers.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	c.Close()
}

// handleTCP routes one accepted connection and forwards it.
func (d *Dataplane) handleTCP(ctx context.Context, f *forwarder, c *net.TCPConn) {
	defer d.wg.Done()
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	dec := d.decide(f, local, src)
	switch dec.action {
	case dataplane.DNAT:
	case dataplane.Drop:
		// The handshake is done: a userspace proxy cannot leave a SYN
		// unanswered for some clients only. The nearest to a drop is a
		// connection that never answers.
		ps := dec.view.state
		ps.m.dropped.Inc()
		fl := &tcpFlow{ps: ps, client: c}
		if !ps.admit(fl) {
			ps.m.overLimit.Inc()
			reset(c)
			return
		}
		defer ps.release(fl)
		fl.hold(d.cfg.TCPIdleTimeout)
		return
	default:
		if dec.view != nil {
			dec.view.state.m.reset.Inc()
		}
		reset(c)
		return
	}
	ps := dec.view.state
	fl := &tcpFlow{ps: ps, client: c}
	if !ps.admit(fl) {
		ps.m.overLimit.Inc()
		reset(c)
		return
	}
	defer ps.release(fl)
	backend, ep, ok := d.dialTCP(ctx, dec, src)
	if !ok {
		reset(c)
		return
	}
	ps.m.accepted.Inc()
	fl.start(backend, ep)
	if ps.stale(ep) {
		fl.drain(d.cfg.DrainTimeout)
	}
	fl.run(d.cfg.TCPIdleTimeout)
}

// decide routes a connection from src that reached local through f.
func (d *Dataplane) decide(f *forwarder, local netip.AddrPort, src netip.Addr) decision {
	iface := ""
	if ifaces := d.ifaces.Load(); ifaces != nil {
		iface = ifaces.of(src)
	}
	d.routesMu.RLock()
	defer d.routesMu.RUnlock()
	return d.routes.route(f.dst(local), f.key.proto, d.routes.clientOf(src, dataplane.FromOutside, iface))
}

// dialTCP connects to one of dec's candidates, trying others on failure.
func (d *Dataplane) dialTCP(ctx context.Context, dec decision, src netip.Addr) (net.Conn, netip.AddrPort, bool) {
	ps := dec.view.state
	var tried []netip.AddrPort
	for range min(maxDialAttempts, len(dec.candidates)) {
		ep, ok := ps.pick(dec.view, src, dec.candidates, tried, time.Now())
		if !ok {
			break
		}
		tried = append(tried, ep)
		dctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
		c, err := d.dialer.DialContext(dctx, "tcp", ep.String())
		cancel()
		if err == nil {
			return c, ep, true
		}
		ps.m.dialFailures.Inc()
		ps.unpin(src, ep)
		d.log.V(4).Info("Cannot connect to an endpoint", "service", ps.name, "endpoint", ep, "err", err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, false
}

// tcpFlow is one proxied TCP connection.
type tcpFlow struct {
	ps     *portState
	client *net.TCPConn

	// Set by start, before the flow is visible to drain.
	mu      sync.Mutex
	backend net.Conn
	ep      netip.AddrPort
	drainT  *time.Timer
	closed  bool
	// active is the UnixNano of the last round that moved bytes.
	active atomic.Int64
}

func (fl *tcpFlow) start(backend net.Conn, ep netip.AddrPort) {
	fl.mu.Lock()
	fl.backend, fl.ep = backend, ep
	closed := fl.closed
	fl.mu.Unlock()
	if closed {
		backend.Close()
	}
	fl.active.Store(time.Now().UnixNano())
}

func (fl *tcpFlow) endpoint() netip.AddrPort {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.ep
}

func (fl *tcpFlow) drain(d time.Duration) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.drainT == nil && !fl.closed {
		fl.drainT = time.AfterFunc(d, fl.close)
	}
}

func (fl *tcpFlow) close() {
	fl.mu.Lock()
	if fl.closed {
		fl.mu.Unlock()
		return
	}
	fl.closed = true
	if fl.drainT != nil {
		fl.drainT.Stop()
	}
	backend := fl.backend
	fl.mu.Unlock()
	fl.client.Close()
	if backend != nil {
		backend.Close()
	}
}

// hold reads and discards what the client sends until it closes, or
// sends nothing for idle.
func (fl *tcpFlow) hold(idle time.Duration) {
	defer fl.close()
	for {
		if idle > 0 {
			_ = fl.client.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := io.Copy(io.Discard, fl.client)
		if err == nil || n == 0 {
			return
		}
	}
}

// run copies both ways until both are done, then closes the flow.
func (fl *tcpFlow) run(idle time.Duration) {
	capSendBuffer(fl.client)
	capSendBuffer(fl.backend)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fl.pipe(fl.client, fl.backend, fl.ps.m.toClient, idle)
	}()
	fl.pipe(fl.backend, fl.client, fl.ps.m.toEndpoint, idle)
	wg.Wait()
	fl.close()
}

// burst bounds one splice: io.Copy between two *net.TCPConn splices
// through a pipe it holds until the copy returns, so each copy is cut off
// this long after it starts and the next waits for data without a pipe.
// An idle connection then holds two sockets and no pipe.
const burst = 100 * time.Millisecond

// pipe copies src to dst and half-closes dst at src's end. Copying
// between two *net.TCPConn splices in the kernel (io.Copy finds
// TCPConn.ReadFrom). Between bursts it waits for src to be readable, for
// at most a quarter of idle at a time; the connection is closed when no
// burst of either direction moved anything for idle.
func (fl *tcpFlow) pipe(dst, src net.Conn, bytes prometheus.Counter, idle time.Duration) {
	for {
		if idle > 0 {
			_ = src.SetReadDeadline(time.Now().Add(idle / 4))
		}
		err := waitReadable(src)
		if err == nil {
			_ = src.SetReadDeadline(time.Now().Add(burst))
			var n int64
			n, err = io.Copy(dst, src)
			if n > 0 {
				bytes.Add(float64(n))
				fl.active.Store(time.Now().UnixNano())
			}
			if err == nil {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				} else {
					fl.close()
				}
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			// A reset, or the flow closed by the other direction, a
			// drain or Cleanup: nothing more will move either way.
			fl.close()
			return
		}
		if time.Since(time.Unix(0, fl.active.Load())) >= idle {
			fl.close()
			return
		}
	}
}

// The send buffer of a proxied socket is sized by its round-trip time:
// sendBufferRate bytes per microsecond of the handshake's, at least
// minSendBuffer; a socket that would need sendBufferAutotune or more keeps
// the kernel's autotuning. The autotuning grows with the congestion
// window, which on a loss-free path (loopback, veths to the node's own
// pods) grows without bound: a splice, which copies nothing, then queues
// megabytes ahead of a slower reader, and the path spends more CPU per
// byte. Sized, a proxied transfer took a sixth less CPU per
// MiB between namespaces and two fifths less on loopback (package doc,
// "Measured"); at 4 GB/s, more than one connection's splices move here,
// the size does not limit a path's throughput.
const (
	sendBufferRate     = 4096 // bytes per µs: 4 GB/s
	minSendBuffer      = 128 << 10
	sendBufferAutotune = 4 << 20 // the kernel's default tcp_wmem maximum
)

// capSendBuffer caps c's send buffer at what its round-trip time needs,
// as the constants above say. A socket without a round-trip sample yet
// (its SYN was lost, say) is left to the kernel.
func capSendBuffer(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || info.Rtt == 0 {
			return
		}
		if size := max(minSendBuffer, int(info.Rtt)*sendBufferRate); size < sendBufferAutotune {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, size)
		}
	})
}

// waitReadable returns when c has data or its end to read, or its read
// deadline passes; it reads nothing.
func waitReadable(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN
	})
	return err
}

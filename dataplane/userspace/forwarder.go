package userspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

// forwarder serves one destination: a listening socket and, for UDP, the
// sessions behind it. The socket is held only while some claimant of the
// destination has endpoints, so that without any the kernel refuses
// connections (a TCP reset, an ICMP port unreachable) as kube-proxy's
// REJECT does.
type forwarder struct {
	key destKey
	fe  Destination
	// listen is where the socket listens; served is false when
	// Config.Listen left the frontend out.
	listen netip.AddrPort
	served bool
	// localDst: the destination of a node port connection is the local
	// address it reached.
	localDst bool

	// Guarded by Dataplane.mu.
	want    bool
	bindErr error
	tcp     *net.TCPListener
	udp     *net.UDPConn
	// bound is the address the socket got (port 0 resolved).
	bound netip.AddrPort

	// ingressTCP and ingressUDP, in redirect mode for a service
	// address, are the transparent socket bound to the frontend's own
	// address and port, which serves the traffic entering the node (see
	// ingress); the socket above serves the node's own, redirected to it.
	ingressTCP *net.TCPListener
	ingressUDP *net.UDPConn

	// sessions are the UDP sessions by client.
	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpFlow
}

func (f *forwarder) boundAddr() (netip.AddrPort, bool) {
	return f.bound, f.tcp != nil || f.udp != nil
}

// dst is the destination a connection accepted at local reached: the
// frontend's, or for a node port forwarder listening on every address,
// the local address itself; an invalid address stands for a node address
// serving node ports.
func (f *forwarder) dst(local netip.AddrPort) netip.AddrPort {
	if !f.key.nodePort() {
		return netip.AddrPortFrom(f.key.addr, f.key.port)
	}
	if f.localDst && local.Addr().IsValid() && !local.Addr().IsUnspecified() {
		return netip.AddrPortFrom(local.Addr().Unmap(), f.key.port)
	}
	return netip.AddrPortFrom(netip.Addr{}, f.key.port)
}

// BindError reports frontends whose forwarders could not listen. The rest
// of the Sync was applied; these are retried every
// Config.BindRetryPeriod and at every Sync.
type BindError struct {
	// Failed maps each frontend to its error.
	Failed map[Destination]error
}

// Error names the first failed frontend by address.
func (e *BindError) Error() string {
	if len(e.Failed) == 0 {
		return "userspace: cannot listen"
	}
	first := slices.MinFunc(slices.Collect(maps.Keys(e.Failed)), func(a, b Destination) int {
		return cmp.Or(a.Addr.Compare(b.Addr), strings.Compare(string(a.Protocol), string(b.Protocol)))
	})
	if len(e.Failed) == 1 {
		return fmt.Sprintf("userspace: cannot listen for %s: %v", first, e.Failed[first])
	}
	return fmt.Sprintf("userspace: cannot listen for %d frontends, %s among them: %v", len(e.Failed), first, e.Failed[first])
}

// errSCTP is why SCTP frontends are never served.
var errSCTP = errors.New("SCTP is not served: Go's net package has no SCTP sockets")

// bind opens f's sockets and starts serving them. In redirect mode the
// sockets are transparent (IP_TRANSPARENT), so that TPROXY may hand them
// packets for addresses that are not the node's, and of the Dataplane's
// family only.
func (d *Dataplane) bind(ctx context.Context, f *forwarder) error {
	var lc net.ListenConfig
	network := strings.ToLower(string(f.key.proto))
	if d.redir != nil {
		lc.Control = transparent(d.cfg.Family)
		if d.cfg.Family == v1.IPv6Protocol {
			network += "6"
		} else {
			network += "4"
		}
	}
	switch f.key.proto {
	case v1.ProtocolSCTP:
		return errSCTP
	case v1.ProtocolUDP:
		f.mu.Lock()
		f.sessions = map[netip.AddrPort]*udpFlow{}
		f.mu.Unlock()
	}
	if d.redir != nil && !f.key.nodePort() {
		// The ingress socket, bound transparently to the frontend's own
		// address and port: TPROXY hands it the traffic entering the
		// node. A packet that crossed PREROUTING while a bridge forwarded
		// it (br_netfilter's bridge-nf-call-iptables) is no longer
		// assigned to it when it reaches the IP stack, which drops a
		// socket TPROXY chose, but keeps TPROXY's mark: the policy route
		// delivers it to the node, and the kernel finds this socket by
		// the address and port the packet still carries. A socket on the
		// forwarder's free port would not be found so, and a datagram's
		// reply must leave from where the client sent it anyway.
		var err error
		f.ingressTCP, f.ingressUDP, err = d.serve(ctx, lc, network, f, netip.AddrPortFrom(f.key.addr, f.key.port).String())
		if err != nil {
			return fmt.Errorf("bind the service address: %w", err)
		}
	}
	var err error
	if f.tcp, f.udp, err = d.serve(ctx, lc, network, f, f.listen.String()); err != nil {
		d.unbind(f)
		return err
	}
	if f.tcp != nil {
		f.bound = f.tcp.Addr().(*net.TCPAddr).AddrPort()
	} else {
		f.bound = f.udp.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	return nil
}

// serve opens one of f's sockets at addr, of f's protocol, and starts
// serving it.
func (d *Dataplane) serve(ctx context.Context, lc net.ListenConfig, network string, f *forwarder, addr string) (*net.TCPListener, *net.UDPConn, error) {
	if f.key.proto == v1.ProtocolTCP {
		ln, err := lc.Listen(ctx, network, addr)
		if err != nil {
			return nil, nil, err
		}
		d.wg.Add(1)
		go d.serveTCP(ctx, f, ln.(*net.TCPListener))
		return ln.(*net.TCPListener), nil, nil
	}
	pc, err := lc.ListenPacket(ctx, network, addr)
	if err != nil {
		return nil, nil, err
	}
	d.wg.Add(1)
	go d.serveUDP(ctx, f, pc.(*net.UDPConn))
	return nil, pc.(*net.UDPConn), nil
}

// unbind closes f's sockets and its UDP sessions; open TCP connections
// are their service port's to end.
func (d *Dataplane) unbind(f *forwarder) {
	if f.tcp != nil {
		f.tcp.Close()
		f.tcp = nil
	}
	if f.ingressTCP != nil {
		f.ingressTCP.Close()
		f.ingressTCP = nil
	}
	if f.udp != nil {
		f.udp.Close()
		f.udp = nil
	}
	if f.ingressUDP != nil {
		f.ingressUDP.Close()
		f.ingressUDP = nil
	}
	if f.key.proto == v1.ProtocolUDP {
		f.mu.Lock()
		sessions := f.sessions
		f.sessions = nil
		f.mu.Unlock()
		for _, s := range sessions {
			s.close()
		}
	}
	f.bound = netip.AddrPort{}
}

// reconcile binds or unbinds f as f.want says; it returns a bind error.
func (d *Dataplane) reconcile(ctx context.Context, f *forwarder) error {
	_, bound := f.boundAddr()
	switch {
	case f.want && !bound && f.served:
		if f.key.proto == v1.ProtocolSCTP {
			if f.bindErr == nil {
				d.log.Info("Not serving an SCTP frontend", "frontend", f.fe, "reason", errSCTP)
				f.bindErr = errSCTP
			}
			return nil
		}
		if err := d.bind(ctx, f); err != nil {
			d.metrics.bindFailures.Inc()
			if f.bindErr == nil {
				d.log.Error(err, "Cannot listen for a frontend; retrying", "frontend", f.fe, "listen", f.listen)
			}
			f.bindErr = err
			return err
		}
		if f.bindErr != nil {
			d.log.Info("Listening for a frontend after failures", "frontend", f.fe, "listen", f.bound)
		}
		f.bindErr = nil
	case !f.want && bound:
		d.unbind(f)
	case !f.want:
		f.bindErr = nil
	}
	return nil
}

// retryBinds tries every forwarder that wants a socket and has none, with
// mu held, and arms the retry timer while some remain.
func (d *Dataplane) retryBinds(ctx context.Context) (*BindError, []destKey) {
	var (
		be      *BindError
		rebound []destKey
	)
	for k, f := range d.unbound {
		if _, bound := f.boundAddr(); d.fwds[k] != f || !f.want || bound {
			delete(d.unbound, k)
			continue
		}
		if err := d.reconcile(ctx, f); err != nil {
			if be == nil {
				be = &BindError{Failed: map[Destination]error{}}
			}
			be.Failed[f.fe] = err
			continue
		}
		delete(d.unbound, k)
		rebound = append(rebound, k)
	}
	d.metrics.unbound.Set(float64(len(d.unbound)))
	if len(d.unbound) > 0 && d.retry == nil {
		d.retry = time.AfterFunc(d.cfg.BindRetryPeriod, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.retry = nil
			if d.life == nil {
				return
			}
			_, rebound := d.retryBinds(d.life)
			if _, err := d.redirectSync(d.life, rebound, false); err != nil {
				d.log.Error(err, "Cannot redirect to forwarders that could listen at last")
			}
		})
	}
	return be, rebound
}

// orNil returns e as an error, nil when e is nil.
func (e *BindError) orNil() error {
	if e == nil {
		return nil
	}
	return e
}

// serveTCP accepts connections until ln is closed.
func (d *Dataplane) serveTCP(ctx context.Context, f *forwarder, ln *net.TCPListener) {
	defer d.wg.Done()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			// Out of file descriptors, say: wait a little rather than
			// spin, as net/http does.
			d.log.V(2).Info("Accept failed", "frontend", f.fe, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		d.wg.Add(1)
		go d.handleTCP(ctx, f, c)
	}
}

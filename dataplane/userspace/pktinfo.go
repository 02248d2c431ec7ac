package userspace

import (
	"fmt"
	"net"
	"net/netip"

	"syscall"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// A UDP socket listening on every address does not say which of them a
// datagram reached, and its replies leave from whichever address the route
// back prefers: behind a DNAT or REDIRECT conntrack then fails to match
// them, and a client's connected socket drops them. Packet info, asked for
// on such sockets, tells the address, and replies are sent from it.

// askPktinfo makes pc report each datagram's destination address. The
// option of the other family fails harmlessly: Go listens on a wildcard
// address with a dual-stack IPv6 socket where it can.
func askPktinfo(pc *net.UDPConn) error {
	rc, err := pc.SyscallConn()
	if err != nil {
		return err
	}
	var v4, v6 error
	if err := rc.Control(func(fd uintptr) {
		v4 = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		v6 = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}); err != nil {
		return err
	}
	if v4 != nil && v6 != nil {
		return v4
	}
	return nil
}

// pktinfo reads oob, the control messages of one datagram, for the
// address it reached, and returns it with the control message that sends
// a reply from it; a zero address and nil without packet info.
func pktinfo(oob []byte) (netip.Addr, []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, nil
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			var info unix.Inet4Pktinfo
			copy(info.Addr[:], m.Data[8:12])
			return netip.AddrFrom4(info.Addr), unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: info.Addr})
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			var info unix.Inet6Pktinfo
			copy(info.Addr[:], m.Data[:16])
			return netip.AddrFrom16(info.Addr).Unmap(), unix.PktInfo6(&unix.Inet6Pktinfo{Addr: info.Addr})
		}
	}
	return netip.Addr{}, nil
}

// transparent returns a net.ListenConfig Control that makes a socket
// transparent (IP_TRANSPARENT, or IPV6_TRANSPARENT): TPROXY hands packets
// only to such sockets, and such a socket may bind an address that is not
// the node's. It needs CAP_NET_ADMIN.
func transparent(fam v1.IPFamily) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			if fam == v1.IPv6Protocol {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TRANSPARENT, 1)
			} else {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TRANSPARENT, 1)
			}
		}); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("make the socket transparent for TPROXY: %w", err)
		}
		return nil
	}
}

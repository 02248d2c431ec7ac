package userspace

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// ListeningSockets are the node's sockets that take new connections or
// datagrams (TCP listeners, bound and unconnected UDP sockets): their
// protocols and the addresses they are bound to. Its Listening method is
// a Reading.Listening. The zero value holds none.
type ListeningSockets struct {
	bound map[protoPort][]netip.Addr
}

type protoPort struct {
	protocol v1.Protocol
	port     uint16
}

// Add records a socket of protocol bound to addr. An IPv4-mapped address
// (an IPv6 socket's) is recorded as the IPv4 address it maps, which is
// where such a socket takes packets.
func (s *ListeningSockets) Add(protocol v1.Protocol, addr netip.AddrPort) {
	if s.bound == nil {
		s.bound = map[protoPort][]netip.Addr{}
	}
	k := protoPort{protocol, addr.Port()}
	s.bound[k] = append(s.bound[k], addr.Addr().Unmap())
}

// Listening reports whether a socket listens at addr for protocol: one
// on addr's port bound to addr's address or to the unspecified address
// of its family, or, for the unspecified address (any of the node's),
// one on the port bound to any address of its family. A socket bound to
// "::" counts for IPv4 too: a dual-stack socket takes both families, and
// the listing does not tell one set IPV6_V6ONLY.
func (s *ListeningSockets) Listening(protocol v1.Protocol, addr netip.AddrPort) bool {
	want := addr.Addr().Unmap()
	return slices.ContainsFunc(s.bound[protoPort{protocol, addr.Port()}], func(b netip.Addr) bool {
		switch {
		case b == netip.IPv6Unspecified():
			return true
		case b.Is4() != want.Is4():
			// An IPv4 socket never takes an IPv6 packet, nor the reverse.
			return false
		}
		return want.IsUnspecified() || b.IsUnspecified() || b == want
	})
}

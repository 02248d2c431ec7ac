package endpoints

import (
	"net/netip"

	"github.com/proxykit/proxykit/affinity"
)

// Endpoint is one backend of one service port. It is immutable once a
// tracker or NewMap has it.
type Endpoint struct {
	Addr netip.AddrPort
	affinity.EndpointInfo
}

// String returns "ip:port", with IPv6 addresses bracketed.
func (e *Endpoint) String() string { return e.Addr.String() }

// IP returns the endpoint's address.
func (e *Endpoint) IP() netip.Addr { return e.Addr.Addr() }

package conntrack

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Lister is the part of the netlink API DNATFlows uses. *netlink.Handle
// implements it, and so does *FakeTable.
type Lister interface {
	ConntrackTableList(table netlink.ConntrackTableType, family netlink.InetFamily) ([]*netlink.ConntrackFlow, error)
}

// Flow is one connection the conntrack table holds as DNATed: the client
// sent to Frontend and was sent on to Endpoint.
type Flow struct {
	Protocol v1.Protocol
	Client   netip.AddrPort
	Frontend netip.AddrPort
	Endpoint netip.AddrPort
}

// DNATFlows lists family's conntrack table through nl (nil: the calling
// thread's network namespace) and returns its TCP, UDP and SCTP flows whose
// destination was rewritten, which for a service proxy is where each
// connection to a service went. It only reads.
func DNATFlows(ctx context.Context, nl Lister, family v1.IPFamily) ([]Flow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fam := netlink.InetFamily(unix.AF_INET)
	switch family {
	case v1.IPv4Protocol:
	case v1.IPv6Protocol:
		fam = unix.AF_INET6
	default:
		return nil, fmt.Errorf("%w %q", ErrInvalidFamily, family)
	}
	if nl == nil {
		nl = &netlink.Handle{}
	}
	flows, err := nl.ConntrackTableList(netlink.ConntrackTable, fam)
	if err != nil {
		return nil, fmt.Errorf("conntrack: listing the %s table: %w%s", family, err, moduleHint(err))
	}
	var out []Flow
	for _, f := range flows {
		var proto v1.Protocol
		switch f.Forward.Protocol {
		case unix.IPPROTO_TCP:
			proto = v1.ProtocolTCP
		case unix.IPPROTO_UDP:
			proto = v1.ProtocolUDP
		case unix.IPPROTO_SCTP:
			proto = v1.ProtocolSCTP
		default:
			continue
		}
		addr := func(ip []byte, port uint16) netip.AddrPort {
			a, _ := netip.AddrFromSlice(ip)
			return netip.AddrPortFrom(a.Unmap(), port)
		}
		fl := Flow{Protocol: proto, Client: addr(f.Forward.SrcIP, f.Forward.SrcPort),
			Frontend: addr(f.Forward.DstIP, f.Forward.DstPort), Endpoint: addr(f.Reverse.SrcIP, f.Reverse.SrcPort)}
		if fl.Endpoint != fl.Frontend && fl.Endpoint.Addr().IsValid() {
			out = append(out, fl)
		}
	}
	return out, nil
}

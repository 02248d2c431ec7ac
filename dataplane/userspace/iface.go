package userspace

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ifaceFinder tells, for the interface-based local-traffic detectors,
// which interface a connection came in through: a socket does not say,
// but the route back to its source leaves through that interface (pods
// are routed through their own veth or bridge). It asks netlink in the
// network namespace it was made in.
type ifaceFinder struct {
	h *netlink.Handle
}

func newIfaceFinder() (*ifaceFinder, error) {
	// rtnetlink only: a handle of every family fails on a kernel without
	// one of them (xfrm_user, say).
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return &ifaceFinder{h: h}, nil
}

// of returns the name of the interface src is routed through, "" when
// that cannot be told.
func (f *ifaceFinder) of(src netip.Addr) string {
	routes, err := f.h.RouteGet(src.AsSlice())
	if err != nil || len(routes) == 0 {
		return ""
	}
	link, err := f.h.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return ""
	}
	return link.Attrs().Name
}

func (f *ifaceFinder) close() { f.h.Close() }

// Package handle holds what the ipvs dataplane and its fakes (package
// ipvstest) share without showing it in package ipvs's API: the parts of
// moby/ipvs's and vishvananda/netlink's handles the dataplane calls, and
// the notations both sides write.
package handle

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPVS is the part of github.com/moby/ipvs's *Handle the dataplane uses:
// every call is one netlink round trip (a dump for the Get methods).
type IPVS interface {
	GetServices() ([]*mobyipvs.Service, error)
	NewService(*mobyipvs.Service) error
	UpdateService(*mobyipvs.Service) error
	DelService(*mobyipvs.Service) error
	GetDestinations(*mobyipvs.Service) ([]*mobyipvs.Destination, error)
	NewDestination(*mobyipvs.Service, *mobyipvs.Destination) error
	UpdateDestination(*mobyipvs.Service, *mobyipvs.Destination) error
	DelDestination(*mobyipvs.Service, *mobyipvs.Destination) error
	SetConfig(*mobyipvs.Config) error
}

// Netlink is the part of github.com/vishvananda/netlink's *Handle the
// dataplane uses for its dummy link, the link's addresses and its ipsets.
type Netlink interface {
	LinkByName(name string) (netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkDel(link netlink.Link) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrAdd(link netlink.Link, addr *netlink.Addr) error
	AddrDel(link netlink.Link, addr *netlink.Addr) error
	IpsetCreate(name, typename string, options netlink.IpsetCreateOptions) error
	IpsetDestroy(name string) error
	IpsetList(name string) (*netlink.IPSetResult, error)
	IpsetAdd(name string, entry *netlink.IPSetEntry) error
	IpsetDel(name string, entry *netlink.IPSetEntry) error
}

// Handles are what an ipvs.Kernel gives a Dataplane. Fake marks handles
// with no kernel behind them, where a Dataplane leaves /proc/sys alone
// too.
type Handles struct {
	IPVS    IPVS
	Netlink Netlink
	Fake    bool
	// Table, when set, reads the whole IPVS table in one read, as
	// /proc/net/ip_vs lists it (the fake's too), and hands it to scan,
	// for the canary and full syncs; the bytes are valid only during
	// scan, which reads them into a buffer shared by every caller.
	Table func(scan func([]byte)) error
}

// Service flags moby/ipvs does not name.
const (
	FlagPersistent = 0x1
	FlagHashed     = 0x2
)

// ProtoNumber is the IP protocol number of "TCP", "UDP" or "SCTP" (in any
// case); 0 for another.
func ProtoNumber(p string) uint16 {
	switch strings.ToUpper(p) {
	case "TCP":
		return unix.IPPROTO_TCP
	case "UDP":
		return unix.IPPROTO_UDP
	case "SCTP":
		return unix.IPPROTO_SCTP
	}
	return 0
}

// ProtoName is ProtoNumber's inverse; "proto-N" for another protocol.
func ProtoName(p uint16) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "TCP"
	case unix.IPPROTO_UDP:
		return "UDP"
	case unix.IPPROTO_SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto-%d", p)
}

// HostAddr is a as a host address (a /32 or /128) of a link, in one
// allocation.
func HostAddr(a netip.Addr) *netlink.Addr {
	n := &struct {
		netlink.Addr
		net      net.IPNet
		ip, mask [16]byte
	}{}
	bits := a.BitLen()
	if a.Is4() {
		v := a.As4()
		copy(n.ip[:4], v[:])
	} else {
		n.ip = a.As16()
	}
	for i := range bits / 8 {
		n.mask[i] = 0xff
	}
	n.net = net.IPNet{IP: n.ip[: bits/8 : bits/8], Mask: n.mask[: bits/8 : bits/8]}
	n.IPNet = &n.net
	return &n.Addr
}

// SetMember writes e, an entry of a set of type typ, in ipset's notation
// ("10.96.0.10,tcp:80"), as the kernel lists it: a net's prefix length is
// left out for a host. ok is false for a type of other than ip, net and
// port dimensions (hash: ones), and for an entry that does not fit typ.
func SetMember(typ string, e *netlink.IPSetEntry) (member string, ok bool) {
	kind, ok := strings.CutPrefix(typ, "hash:")
	if !ok {
		return "", false
	}
	var parts []string
	ips := 0
	for _, dim := range strings.Split(kind, ",") {
		switch dim {
		case "ip", "net":
			ip, cidr := e.IP, e.CIDR
			if ips > 0 {
				ip, cidr = e.IP2, e.CIDR2
			}
			a, ok := netip.AddrFromSlice(ip)
			if !ok {
				return "", false
			}
			a = a.Unmap()
			s := a.String()
			if dim == "net" && cidr != 0 && int(cidr) < a.BitLen() {
				s += "/" + strconv.Itoa(int(cidr))
			}
			parts, ips = append(parts, s), ips+1
		case "port":
			p, ok := portMember(e)
			if !ok {
				return "", false
			}
			parts = append(parts, p)
		default:
			return "", false
		}
	}
	return strings.Join(parts, ","), true
}

// portMember is the "proto:port" of e; a missing protocol is TCP, as in
// ipset.
func portMember(e *netlink.IPSetEntry) (string, bool) {
	if e.Port == nil {
		return "", false
	}
	proto := "tcp"
	if e.Protocol != nil {
		switch *e.Protocol {
		case unix.IPPROTO_TCP:
		case unix.IPPROTO_UDP:
			proto = "udp"
		case unix.IPPROTO_SCTP:
			proto = "sctp"
		default:
			return "", false
		}
	}
	return proto + ":" + strconv.Itoa(int(*e.Port)), true
}

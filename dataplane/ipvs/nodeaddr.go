package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/vishvananda/netlink"
)

// dumpAttempts bounds the address dumps of one read when the kernel keeps
// reporting a dump interrupted by a change.
const dumpAttempts = 5

// kernelAddrs is what one dump of the kernel's addresses of the
// dataplane's family says.
type kernelAddrs struct {
	// local are the node's own addresses: on any link but the dataplane's,
	// loopback addresses left out (IPVS cannot serve them); sorted.
	local []netip.Addr
	// link are the addresses on the dataplane's link.
	link []*netlink.Addr
}

// nodeAddrs is what a sync took from kernelAddrs: the node's addresses
// as kube-proxy's IPVS mode counts them, IPv6 link-local ones left out
// (health-check ports are accepted on them and on loopback), and those
// that serve node ports.
type nodeAddrs struct {
	local, nodePort []netip.Addr
}

func (a nodeAddrs) equal(b nodeAddrs) bool {
	return slices.Equal(a.local, b.local) && slices.Equal(a.nodePort, b.nodePort)
}

// readAddrs dumps the addresses of the family once (vishvananda/netlink
// dumps them all even for one link) and sorts them into the node's and
// those on the link whose index is linkIndex.
func (d *Dataplane) readAddrs(linkIndex int) (kernelAddrs, error) {
	var all []netlink.Addr
	var err error
	for range dumpAttempts {
		all, err = d.nl.AddrList(nil, d.addrFamily())
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return kernelAddrs{}, fmt.Errorf("list the node's addresses: %w", err)
	}
	var out kernelAddrs
	for i := range all {
		a := &all[i]
		ip, ok := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		switch {
		case !ok || ip.Is6() != d.ipv6:
		case a.LinkIndex == linkIndex:
			out.link = append(out.link, &all[i])
		case !ip.IsLoopback():
			out.local = append(out.local, ip)
		}
	}
	slices.SortFunc(out.local, netip.Addr.Compare)
	out.local = slices.Compact(out.local)
	return out, nil
}

// nodeAddrsOf returns, of the kernel's addresses local, the node's and
// those that serve node ports under s's settings, as kube-proxy's IPVS
// mode picks them: the node's leave IPv6 link-local ones out, so that the
// link-local address every new pod's veth brings on a bridge (or routed
// IPv6) node changes neither the health-check set nor the canary; when
// NodePortAddresses selects every address (empty, or holding a /0 of the
// family), the node's serve node ports; otherwise those of local its
// CIDRs of the family hold, link-local ones included.
func nodeAddrsOf(s *dataplane.State, local []netip.Addr, ipv6 bool) nodeAddrs {
	var cidrs []netip.Prefix
	all := false
	for _, p := range s.Settings.NodePortAddresses {
		if !p.IsValid() || p.Addr().Is6() != ipv6 {
			continue
		}
		all = all || p.Bits() == 0
		cidrs = append(cidrs, p)
	}
	var out nodeAddrs
	for _, ip := range local {
		node := !ip.Is6() || !ip.IsLinkLocalUnicast()
		if node {
			out.local = append(out.local, ip)
		}
		switch {
		case all || len(cidrs) == 0:
			if node {
				out.nodePort = append(out.nodePort, ip)
			}
		case slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(ip) }):
			out.nodePort = append(out.nodePort, ip)
		}
	}
	return out
}

// addrsChanged is the canary's look at addresses: one dump of the
// family's addresses tells whether the node gained or lost an address
// that serves node ports or accepts health checks, or whether someone
// removed the link or unbound a service address from it.
func (d *Dataplane) addrsChanged() (bool, error) {
	link, err := d.nl.LinkByName(d.cfg.Link)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		d.log.V(2).Info("Canary: the link is gone", "link", d.cfg.Link)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("find link %s: %w", d.cfg.Link, err)
	}
	ka, err := d.readAddrs(link.Attrs().Index)
	if err != nil {
		return false, err
	}
	if now := nodeAddrsOf(d.last, ka.local, d.ipv6); !now.equal(d.addrs) {
		d.log.V(2).Info("Canary: the node's addresses changed", "nodePortAddresses", now.nodePort, "programmed", d.addrs.nodePort)
		return true, nil
	}
	onLink := map[netip.Addr]bool{}
	for _, a := range ka.link {
		ip, _ := netip.AddrFromSlice(a.IP)
		onLink[ip.Unmap()] = true
	}
	for a := range d.binds {
		if !onLink[a] {
			d.log.V(2).Info("Canary: a bound address is gone", "link", d.cfg.Link, "address", a)
			return true, nil
		}
	}
	return false, nil
}

func (d *Dataplane) addrFamily() int {
	if d.ipv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

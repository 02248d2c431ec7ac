package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Cleanup implements dataplane.Dataplane: it removes what the dataplane
// created, as its sets record it, whether this Dataplane or an earlier
// process with the same Config programmed it: the virtual servers on
// addresses it bound and on its node ports, those addresses, its link
// (unless another program put addresses on it), its chains and its sets.
// Nothing else is touched. A kernel without any of it is no error.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.reset()
	var errs []error
	have, _ := d.readOwnSets()
	for k := range d.owner {
		have[setIPs][entry{ip: k.addr}] = true
	}
	if kernel, err := d.ipvs.GetServices(); err != nil {
		errs = append(errs, fmt.Errorf("list virtual servers: %w", err))
	} else {
		for _, ks := range kernel {
			k := keyOfService(ks)
			_, mine := d.owner[k]
			if ks.FWMark != 0 || (ks.AddressFamily == unix.AF_INET6) != d.ipv6 || !owns(have, k) && !mine {
				continue
			}
			if err := d.ipvs.DelService(ks); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete virtual server %s: %w", k, err))
			}
		}
	}
	clear(d.draining)
	clear(d.drainSums)
	errs = append(errs, d.removeLink(have[setIPs]))
	if err := d.owned().Remove(ctx, d.runner); err != nil {
		errs = append(errs, err)
	}
	for id := range numSets {
		if err := d.nl.IpsetDestroy(d.names.set[id]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("destroy ipset %s: %w", d.names.set[id], err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ipvs: cleanup: %w", err)
	}
	return nil
}

// removeLink unbinds the addresses the dataplane bound and deletes the
// link when nothing else is left on it.
func (d *Dataplane) removeLink(ours map[entry]bool) error {
	link, err := d.nl.LinkByName(d.cfg.Link)
	if err != nil {
		return nil
	}
	addrs, err := d.nl.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list the addresses of %s: %w", d.cfg.Link, err)
	}
	foreign := 0
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		if !ours[entry{ip: ip}] || ip.Is6() != d.ipv6 {
			if !ip.IsLinkLocalUnicast() {
				foreign++
			}
			continue
		}
		if err := d.nl.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("unbind %s from %s: %w", ip, d.cfg.Link, err)
		}
	}
	if foreign > 0 {
		d.log.Info("Leaving the link: it holds addresses the dataplane did not bind", "link", d.cfg.Link, "addresses", foreign)
		return nil
	}
	if err := d.nl.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", d.cfg.Link, err)
	}
	return nil
}

// readOwnSets lists the dataplane's sets, as Cleanup and Leftovers read
// them; a missing set is empty. It returns how many exist.
func (d *Dataplane) readOwnSets() (map[setID]map[entry]bool, int) {
	have := map[setID]map[entry]bool{}
	n := 0
	for id := range numSets {
		have[id] = map[entry]bool{}
		res, err := d.nl.IpsetList(d.names.set[id])
		if err != nil {
			continue
		}
		n++
		for i := range res.Entries {
			have[id][entryFromNetlink(setSpecs[id].typ, &res.Entries[i])] = true
		}
	}
	return have, n
}

// owns reports whether the kernel's virtual server k is the dataplane's,
// as the sets have says: on an address it bound, or a node port it
// recorded.
func owns(have map[setID]map[entry]bool, k vsKey) bool {
	if have[setIPs][entry{ip: k.addr}] {
		return true
	}
	e := entry{ip: k.addr, proto: uint8(k.proto), port: k.port}
	return have[setNodePort][e] || have[setNodePortLocal][e]
}

// Leftovers counts what Cleanup would remove.
type Leftovers struct {
	// VirtualServers on addresses the dataplane bound or on its node ports.
	VirtualServers int
	// Addresses it bound to its link.
	Addresses int
	// Sets and Chains of its prefix that exist.
	Sets, Chains int
	// Link is whether its dummy link exists (left empty by a cleanup that
	// failed half-way, it holds no address).
	Link bool
}

// Empty reports whether there is nothing to remove.
func (l Leftovers) Empty() bool { return l == Leftovers{} }

// Leftovers reads what the dataplane, or an earlier process with the same
// Config, left in the kernel.
func (d *Dataplane) Leftovers(ctx context.Context) (Leftovers, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var l Leftovers
	have, sets := d.readOwnSets()
	l.Sets = sets
	l.Addresses = len(have[setIPs])
	if _, err := d.nl.LinkByName(d.cfg.Link); err == nil {
		l.Link = true
	}
	kernel, err := d.ipvs.GetServices()
	if err != nil {
		return l, fmt.Errorf("ipvs: list virtual servers: %w", err)
	}
	for _, ks := range kernel {
		if ks.FWMark == 0 && owns(have, keyOfService(ks)) {
			l.VirtualServers++
		}
	}
	for _, c := range d.owned().Chains {
		_, exists, err := d.runner.ListChain(ctx, c.Table, c.Name)
		if err != nil {
			return l, fmt.Errorf("ipvs: %w", err)
		}
		if exists {
			l.Chains++
		}
	}
	return l, nil
}

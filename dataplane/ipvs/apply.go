package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The apply stage: the calls that carry out a plan, one per difference
// (and one dump of the real servers of each virtual server that may
// differ), in the plan's order. It returns what it changed, as Reconcile
// reports it.

// changeLog collects what the apply stage changed, as Reconcile reports
// it. A Sync, which reports nothing, leaves it off, and then nothing is
// formatted: a first sync changes a quarter of a million things.
type changeLog struct {
	on   bool
	list []string
}

func (c *changeLog) add(format string, args ...any) {
	c.list = append(c.list, fmt.Sprintf(format, args...))
}

// apply carries out p, noting what it changed in log; link returns the
// dummy link, looked up only when an address is bound or unbound.
func (d *Dataplane) apply(p *plan, link func() (netlink.Link, error), log *changeLog) error {
	for _, ks := range p.delVS {
		k := keyOfService(ks)
		if err := d.ipvs.DelService(ks); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete virtual server %s: %w", k, err)
		}
		d.forgetDrains(k)
		if log.on {
			log.add("virtual server %s: deleted", k)
		}
	}
	// Unbind first, then forget the address, so that the set of the
	// dataplane's addresses never misses one on the link.
	for _, a := range p.unbind {
		l, err := link()
		if err != nil {
			return err
		}
		ip := linkAddr(a)
		if err := d.nl.AddrDel(l, a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("unbind %s from %s: %w", ip, d.cfg.Link, err)
		}
		if log.on {
			log.add("link %s: unbound %s", d.cfg.Link, ip)
		}
	}
	if err := d.applySets(p, log); err != nil {
		return err
	}
	for _, a := range p.bind {
		l, err := link()
		if err != nil {
			return err
		}
		if err := d.nl.AddrAdd(l, handle.HostAddr(a)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("bind %s to %s: %w", a, d.cfg.Link, err)
		}
		if log.on {
			log.add("link %s: bound %s", d.cfg.Link, a)
		}
	}
	for _, vs := range p.vss {
		if err := d.syncVS(vs.kernel, vs.want, log); err != nil {
			return err
		}
	}
	return nil
}

// applySets removes and adds the plan's set members.
func (d *Dataplane) applySets(p *plan, log *changeLog) error {
	for _, se := range p.delSets {
		if err := d.delEntry(se); err != nil {
			return err
		}
		if log.on {
			log.add("ipset %s: removed %s", d.names.set[se.set], se.e)
		}
	}
	add := func(se setEntry) error {
		if err := d.addEntry(se); err != nil {
			return err
		}
		if log.on {
			log.add("ipset %s: added %s", d.names.set[se.set], se.e)
		}
		return nil
	}
	for _, se := range p.addSets {
		if err := add(se); err != nil {
			return err
		}
	}
	if p.fill == [numSets]bool{} {
		return nil
	}
	for k := range d.entries {
		if p.fill[k.set] {
			if err := add(k.setEntry()); err != nil {
				return err
			}
		}
	}
	if p.fill[setIPs] {
		for a := range d.binds {
			if err := add(setEntry{setIPs, entry{ip: a}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// addEntry and delEntry change one member; an entry already there (or
// already gone) is no error.
func (d *Dataplane) addEntry(se setEntry) error {
	name, typ := d.names.set[se.set], setSpecs[se.set].typ
	if err := d.nl.IpsetAdd(name, d.msgs.entry(se.e, typ)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add %s to ipset %s: %w", se.e, name, err)
	}
	return nil
}

func (d *Dataplane) delEntry(se setEntry) error {
	name, typ := d.names.set[se.set], setSpecs[se.set].typ
	err := d.nl.IpsetDel(name, d.msgs.entry(se.e, typ))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EEXIST) {
		// ipset answers a missing member with IPSET_ERR_EXIST (4103).
		if !strings.Contains(err.Error(), "4103") {
			return fmt.Errorf("remove %s from ipset %s: %w", se.e, name, err)
		}
	}
	return nil
}

// service returns the moby/ipvs service of vs.
func (d *Dataplane) service(k vsKey, flags, timeout uint32) *mobyipvs.Service {
	n := &struct {
		mobyipvs.Service
		ip [16]byte
	}{}
	n.Service = mobyipvs.Service{
		Address: putIP(&n.ip, k.addr), Protocol: k.proto, Port: k.port,
		SchedName: d.cfg.Scheduler, Flags: flags, Timeout: timeout,
		AddressFamily: unix.AF_INET, Netmask: 0xffffffff,
	}
	if d.ipv6 {
		n.AddressFamily, n.Netmask = unix.AF_INET6, 128
	}
	return &n.Service
}

// messages are the ipset entry and the real server the apply stage hands
// the handles, reused call after call: a handle turns them into a netlink
// message at once and keeps nothing of them.
type messages struct {
	set  nlEntry
	real struct {
		mobyipvs.Destination
		ip [16]byte
	}
}

// dest returns real server ap with weight.
func (m *messages) dest(ap netip.AddrPort, weight int) *mobyipvs.Destination {
	r := &m.real
	r.Destination = mobyipvs.Destination{Address: putIP(&r.ip, ap.Addr()), Port: ap.Port(), Weight: weight,
		ConnectionFlags: mobyipvs.ConnectionFlagMasq}
	return &r.Destination
}

func destAddr(dst *mobyipvs.Destination) netip.AddrPort {
	a, _ := netip.AddrFromSlice(dst.Address)
	return netip.AddrPortFrom(a.Unmap(), dst.Port)
}

func keyOfService(s *mobyipvs.Service) vsKey {
	a, _ := netip.AddrFromSlice(s.Address)
	return vsKey{a.Unmap(), s.Protocol, s.Port}
}

// syncVS makes the kernel's virtual server want.key what want says, given
// the kernel's (nil when absent), noting what it changed in log.
func (d *Dataplane) syncVS(kernel *mobyipvs.Service, want *virtualServer, log *changeLog) error {
	k := want.key
	svc := d.service(k, want.flags, want.timeout)
	if kernel == nil {
		err := d.ipvs.NewService(svc)
		if err == nil {
			if log.on {
				log.add("virtual server %s: created", k)
			}
			for _, ap := range want.dests {
				if err := d.ipvs.NewDestination(svc, d.msgs.dest(ap, 1)); err != nil && !errors.Is(err, unix.EEXIST) {
					return fmt.Errorf("add real server %s to %s: %w", ap, k, err)
				}
			}
			return nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create virtual server %s: %w", k, err)
		}
		kernel = &mobyipvs.Service{SchedName: "?"}
	}
	if kernel.SchedName != svc.SchedName || kernel.Flags&^handle.FlagHashed != svc.Flags || kernel.Timeout != svc.Timeout {
		if err := d.ipvs.UpdateService(svc); err != nil {
			return fmt.Errorf("update virtual server %s: %w", k, err)
		}
		if log.on {
			log.add("virtual server %s: options updated", k)
		}
	}
	have, err := d.ipvs.GetDestinations(svc)
	if err != nil {
		return fmt.Errorf("list real servers of %s: %w", k, err)
	}
	return d.syncDests(k, svc, have, want.dests, log)
}

// syncDests makes the real servers of k want, given the kernel's have: a
// real server no longer wanted is drained (weight 0) while it has active
// TCP connections, deleted otherwise.
func (d *Dataplane) syncDests(k vsKey, svc *mobyipvs.Service, have []*mobyipvs.Destination, want []netip.AddrPort, log *changeLog) error {
	seen := make([]bool, len(want))
	for _, h := range have {
		ap := destAddr(h)
		if i, ok := slices.BinarySearchFunc(want, ap, netip.AddrPort.Compare); ok {
			seen[i] = true
			d.undrain(drainKey{k, ap})
			if h.Weight != 1 || h.ConnectionFlags&mobyipvs.ConnectionFlagFwdMask != mobyipvs.ConnectionFlagMasq {
				if err := d.ipvs.UpdateDestination(svc, d.msgs.dest(ap, 1)); err != nil {
					return fmt.Errorf("update real server %s of %s: %w", ap, k, err)
				}
				if log.on {
					log.add("virtual server %s: real server %s set to weight 1", k, ap)
				}
			}
			continue
		}
		if _, ok := d.draining[drainKey{k, ap}]; ok {
			continue
		}
		if err := d.removeDest(k, svc, h); err != nil {
			return err
		}
		if log.on {
			log.add("virtual server %s: real server %s removed", k, ap)
		}
	}
	for i, ap := range want {
		if seen[i] {
			continue
		}
		if err := d.ipvs.NewDestination(svc, d.msgs.dest(ap, 1)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add real server %s to %s: %w", ap, k, err)
		}
		if log.on {
			log.add("virtual server %s: real server %s added", k, ap)
		}
	}
	return nil
}

// removeDest starts graceful termination of a TCP real server with active
// connections and deletes any other at once.
func (d *Dataplane) removeDest(k vsKey, svc *mobyipvs.Service, h *mobyipvs.Destination) error {
	ap := destAddr(h)
	if k.proto == unix.IPPROTO_TCP && h.ActiveConnections > 0 {
		if h.Weight != 0 {
			if err := d.ipvs.UpdateDestination(svc, d.msgs.dest(ap, 0)); err != nil {
				return fmt.Errorf("quiesce real server %s of %s: %w", ap, k, err)
			}
		}
		d.startDrain(drainKey{k, ap})
		d.log.V(4).Info("Draining real server", "virtualServer", k.String(), "realServer", ap, "activeConnections", h.ActiveConnections)
		return nil
	}
	if err := d.ipvs.DelDestination(svc, h); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete real server %s of %s: %w", ap, k, err)
	}
	return nil
}

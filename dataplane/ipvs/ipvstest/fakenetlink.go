package ipvstest

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FakeNetlink is an in-memory link, address and ipset store, a Kernel's,
// for tests. Links keep their addresses; ipsets keep their type
// and entries and refuse entries that do not fit the type. Every call is
// counted (Calls). It is safe for concurrent use.
type FakeNetlink struct {
	mu    sync.Mutex
	links map[string]*fakeLink
	sets  map[string]*fakeSet
	calls int
	index int
}

type fakeLink struct {
	link  netlink.Link
	addrs []netlink.Addr
	// at indexes addrs by address: a node's dummy link holds one per
	// service address, tens of thousands.
	at map[netip.Addr]int
}

func addrKey(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func (l *fakeLink) add(a netlink.Addr) {
	if l.at == nil {
		l.at = map[netip.Addr]int{}
	}
	l.at[addrKey(a.IP)] = len(l.addrs)
	l.addrs = append(l.addrs, a)
}

// remove deletes the address at i, moving the last one there.
func (l *fakeLink) remove(i int) {
	delete(l.at, addrKey(l.addrs[i].IP))
	last := len(l.addrs) - 1
	if i != last {
		l.addrs[i] = l.addrs[last]
		l.at[addrKey(l.addrs[i].IP)] = i
	}
	l.addrs = l.addrs[:last]
}

type fakeSet struct {
	typ string
	// dims are the type's dimensions ("ip", "port"), nil for a type the
	// fake does not model.
	dims []string
	// entries are the members, with the prefix lengths they were added
	// with, which a listing gives back: what a caller gave is never kept,
	// as the kernel copies a netlink message.
	entries map[member]cidrs
}

// cidrs are the prefix lengths of an entry's first and second address.
type cidrs struct{ cidr, cidr2 uint8 }

// list returns the set's entries as netlink lists them, in no particular
// order, in a few allocations.
func (s *fakeSet) list() []netlink.IPSetEntry {
	n := len(s.entries)
	out := make([]netlink.IPSetEntry, n)
	ips := make([]byte, 0, 32*n)
	nums := make([]struct {
		proto uint8
		port  uint16
	}, n)
	i := 0
	for m, c := range s.entries {
		e, num := &out[i], &nums[i]
		i++
		second := false
		for _, dim := range s.dims {
			if dim == "port" {
				num.proto, num.port = m.proto, m.port
				e.Protocol, e.Port = &num.proto, &num.port
				continue
			}
			a, cidr := netip.AddrFrom16(m.ip).Unmap(), c.cidr
			if second {
				a, cidr = netip.AddrFrom16(m.ip2).Unmap(), c.cidr2
			}
			start := len(ips)
			if a.Is4() {
				v := a.As4()
				ips = append(ips, v[:]...)
			} else {
				v := a.As16()
				ips = append(ips, v[:]...)
			}
			ip := net.IP(ips[start:len(ips):len(ips)])
			switch {
			case !second:
				e.IP, e.CIDR = ip, cidr
			default:
				e.IP2, e.CIDR2 = ip, cidr
			}
			second = true
		}
	}
	return out
}

// member is an entry as a set of its type holds it: what the type's
// dimensions take of it (the notation handle.SetMember writes, without
// the strings).
type member struct {
	// ip and ip2 are in their 16-byte form (addrPort's).
	ip, ip2     [16]byte
	cidr, cidr2 uint8
	proto       uint8
	port        uint16
}

// memberOf returns e as a member of s, and false when it does not fit
// s's type; it allocates nothing.
func (s *fakeSet) memberOf(e *netlink.IPSetEntry) (member, bool) {
	var m member
	if s.dims == nil {
		return m, false
	}
	ips := 0
	for _, dim := range s.dims {
		switch dim {
		case "ip", "net":
			ip, cidr := e.IP, e.CIDR
			if ips > 0 {
				ip, cidr = e.IP2, e.CIDR2
			}
			a, ok := netip.AddrFromSlice(ip)
			if !ok {
				return m, false
			}
			a = a.Unmap()
			if dim == "ip" || cidr == 0 || int(cidr) >= a.BitLen() {
				cidr = 0
			}
			if ips == 0 {
				m.ip, m.cidr = a.As16(), cidr
			} else {
				m.ip2, m.cidr2 = a.As16(), cidr
			}
			ips++
		case "port":
			if e.Port == nil {
				return m, false
			}
			m.proto, m.port = unix.IPPROTO_TCP, *e.Port
			if e.Protocol != nil {
				switch p := *e.Protocol; p {
				case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP:
					m.proto = p
				default:
					return m, false
				}
			}
		}
	}
	return m, true
}

// setDims returns the dimensions of a set type the fake models (hash:
// of ip, net and port), nil for another.
func setDims(typ string) []string {
	kind, ok := strings.CutPrefix(typ, "hash:")
	if !ok {
		return nil
	}
	dims := strings.Split(kind, ",")
	for _, d := range dims {
		if d != "ip" && d != "net" && d != "port" {
			return nil
		}
	}
	return dims
}

// NewFakeNetlink returns a FakeNetlink with no links and no sets.
func NewFakeNetlink() *FakeNetlink {
	return &FakeNetlink{links: map[string]*fakeLink{}, sets: map[string]*fakeSet{}}
}

// Calls returns how many calls the fake has answered.
func (f *FakeNetlink) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// LinkByName implements the dataplane's netlink handle.
func (f *FakeNetlink) LinkByName(name string) (netlink.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	l, ok := f.links[name]
	if !ok {
		return nil, netlink.LinkNotFoundError{}
	}
	return l.link, nil
}

// LinkAdd implements the dataplane's netlink handle.
func (f *FakeNetlink) LinkAdd(link netlink.Link) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	name := link.Attrs().Name
	if _, ok := f.links[name]; ok {
		return unix.EEXIST
	}
	f.index++
	link.Attrs().Index = 100 + f.index
	f.links[name] = &fakeLink{link: link}
	return nil
}

// LinkDel implements the dataplane's netlink handle.
func (f *FakeNetlink) LinkDel(link netlink.Link) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	name := link.Attrs().Name
	if _, ok := f.links[name]; !ok {
		return unix.ENODEV
	}
	delete(f.links, name)
	return nil
}

func (f *FakeNetlink) linkOf(link netlink.Link) (*fakeLink, error) {
	if link == nil {
		return nil, unix.EINVAL
	}
	l, ok := f.links[link.Attrs().Name]
	if !ok {
		return nil, unix.ENODEV
	}
	return l, nil
}

// AddrList implements Netlink: the addresses of one link, or of every
// link when link is nil, each with its link's index, as the kernel lists
// them.
func (f *FakeNetlink) AddrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	links := slices.SortedFunc(maps.Values(f.links), func(a, b *fakeLink) int {
		return cmp.Compare(a.link.Attrs().Index, b.link.Attrs().Index)
	})
	if link != nil {
		l, err := f.linkOf(link)
		if err != nil {
			return nil, err
		}
		links = []*fakeLink{l}
	}
	n := 0
	for _, l := range links {
		n += len(l.addrs)
	}
	out := make([]netlink.Addr, 0, n)
	for _, l := range links {
		for _, a := range l.addrs {
			is4 := a.IP.To4() != nil
			if family == netlink.FAMILY_ALL || family == netlink.FAMILY_V4 && is4 || family == netlink.FAMILY_V6 && !is4 {
				a.LinkIndex = l.link.Attrs().Index
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// SetLinkAddrs gives the link called name exactly the addresses addrs, as
// the node's own network setup would: a device link is created when there
// is none. A test puts the node's addresses there, which node ports
// follow. It is not counted.
func (f *FakeNetlink) SetLinkAddrs(name string, addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		f.index++
		l = &fakeLink{link: &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name, Index: 100 + f.index}}}
		f.links[name] = l
	}
	l.addrs, l.at = nil, nil
	for _, a := range addrs {
		l.add(*handle.HostAddr(a))
	}
}

// addr locks f (the caller unlocks it), counts a call and finds link and
// the index of addr's address among its addresses, -1 if it has not.
func (f *FakeNetlink) addr(link netlink.Link, addr *netlink.Addr) (*fakeLink, int, error) {
	f.mu.Lock()
	f.calls++
	l, err := f.linkOf(link)
	if err != nil {
		return nil, -1, err
	}
	i, ok := l.at[addrKey(addr.IP)]
	if !ok {
		i = -1
	}
	return l, i, nil
}

// AddrAdd implements the dataplane's netlink handle.
func (f *FakeNetlink) AddrAdd(link netlink.Link, addr *netlink.Addr) error {
	l, i, err := f.addr(link, addr)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	if i >= 0 {
		return unix.EEXIST
	}
	l.add(*addr)
	return nil
}

// AddrDel implements the dataplane's netlink handle.
func (f *FakeNetlink) AddrDel(link netlink.Link, addr *netlink.Addr) error {
	l, i, err := f.addr(link, addr)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	if i < 0 {
		return unix.EADDRNOTAVAIL
	}
	l.remove(i)
	return nil
}

// IpsetCreate implements the dataplane's netlink handle.
func (f *FakeNetlink) IpsetCreate(name, typename string, options netlink.IpsetCreateOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(name) > 31 {
		return unix.ENAMETOOLONG
	}
	if s, ok := f.sets[name]; ok {
		if !options.Replace || s.typ != typename {
			return unix.EEXIST
		}
	}
	f.sets[name] = &fakeSet{typ: typename, dims: setDims(typename), entries: map[member]cidrs{}}
	return nil
}

// IpsetDestroy implements the dataplane's netlink handle.
func (f *FakeNetlink) IpsetDestroy(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if _, ok := f.sets[name]; !ok {
		return unix.ENOENT
	}
	delete(f.sets, name)
	return nil
}

// IpsetList implements the dataplane's netlink handle.
func (f *FakeNetlink) IpsetList(name string) (*netlink.IPSetResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	s, ok := f.sets[name]
	if !ok {
		return nil, unix.ENOENT
	}
	// In no particular order, as the kernel's hash sets list them.
	return &netlink.IPSetResult{SetName: name, TypeName: s.typ, Entries: s.list()}, nil
}

// IpsetAdd implements the dataplane's netlink handle.
func (f *FakeNetlink) IpsetAdd(name string, e *netlink.IPSetEntry) error {
	s, k, err := f.setEntry(name, e)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	if _, ok := s.entries[k]; ok && !e.Replace {
		return unix.EEXIST
	}
	s.entries[k] = cidrs{e.CIDR, e.CIDR2}
	return nil
}

// IpsetDel implements the dataplane's netlink handle.
func (f *FakeNetlink) IpsetDel(name string, e *netlink.IPSetEntry) error {
	s, k, err := f.setEntry(name, e)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	if _, ok := s.entries[k]; !ok {
		return unix.ENOENT
	}
	delete(s.entries, k)
	return nil
}

// LinkAddrs returns the addresses of the link called name, sorted; nil
// when there is no such link. It is not counted.
func (f *FakeNetlink) LinkAddrs(name string) []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil
	}
	var out []netip.Addr
	for _, a := range l.addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		out = append(out, ip.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Sets returns each set's entries in ipset's notation ("10.0.0.1,tcp:80"),
// sorted. It is not counted.
func (f *FakeNetlink) Sets() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for name, s := range f.sets {
		entries := s.list()
		list := make([]string, 0, len(entries))
		for i := range entries {
			m, _ := handle.SetMember(s.typ, &entries[i])
			list = append(list, m)
		}
		slices.Sort(list)
		out[name] = list
	}
	return out
}

// setEntry locks f (the caller unlocks it), counts a call and finds the
// set called name and the key of e in it, which must fit the set's type.
func (f *FakeNetlink) setEntry(name string, e *netlink.IPSetEntry) (*fakeSet, member, error) {
	f.mu.Lock()
	f.calls++
	s, ok := f.sets[name]
	if !ok {
		return nil, member{}, unix.ENOENT
	}
	k, ok := s.memberOf(e)
	if !ok {
		return nil, member{}, fmt.Errorf("entry %+v does not fit a set of type %s: %w", *e, s.typ, unix.EINVAL)
	}
	return s, k, nil
}

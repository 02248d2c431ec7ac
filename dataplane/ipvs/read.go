package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Reading is what the kernel holds of one family's IPVS dataplane, as
// Dataplane.Read found it: the virtual servers it owns with their real
// servers, the addresses on its link, its ipsets and its iptables chains
// with the rules that hook them in. Trace answers from it what the kernel
// does with a packet. Nothing of other programs is read (their virtual
// servers, sets and rules), so a rule of another program that decides
// first is not seen.
type Reading struct {
	Family v1.IPFamily
	// Link is the dummy link's name; LinkAddresses are the family's
	// addresses on it, anyone's, sorted: each makes the kernel take the
	// packets to it as local, where IPVS sees them.
	Link          string
	LinkAddresses []netip.Addr
	// VirtualServers are the dataplane's own (on an address of its IPS
	// set, or on a node port of its NODE-PORT sets), sorted by address,
	// port and protocol.
	VirtualServers []VirtualServer
	// Sets are the dataplane's ipsets by name; a missing set is absent.
	Sets map[string]xtables.IPSet
	// Chains are the rules, as "iptables -S" prints them, of the
	// dataplane's chains and, under the built-in chains' names, the rules
	// of those that jump to them; by "table chain". A missing chain is
	// absent.
	Chains map[string][]string
}

// VirtualServer is one IPVS virtual server as the kernel holds it.
type VirtualServer struct {
	// Protocol is "TCP", "UDP" or "SCTP".
	Protocol v1.Protocol
	Address  netip.AddrPort
	// Scheduler is IPVS's name for it, as ipvsadm shows it ("rr").
	Scheduler string
	// Persistent is ClientIP affinity, which lasts Timeout seconds.
	Persistent bool
	Timeout    uint32
	// Flags are the other service flags (scheduler flags: flag-1 is 0x8).
	Flags       uint32
	RealServers []RealServer
}

func (vs *VirtualServer) String() string {
	s := string(vs.Protocol) + " " + vs.Address.String() + " " + vs.Scheduler
	if vs.Persistent {
		s += fmt.Sprintf(" persistent %d", vs.Timeout)
	}
	if vs.Flags != 0 {
		s += fmt.Sprintf(" flags %#x", vs.Flags)
	}
	return s
}

// RealServer is one real server of a virtual server.
type RealServer struct {
	Address netip.AddrPort
	// Weight 0 takes no new connections: a real server draining its
	// connections after its endpoint went away.
	Weight                                 int
	ActiveConnections, InactiveConnections int
}

// Read reads what the kernel holds of the dataplane, whether this
// Dataplane or an earlier process with the same Config programmed it,
// through the same handles Sync uses: one dump per ipset, of the virtual
// servers, of the link's addresses and of each owned virtual server's real
// servers, and one listing per chain. It changes nothing; it waits for a
// Sync under way, so that the reading is never half old, half new.
func (d *Dataplane) Read(ctx context.Context) (*Reading, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &Reading{Family: d.cfg.Family, Link: d.cfg.Link, Sets: map[string]xtables.IPSet{}, Chains: map[string][]string{}}
	have := map[setID]map[entry]bool{}
	for id := range numSets {
		name := d.names.set[id]
		have[id] = map[entry]bool{}
		res, err := d.nl.IpsetList(name)
		if err != nil {
			// The kernel answers a missing set with an error; any other
			// failure would fail the dumps below as well.
			continue
		}
		set := xtables.IPSet{Type: res.TypeName, Members: []string{}}
		if set.Type == "" {
			set.Type = setSpecs[id].typ
		}
		for i := range res.Entries {
			e := entryFromNetlink(set.Type, &res.Entries[i])
			have[id][e] = true
			set.Members = append(set.Members, e.String())
		}
		slices.Sort(set.Members)
		r.Sets[name] = set
	}
	if err := d.readLink(r); err != nil {
		return nil, fmt.Errorf("ipvs: %w", err)
	}
	if err := d.readVirtualServers(r, have); err != nil {
		return nil, fmt.Errorf("ipvs: %w", err)
	}
	if err := d.readChains(ctx, r); err != nil {
		return nil, fmt.Errorf("ipvs: %w", err)
	}
	return r, nil
}

func (d *Dataplane) readLink(r *Reading) error {
	link, err := d.nl.LinkByName(d.cfg.Link)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound) || errors.Is(err, unix.ENODEV):
		return nil
	case err != nil:
		return fmt.Errorf("find link %s: %w", d.cfg.Link, err)
	}
	addrs, err := d.nl.AddrList(link, d.addrFamily())
	if err != nil {
		return fmt.Errorf("list the addresses of %s: %w", d.cfg.Link, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().Is6() == d.ipv6 {
			r.LinkAddresses = append(r.LinkAddresses, ip.Unmap())
		}
	}
	slices.SortFunc(r.LinkAddresses, netip.Addr.Compare)
	return nil
}

func (d *Dataplane) readVirtualServers(r *Reading, have map[setID]map[entry]bool) error {
	kernel, err := d.ipvs.GetServices()
	if err != nil {
		return fmt.Errorf("list virtual servers: %w", err)
	}
	for _, ks := range kernel {
		k := keyOfService(ks)
		if ks.FWMark != 0 || (ks.AddressFamily == unix.AF_INET6) != d.ipv6 || !owns(have, k) {
			continue
		}
		dests, err := d.ipvs.GetDestinations(ks)
		if errors.Is(err, unix.ESRCH) {
			// Deleted since the dump.
			continue
		}
		if err != nil {
			return fmt.Errorf("list the real servers of %s: %w", k, err)
		}
		r.VirtualServers = append(r.VirtualServers, virtualServerOf(k, ks, dests))
	}
	slices.SortFunc(r.VirtualServers, func(a, b VirtualServer) int {
		return compareKeys(vsKey{a.Address.Addr(), handle.ProtoNumber(string(a.Protocol)), a.Address.Port()},
			vsKey{b.Address.Addr(), handle.ProtoNumber(string(b.Protocol)), b.Address.Port()})
	})
	return nil
}

func virtualServerOf(k vsKey, ks *mobyipvs.Service, dests []*mobyipvs.Destination) VirtualServer {
	vs := VirtualServer{
		Protocol:   v1.Protocol(handle.ProtoName(k.proto)),
		Address:    netip.AddrPortFrom(k.addr, k.port),
		Scheduler:  ks.SchedName,
		Persistent: ks.Flags&handle.FlagPersistent != 0,
		Flags:      ks.Flags &^ (handle.FlagPersistent | handle.FlagHashed),
	}
	if vs.Persistent {
		vs.Timeout = ks.Timeout
	}
	for _, dst := range dests {
		vs.RealServers = append(vs.RealServers, RealServer{Address: destAddr(dst), Weight: dst.Weight,
			ActiveConnections: dst.ActiveConnections, InactiveConnections: dst.InactiveConnections})
	}
	slices.SortFunc(vs.RealServers, func(a, b RealServer) int { return a.Address.Compare(b.Address) })
	return vs
}

// readChains lists the dataplane's chains and, of the built-in chains it
// hooks, only the rules that jump to its own: the rest are other
// programs'.
func (d *Dataplane) readChains(ctx context.Context, r *Reading) error {
	ours := map[string]bool{}
	owned := d.owned()
	for _, c := range owned.Chains {
		ours[c.Name] = true
		rules, exists, err := d.runner.ListChain(ctx, c.Table, c.Name)
		if err != nil {
			return fmt.Errorf("list iptables chain %s %s: %w", c.Table, c.Name, err)
		}
		if exists {
			r.Chains[c.Table+" "+c.Name] = rules
		}
	}
	for _, j := range owned.Jumps {
		key := j.Table + " " + j.Chain
		if _, done := r.Chains[key]; done {
			continue
		}
		rules, _, err := d.runner.ListChain(ctx, j.Table, j.Chain)
		if err != nil {
			return fmt.Errorf("list iptables chain %s %s: %w", j.Table, j.Chain, err)
		}
		hooks := []string{}
		for _, rule := range rules {
			if words := strings.Fields(rule); len(words) >= 2 && ours[words[len(words)-1]] && words[len(words)-2] == "-j" {
				hooks = append(hooks, rule)
			}
		}
		r.Chains[key] = hooks
	}
	return nil
}

// find returns the virtual server k, if the reading has it.
func (r *Reading) find(k vsKey) (*VirtualServer, bool) {
	i, ok := slices.BinarySearchFunc(r.VirtualServers, k, func(vs VirtualServer, k vsKey) int {
		return compareKeys(vsKey{vs.Address.Addr(), handle.ProtoNumber(string(vs.Protocol)), vs.Address.Port()}, k)
	})
	if !ok {
		return nil, false
	}
	return &r.VirtualServers[i], true
}

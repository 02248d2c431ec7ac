package ipvs

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"

	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// setID names one of the dataplane's ipsets.
type setID int

const (
	// setIPs holds the addresses the dataplane bound to its link: what it
	// may unbind, and whose virtual servers it owns.
	setIPs setID = iota
	// setClusterIP: cluster IP,proto:port of ports with internal
	// endpoints (masqueraded as the settings say).
	setClusterIP
	// setExternal: external IP or VIP,proto:port, externalTrafficPolicy
	// Cluster (always masqueraded).
	setExternal
	// setExternalLocal: the same under externalTrafficPolicy Local
	// (masqueraded only from the node itself).
	setExternalLocal
	// setNodePort and setNodePortLocal: node IP,proto:port of the node
	// port virtual servers, by policy; they also say which virtual servers
	// on node addresses the dataplane owns.
	setNodePort
	setNodePortLocal
	// setLoopBack: endpoint IP,proto:port,endpoint IP: hairpin
	// connections, masqueraded.
	setLoopBack
	// setDrop: destinations whose port has endpoints but none for this
	// traffic (a Local policy without local endpoints): dropped.
	setDrop
	// setFirewall: VIP,proto:port with loadBalancerSourceRanges;
	// setSourceCIDR: VIP,proto:port,range allowed; setSourceIP:
	// VIP,proto:port,VIP when a range holds a node IP.
	setFirewall
	setSourceCIDR
	setSourceIP
	// setHealthCheck: local address,tcp:health-check node port, accepted.
	setHealthCheck
	numSets
)

type setSpec struct {
	name, typ string
}

var setSpecs = [numSets]setSpec{
	setIPs:           {"IPS", "hash:ip"},
	setClusterIP:     {"CLUSTER-IP", "hash:ip,port"},
	setExternal:      {"EXTERNAL", "hash:ip,port"},
	setExternalLocal: {"EXTERNAL-LOCAL", "hash:ip,port"},
	setNodePort:      {"NODE-PORT", "hash:ip,port"},
	setNodePortLocal: {"NODE-PORT-LOCAL", "hash:ip,port"},
	setLoopBack:      {"LOOP-BACK", "hash:ip,port,ip"},
	setDrop:          {"DROP", "hash:ip,port"},
	setFirewall:      {"FIREWALL", "hash:ip,port"},
	setSourceCIDR:    {"SOURCE-CIDR", "hash:ip,port,net"},
	setSourceIP:      {"SOURCE-IP", "hash:ip,port,ip"},
	setHealthCheck:   {"HEALTH-CHECK", "hash:ip,port"},
}

// entry is one ipset member of any of the types above; unused fields are
// zero.
type entry struct {
	ip    netip.Addr
	proto uint8
	port  uint16
	ip2   netip.Addr
	bits2 uint8
}

// setEntry is an entry in a set.
type setEntry struct {
	set setID
	e   entry
}

func (e entry) String() string {
	var b strings.Builder
	if e.ip.IsValid() {
		b.WriteString(e.ip.String())
	}
	if e.proto != 0 {
		fmt.Fprintf(&b, ",%s:%d", strings.ToLower(handle.ProtoName(uint16(e.proto))), e.port)
	}
	if e.ip2.IsValid() {
		b.WriteString("," + e.ip2.String())
		if e.bits2 != 0 {
			fmt.Fprintf(&b, "/%d", e.bits2)
		}
	}
	return b.String()
}

func (e entry) netlink(typ string) *netlink.IPSetEntry {
	out := &netlink.IPSetEntry{}
	if e.ip.IsValid() {
		out.IP = net.IP(e.ip.AsSlice())
	}
	if e.proto != 0 {
		p, port := e.proto, e.port
		out.Protocol, out.Port = &p, &port
	}
	if e.ip2.IsValid() {
		out.IP2 = net.IP(e.ip2.AsSlice())
		if typ == "hash:ip,port,net" {
			out.CIDR2 = e.bits2
		}
	}
	return out
}

func entryFromNetlink(typ string, n *netlink.IPSetEntry) entry {
	var e entry
	if a, ok := netip.AddrFromSlice(n.IP); ok {
		e.ip = a.Unmap()
	}
	if n.Port != nil {
		e.port = *n.Port
	}
	if n.Protocol != nil {
		e.proto = *n.Protocol
	}
	if a, ok := netip.AddrFromSlice(n.IP2); ok {
		e.ip2 = a.Unmap()
		if typ == "hash:ip,port,net" {
			e.bits2 = n.CIDR2
		}
	}
	return e
}

// ensureSets creates the sets that are missing and returns what every set
// holds: one call per set, plus one per missing set.
func (d *Dataplane) ensureSets() (map[setID]map[entry]bool, error) {
	out := map[setID]map[entry]bool{}
	for id := range numSets {
		name, spec := d.names.set[id], setSpecs[id]
		res, err := d.nl.IpsetList(name)
		if err != nil {
			opts := netlink.IpsetCreateOptions{Family: unix.AF_INET, MaxElements: 1 << 20}
			if d.ipv6 {
				opts.Family = unix.AF_INET6
			}
			if cerr := d.nl.IpsetCreate(name, spec.typ, opts); cerr != nil && !errors.Is(cerr, unix.EEXIST) {
				return nil, fmt.Errorf("create ipset %s of type %s: %w", name, spec.typ, withModuleHint(cerr, setTypeModule(spec.typ)))
			}
			out[id] = map[entry]bool{}
			continue
		}
		got := map[entry]bool{}
		for i := range res.Entries {
			got[entryFromNetlink(spec.typ, &res.Entries[i])] = true
		}
		out[id] = got
	}
	return out, nil
}

// addEntry and delEntry change one member; an entry already there (or
// already gone) is no error.
func (d *Dataplane) addEntry(se setEntry) error {
	name, typ := d.names.set[se.set], setSpecs[se.set].typ
	if err := d.nl.IpsetAdd(name, se.e.netlink(typ)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add %s to ipset %s: %w", se.e, name, err)
	}
	return nil
}

func (d *Dataplane) delEntry(se setEntry) error {
	name, typ := d.names.set[se.set], setSpecs[se.set].typ
	err := d.nl.IpsetDel(name, se.e.netlink(typ))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EEXIST) {
		// ipset answers a missing member with IPSET_ERR_EXIST (4103).
		if !strings.Contains(err.Error(), "4103") {
			return fmt.Errorf("remove %s from ipset %s: %w", se.e, name, err)
		}
	}
	return nil
}

// syncSets makes the kernel's sets hold want, given what they hold:
// one call per difference.
func (d *Dataplane) syncSets(have map[setID]map[entry]bool, want map[setEntry]int) ([]string, error) {
	var changed []string
	for se := range want {
		if !have[se.set][se.e] {
			if err := d.addEntry(se); err != nil {
				return changed, err
			}
			changed = append(changed, fmt.Sprintf("ipset %s: added %s", d.names.set[se.set], se.e))
		}
	}
	for id, got := range have {
		for _, e := range sortedEntries(got) {
			if _, ok := want[setEntry{id, e}]; !ok {
				if err := d.delEntry(setEntry{id, e}); err != nil {
					return changed, err
				}
				changed = append(changed, fmt.Sprintf("ipset %s: removed %s", d.names.set[id], e))
			}
		}
	}
	return changed, nil
}

func sortedEntries(m map[entry]bool) []entry {
	out := make([]entry, 0, len(m))
	for e := range maps.Keys(m) {
		out = append(out, e)
	}
	sortEntries(out)
	return out
}

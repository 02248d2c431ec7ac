package ipvs

import (
	"cmp"
	"errors"
	"fmt"
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

// memberKey is a setEntry packed without pointers (a netip.Addr holds one
// for its zone): the desired table counts a hundred thousand of them,
// which the garbage collector then need not scan.
type memberKey struct {
	ip, ip2       [16]byte
	port          uint16
	set           uint8
	proto, bits2  uint8
	valid, valid2 bool
}

func (se setEntry) key() memberKey {
	return memberKey{ip: se.e.ip.As16(), ip2: se.e.ip2.As16(), port: se.e.port, set: uint8(se.set),
		proto: se.e.proto, bits2: se.e.bits2, valid: se.e.ip.IsValid(), valid2: se.e.ip2.IsValid()}
}

func (k memberKey) setEntry() setEntry {
	e := entry{proto: k.proto, port: k.port, bits2: k.bits2}
	if k.valid {
		e.ip = netip.AddrFrom16(k.ip).Unmap()
	}
	if k.valid2 {
		e.ip2 = netip.AddrFrom16(k.ip2).Unmap()
	}
	return setEntry{setID(k.set), e}
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

// nlEntry is a netlink entry and what its pointers point to.
type nlEntry struct {
	netlink.IPSetEntry
	proto   uint8
	port    uint16
	ip, ip2 [16]byte
}

// entry returns e as a netlink entry of a set of type typ.
func (m *messages) entry(e entry, typ string) *netlink.IPSetEntry {
	n := &m.set
	*n = nlEntry{}
	out := &n.IPSetEntry
	if e.ip.IsValid() {
		out.IP = putIP(&n.ip, e.ip)
	}
	if e.proto != 0 {
		n.proto, n.port = e.proto, e.port
		out.Protocol, out.Port = &n.proto, &n.port
	}
	if e.ip2.IsValid() {
		out.IP2 = putIP(&n.ip2, e.ip2)
		if typ == "hash:ip,port,net" {
			out.CIDR2 = e.bits2
		}
	}
	return out
}

// putIP writes a into buf and returns it as a net.IP of its length.
func putIP(buf *[16]byte, a netip.Addr) net.IP {
	if a.Is4() {
		v := a.As4()
		copy(buf[:4], v[:])
		return buf[:4:4]
	}
	*buf = a.As16()
	return buf[:]
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

// ensureSet lists set id, creating it when it is missing (then nil).
func (d *Dataplane) ensureSet(id setID) (*netlink.IPSetResult, error) {
	name, spec := d.names.set[id], setSpecs[id]
	res, err := d.nl.IpsetList(name)
	if err == nil {
		return res, nil
	}
	opts := netlink.IpsetCreateOptions{Family: unix.AF_INET, MaxElements: 1 << 20}
	if d.ipv6 {
		opts.Family = unix.AF_INET6
	}
	if cerr := d.nl.IpsetCreate(name, spec.typ, opts); cerr != nil && !errors.Is(cerr, unix.EEXIST) {
		return nil, fmt.Errorf("create ipset %s of type %s: %w", name, spec.typ, withModuleHint(cerr, setTypeModule(spec.typ)))
	}
	return nil, nil
}

// compareEntries orders entries by their fields, as no listing needs
// them in ipset's own order.
func compareEntries(a, b entry) int {
	if c := a.ip.Compare(b.ip); c != 0 {
		return c
	}
	if c := cmp.Compare(a.proto, b.proto); c != 0 {
		return c
	}
	if c := cmp.Compare(a.port, b.port); c != 0 {
		return c
	}
	if c := a.ip2.Compare(b.ip2); c != 0 {
		return c
	}
	return cmp.Compare(a.bits2, b.bits2)
}

func compareSetEntries(a, b setEntry) int {
	if c := cmp.Compare(a.set, b.set); c != 0 {
		return c
	}
	return compareEntries(a.e, b.e)
}

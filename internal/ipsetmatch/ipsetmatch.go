// Package ipsetmatch decides, as the kernel's "-m set --match-set NAME
// FLAGS" does, whether a packet is a member of an ipset, from the set's
// type and its members in ipset's notation ("10.96.0.10,tcp:80"). The
// iptables tracer and the ipvs dataplane's reading share it.
//
// It models the hash: types of ip, net and port dimensions ("hash:ip",
// "hash:net", "hash:ip,port", "hash:net,port", "hash:ip,port,ip",
// "hash:ip,port,net", ...); a match of another type, or of a port along
// the source, is ErrUnknown.
package ipsetmatch

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ErrUnknown is a set type, or a match of it, this package does not model.
var ErrUnknown = errors.New("ipset match not modelled")

// Packet is what a match looks at: the addresses, the protocol ("tcp")
// and the destination port.
type Packet struct {
	Src, Dst netip.Addr
	Proto    string
	DPort    int
}

// Contains reports whether p's element along flags ("dst,dst": each
// dimension of the set's type from the destination or the source) is a
// member of a set of type typ. members are in ipset's notation and sorted.
// The types are the hash: ones of ip, net and port dimensions.
func Contains(typ string, members []string, flags []string, p Packet) (bool, error) {
	kind, ok := strings.CutPrefix(typ, "hash:")
	if !ok {
		return false, fmt.Errorf("type %s: %w", typ, ErrUnknown)
	}
	dims := strings.Split(kind, ",")
	if len(flags) < len(dims) {
		return false, fmt.Errorf("type %s matched along %s: %w", typ, strings.Join(flags, ","), ErrUnknown)
	}
	want := make([]string, len(dims))
	var nets []int
	for i, dim := range dims {
		addr := p.Dst
		if flags[i] == "src" {
			addr = p.Src
		}
		switch dim {
		case "ip":
			want[i] = addr.String()
		case "net":
			want[i], nets = addr.String(), append(nets, i)
		case "port":
			if flags[i] == "src" {
				return false, fmt.Errorf("type %s: a packet has no source port to match: %w", typ, ErrUnknown)
			}
			want[i] = p.Proto + ":" + strconv.Itoa(p.DPort)
		default:
			return false, fmt.Errorf("type %s: %w", typ, ErrUnknown)
		}
	}
	if len(nets) == 0 {
		_, found := slices.BinarySearch(members, strings.Join(want, ","))
		return found, nil
	}
	for _, m := range members {
		parts := strings.Split(m, ",")
		if len(parts) != len(want) {
			continue
		}
		match := true
		for i := range parts {
			if slices.Contains(nets, i) {
				pfx, err := Prefix(parts[i])
				a, _ := netip.ParseAddr(want[i])
				match = match && err == nil && pfx.Contains(a)
			} else {
				match = match && parts[i] == want[i]
			}
		}
		if match {
			return true, nil
		}
	}
	return false, nil
}

// Prefix reads a net member, or an iptables -s/-d argument: "10.0.0.0/8",
// or an address as a host prefix.
func Prefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or a CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

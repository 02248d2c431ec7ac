package troubleshoot

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
)

// IPSets turns what netlink lists of the node's ipsets (IpsetListAll)
// into what xtables.Ruleset.SetIPSets takes, so that the iptables
// readings follow other programs' "-m set" rules. A set of a type the
// trace does not model (not hash: of ip, net and port dimensions) is left
// out: a rule on it matches nothing.
func IPSets(results []netlink.IPSetResult) map[string]xtables.IPSet {
	out := make(map[string]xtables.IPSet, len(results))
	for i := range results {
		r := &results[i]
		if !modelled(r.TypeName) {
			continue
		}
		set := xtables.IPSet{Type: r.TypeName, Members: make([]string, 0, len(r.Entries))}
		ok := true
		for j := range r.Entries {
			m, known := member(r.TypeName, &r.Entries[j])
			if !known {
				ok = false
				break
			}
			set.Members = append(set.Members, m)
		}
		if ok {
			slices.Sort(set.Members)
			out[r.SetName] = set
		}
	}
	return out
}

// modelled reports whether the trace models sets of type typ.
func modelled(typ string) bool {
	kind, ok := strings.CutPrefix(typ, "hash:")
	return ok && !slices.ContainsFunc(strings.Split(kind, ","), func(d string) bool { return d != "ip" && d != "net" && d != "port" })
}

// member writes a netlink entry of a set of type typ in ipset's notation
// ("10.96.0.10,tcp:80"); known is false for a type the trace does not
// model.
func member(typ string, e *netlink.IPSetEntry) (m string, known bool) {
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
			if e.Port == nil {
				return "", false
			}
			proto := "tcp"
			if e.Protocol != nil {
				switch *e.Protocol {
				case 6:
				case 17:
					proto = "udp"
				case 132:
					proto = "sctp"
				default:
					return "", false
				}
			}
			parts = append(parts, proto+":"+strconv.Itoa(int(*e.Port)))
		default:
			return "", false
		}
	}
	return strings.Join(parts, ","), true
}

package ipvs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/vishvananda/netlink"
)

// ReadIPSets lists every program's ipsets in the calling thread's network
// namespace as xtables.Ruleset.SetIPSets takes them, so that an iptables
// reading follows other programs' "-m set" rules (NamedReading.Others, or
// an iptables dataplane's). A set of a type the trace does not model (not
// hash: of ip, net and port dimensions) is left out: a rule on it matches
// nothing.
func ReadIPSets() (map[string]xtables.IPSet, error) {
	res, err := netlink.IpsetListAll()
	if err != nil {
		return nil, fmt.Errorf("list the ipsets: %w", err)
	}
	return ipSets(res), nil
}

// ipSets turns what netlink lists of ipsets into what
// xtables.Ruleset.SetIPSets takes.
func ipSets(results []netlink.IPSetResult) map[string]xtables.IPSet {
	out := make(map[string]xtables.IPSet, len(results))
	for i := range results {
		r := &results[i]
		if !modelled(r.TypeName) {
			continue
		}
		set := xtables.IPSet{Type: r.TypeName, Members: make([]string, 0, len(r.Entries))}
		ok := true
		for j := range r.Entries {
			m, known := handle.SetMember(r.TypeName, &r.Entries[j])
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

package nftables

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// Ruleset is the dataplane's table as the kernel holds it, read from what
// "nft list table ip|ip6 <table>" prints, so that packets can be followed
// through what is really there rather than through what the Dataplane
// meant to write. ParseListing makes one.
type Ruleset struct {
	t    *knftables.FakeTable
	ipv6 bool
}

// kernelSpellings rewrites the forms nft lists into those the dataplane
// writes, which the tracer reads.
var kernelSpellings = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(` comment "[^"]*"$`), ""},
	{regexp.MustCompile(`meta mark & (0x[0-9a-f]+) != 0x0+\b`), "mark and $1 != 0"},
	{regexp.MustCompile(`meta mark set meta mark \| (0x[0-9a-f]+)`), "mark set mark or $1"},
	{regexp.MustCompile(`meta mark set meta mark \^ (0x[0-9a-f]+)`), "mark set mark xor $1"},
	{regexp.MustCompile(`dnat (ip6?) to numgen`), "dnat $1 addr . port to numgen"},
	{regexp.MustCompile(`dnat (ip6?) to (ip6?) daddr`), "dnat $1 addr . port to $2 daddr"},
}

// ParseListing reads what "nft list table <family> <table>" printed of a
// table of this dataplane. Rules keep their text, in the dataplane's
// spelling; Trace fails on a rule of a form the dataplane does not write.
func ParseListing(listing []byte, family v1.IPFamily) (*Ruleset, error) {
	rs := &Ruleset{ipv6: family == v1.IPv6Protocol, t: &knftables.FakeTable{
		Chains: map[string]*knftables.FakeChain{}, Sets: map[string]*knftables.FakeSet{}, Maps: map[string]*knftables.FakeMap{},
	}}
	var chain *knftables.FakeChain
	var elems *[]*knftables.Element
	// pending holds the lines of an elements list spread over lines,
	// joined once: a map of a big cluster spans thousands.
	var pending []string
	for n, raw := range strings.Split(string(listing), "\n") {
		line := strings.TrimSpace(raw)
		if pending != nil {
			pending = append(pending, line)
			if strings.HasSuffix(line, "}") {
				*elems = parseElements(strings.Join(pending, " "))
				pending = nil
			}
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "table":
			if len(f) != 4 {
				return nil, fmt.Errorf("line %d: bad table line %q", n+1, line)
			}
			rs.t.Name = f[2]
		case f[0] == "}":
			chain, elems = nil, nil
		case (f[0] == "chain" || f[0] == "set" || f[0] == "map") && f[len(f)-1] == "{":
			name := f[1]
			switch f[0] {
			case "chain":
				chain = &knftables.FakeChain{Chain: knftables.Chain{Name: name}}
				rs.t.Chains[name] = chain
			case "set":
				s := &knftables.FakeSet{Set: knftables.Set{Name: name}}
				rs.t.Sets[name] = s
				elems = &s.Elements
			case "map":
				m := &knftables.FakeMap{Map: knftables.Map{Name: name}}
				rs.t.Maps[name] = m
				elems = &m.Elements
			}
		case elems != nil && f[0] == "elements":
			if strings.HasSuffix(line, "}") {
				*elems = parseElements(line)
			} else {
				pending = []string{line}
			}
		case chain != nil:
			if f[0] == "type" || f[0] == "policy" {
				continue
			}
			for _, s := range kernelSpellings {
				line = s.re.ReplaceAllString(line, s.with)
			}
			chain.Rules = append(chain.Rules, &knftables.Rule{Chain: chain.Name, Rule: line})
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("unterminated elements list %q", pending[0])
	}
	return rs, nil
}

var elementComment = regexp.MustCompile(` comment "([^"]*)"`)

// parseElements reads "elements = { k1 . k2 [comment "c"] : v, ... }".
// A list cut off before its closing brace has no elements.
func parseElements(s string) []*knftables.Element {
	open, end := strings.Index(s, "{"), strings.LastIndex(s, "}")
	if open < 0 || end < open {
		return nil
	}
	body := s[open+1 : end]
	var out []*knftables.Element
	for _, e := range strings.Split(body, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		el := &knftables.Element{}
		if m := elementComment.FindStringSubmatch(e); m != nil {
			c := m[1]
			el.Comment = &c
			e = elementComment.ReplaceAllString(e, "")
		}
		key, value, isMap := strings.Cut(e, " : ")
		// Dynamic sets list each element's timeout and expiry.
		key, _, _ = strings.Cut(key, " timeout ")
		key, _, _ = strings.Cut(key, " expires ")
		el.Key = strings.Split(strings.TrimSpace(key), " . ")
		if isMap {
			el.Value = []string{strings.TrimSpace(value)}
		}
		out = append(out, el)
	}
	return out
}

// Trace follows the first packet of a connection through rs and returns
// the verdict in the shape State.LookupMode(ModeNFTables, ...) gives, with
// the chains it entered and map elements it matched, for people. nodeIPs
// are the addresses that count as the node's own, with loopback. Every
// branch of a random choice is followed, so that every endpoint the
// packet may reach is reported. An error means a rule of a form the
// dataplane does not write (someone else's), which the trace cannot
// follow.
func (rs *Ruleset) Trace(p dataplane.Packet, nodeIPs []netip.Addr) (dataplane.Verdict, []string, error) {
	tr := &tracer{t: rs.t, ipX: "ip", nodeIPs: nodeIPs, p: p, dst: p.Dst}
	if rs.ipv6 {
		tr.ipX = "ip6"
	}
	v, err := tr.run()
	return v, tr.steps, err
}

// Services returns the service ports the table has chains for, or
// no-endpoint elements of, sorted.
func (rs *Ruleset) Services() []servicemodel.PortName {
	var out []servicemodel.PortName
	for name := range rs.t.Chains {
		if isServiceChain(name) {
			out = append(out, portOfChain(name))
		}
	}
	for _, m := range rs.t.Maps {
		for _, e := range m.Elements {
			if e.Comment != nil {
				if pn := portOfBase(*e.Comment); pn.Name != "" {
					out = append(out, pn)
				}
			}
		}
	}
	slices.SortFunc(out, servicemodel.PortName.Compare)
	return slices.Compact(out)
}

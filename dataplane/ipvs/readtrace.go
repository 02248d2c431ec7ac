package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/internal/ipsetmatch"
	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Namer names the service port whose frontend (an address and port of
// protocol proto) a packet was sent to. The kernel holds no service names
// (IPVS and ipsets have no comments), so Trace asks for them.
type Namer func(proto v1.Protocol, frontend netip.AddrPort) servicemodel.PortName

// ErrUnknownRule is wrapped by the error of Trace when one of the
// dataplane's chains holds a rule of a form Trace cannot follow (changed
// by hand, or by another version).
var ErrUnknownRule = errors.New("a rule Trace cannot follow")

// Trace answers what the kernel, as read, does with the first packet of a
// connection p, in the shape State.Lookup answers, and which of the
// dataplane's rules and virtual servers the packet met, one line each. It
// follows the kernel's order: the nat hooks (where the dataplane's rules
// mark what to masquerade), then, for a local destination, the filter
// INPUT hook (drops, source ranges, health-check ports), then IPVS, which
// only sees local destinations (after a DNAT of the nat hooks, the
// cluster IP it leads to), then the nat POSTROUTING hook for each real
// server. The node's addresses (State.Node.IPs), loopback and the
// link's addresses are local. name, if not nil, names the service of the
// destination. IPVS mode's semantics are those of the package
// documentation.
func (r *Reading) Trace(p dataplane.Packet, nodeIPs []netip.Addr, name Namer) (dataplane.Verdict, []string, error) {
	src, sent := p.Src.Unmap(), p.Dst.Addr().Unmap()
	proto := handle.ProtoNumber(string(p.Protocol))
	isLocal := func(a netip.Addr) bool {
		_, bound := slices.BinarySearchFunc(r.LinkAddresses, a, netip.Addr.Compare)
		return bound || a.IsLoopback() || slices.Contains(nodeIPs, a)
	}
	t := &ruleTracer{r: r, p: p, proto: proto, src: src, dst: sent, dport: p.Dst.Port(),
		srcLocal: p.From == dataplane.FromNode || isLocal(src), dstLocal: isLocal(sent)}
	named := func() servicemodel.PortName {
		if name == nil {
			return servicemodel.PortName{}
		}
		return name(p.Protocol, netip.AddrPortFrom(sent, p.Dst.Port()))
	}
	hook := "PREROUTING"
	if p.From == dataplane.FromNode {
		hook = "OUTPUT"
	}
	if _, err := t.run("nat", hook, 0); err != nil {
		return dataplane.Verdict{}, t.steps, err
	}
	// A DNAT (to a cluster IP) changed what the rest of the path sees.
	dst, dport := t.dst, t.dport
	t.dstLocal = isLocal(dst)
	_, bound := slices.BinarySearchFunc(r.LinkAddresses, dst, netip.Addr.Compare)
	mark := t.mark
	accepted := false
	if t.dstLocal {
		res, err := t.run("filter", "INPUT", 0)
		if err != nil {
			return dataplane.Verdict{}, t.steps, err
		}
		switch res {
		case "DROP":
			if p.From != dataplane.FromNode {
				return dataplane.Verdict{Action: dataplane.Drop, Service: named()}, t.steps, nil
			}
			// IPVS takes the node's own packets at LOCAL_OUT, before
			// filter INPUT.
			t.steps = append(t.steps, "filter INPUT: not reached by the node's own packet, which IPVS takes at LOCAL_OUT")
		case "ACCEPT":
			accepted = true
		}
	}
	vs, ok := r.find(vsKey{dst, proto, dport})
	switch {
	case ok && !t.dstLocal:
		t.steps = append(t.steps, "ipvs: virtual server "+vs.String()+" is not seen: its address is not local (not on "+r.Link+")")
	case ok:
		t.steps = append(t.steps, "ipvs: virtual server "+vs.String()+": "+realServers(vs.RealServers))
	}
	if !ok || !t.dstLocal {
		switch {
		case accepted:
			return dataplane.Verdict{Action: dataplane.Accept, Service: named()}, t.steps, nil
		case bound:
			// The address is the node's: its stack refuses the port.
			t.steps = append(t.steps, "no virtual server: the node's stack refuses a port of an address on "+r.Link)
			return dataplane.Verdict{Action: dataplane.Reject}, t.steps, nil
		}
		return dataplane.Verdict{Action: dataplane.NotAService}, t.steps, nil
	}
	eps := weighted(vs.RealServers)
	if len(eps) == 0 {
		return dataplane.Verdict{Action: dataplane.Reject, Service: named()}, t.steps, nil
	}
	masqueraded, hairpin, err := t.postrouting(eps, src, mark, isLocal)
	if err != nil {
		return dataplane.Verdict{}, t.steps, err
	}
	return dataplane.Verdict{Action: dataplane.DNAT, Service: named(), Endpoints: eps,
		Masquerade: masqueraded == len(eps), Hairpin: hairpin, Affinity: vs.Persistent}, t.steps, nil
}

// weighted is the addresses of the real servers IPVS may pick, in order:
// one of weight 0 takes no new connections.
func weighted(list []RealServer) []netip.AddrPort {
	var eps []netip.AddrPort
	for _, rs := range list {
		if rs.Weight > 0 {
			eps = append(eps, rs.Address)
		}
	}
	slices.SortFunc(eps, netip.AddrPort.Compare)
	return eps
}

// postrouting sends the packet from src to each of eps through nat
// POSTROUTING, with the mark the nat hooks set: masqueraded counts the
// real servers it is masqueraded to, and hairpin is those, src's own, to
// which it is masqueraded whatever the mark says.
func (t *ruleTracer) postrouting(eps []netip.AddrPort, src netip.Addr, mark uint32, isLocal func(netip.Addr) bool) (masqueraded int, hairpin []netip.AddrPort, err error) {
	for _, ep := range eps {
		masq := func(m uint32) (bool, error) {
			t.dst, t.dport, t.mark, t.dstLocal = ep.Addr(), ep.Port(), m, isLocal(ep.Addr())
			res, err := t.run("nat", "POSTROUTING", 0)
			return res == "MASQUERADE", err
		}
		withMark, err := masq(mark)
		if err != nil {
			return 0, nil, err
		}
		if withMark {
			masqueraded++
		}
		if ep.Addr() != src {
			continue
		}
		if alone, err := masq(0); err != nil {
			return 0, nil, err
		} else if alone {
			hairpin = append(hairpin, ep)
		}
	}
	return masqueraded, hairpin, nil
}

func realServers(list []RealServer) string {
	if len(list) == 0 {
		return "no real servers"
	}
	s := make([]string, len(list))
	for i, rs := range list {
		s[i] = fmt.Sprintf("%s weight %d", rs.Address, rs.Weight)
	}
	return "real servers " + strings.Join(s, ", ")
}

// ruleTracer follows a packet through the dataplane's chains as read.
type ruleTracer struct {
	r                  *Reading
	p                  dataplane.Packet
	proto              uint16
	src, dst           netip.Addr
	dport              uint16
	srcLocal, dstLocal bool
	mark               uint32
	steps              []string
}

// run follows chain of table from its first rule and returns the final
// target met ("ACCEPT", "DROP", "MASQUERADE"), or "" when the packet came
// back out. A chain the reading lacks is empty, as a missing hook is.
func (t *ruleTracer) run(table, chain string, depth int) (string, error) {
	if depth > 8 {
		return "", fmt.Errorf("%s chain %s: jumps nest too deep: %w", table, chain, ErrUnknownRule)
	}
	for _, text := range t.r.Chains[table+" "+chain] {
		ru, err := parseRuleText(text)
		if err == nil {
			var ok bool
			if ok, err = t.matches(ru); err == nil && !ok {
				continue
			}
		}
		if err != nil {
			return "", fmt.Errorf("%s rule %q: %w", table, text, err)
		}
		step := table + " " + text
		if !slices.Contains(t.steps, step) {
			t.steps = append(t.steps, step)
		}
		switch ru.target {
		case "RETURN":
			return "", nil
		case "ACCEPT", "DROP", "MASQUERADE":
			return ru.target, nil
		case "DNAT":
			t.dst, t.dport = ru.to.Addr(), ru.to.Port()
			return ru.target, nil
		case "MARK":
			t.mark = t.mark&^ru.markMask ^ ru.markVal
		default:
			if _, ok := t.r.Chains[table+" "+ru.target]; !ok {
				return "", fmt.Errorf("%s rule %q: target %s is not one of the dataplane's chains: %w", table, text, ru.target, ErrUnknownRule)
			}
			res, err := t.run(table, ru.target, depth+1)
			if err != nil || res != "" {
				return res, err
			}
		}
	}
	return "", nil
}

// rule is one rule of the forms the dataplane writes, as "iptables -S"
// or the iptables package's fake prints it.
type rule struct {
	proto      string
	src, dst   netip.Prefix
	srcNeg     bool
	dstNeg     bool
	inIface    string
	inNeg      bool
	set        string
	setFlags   []string
	setNeg     bool
	srcType    string
	srcTypeNeg bool
	dstType    string
	dstTypeNeg bool
	hasMark    bool
	markNeg    bool
	// markVal and markMask are the mark match's, or the MARK target's as
	// --set-xmark: the mark becomes mark&^mask ^ val.
	markVal, markMask uint32
	ctstates          []string
	ctNeg             bool
	// dport is the port match's (-m tcp --dport), 0 for none.
	dport  uint16
	target string
	// to is a DNAT target's --to-destination.
	to netip.AddrPort
}

func parseRuleText(text string) (*rule, error) {
	words, err := splitRule(text)
	if err != nil {
		return nil, err
	}
	if len(words) < 2 || words[0] != "-A" {
		return nil, fmt.Errorf("not an -A rule: %w", ErrUnknownRule)
	}
	words = words[2:]
	r := &rule{}
	neg := false
	next := func(i *int) (string, error) {
		*i++
		if *i >= len(words) {
			return "", fmt.Errorf("%s without a value: %w", words[*i-1], ErrUnknownRule)
		}
		return words[*i], nil
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "!" {
			neg = true
			continue
		}
		var v string
		if w != "--random-fully" && w != "--random" {
			if v, err = next(&i); err != nil {
				return nil, err
			}
		}
		switch w {
		case "-m", "--comment":
		case "-p":
			r.proto = strings.ToLower(v)
		case "-s", "-d":
			p, err := ipsetmatch.Prefix(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", err, ErrUnknownRule)
			}
			if w == "-s" {
				r.src, r.srcNeg = p, neg
			} else {
				r.dst, r.dstNeg = p, neg
			}
		case "-i":
			r.inIface, r.inNeg = v, neg
		case "--match-set":
			flags, err := next(&i)
			if err != nil {
				return nil, err
			}
			r.set, r.setFlags, r.setNeg = v, strings.Split(flags, ","), neg
		case "--src-type":
			r.srcType, r.srcTypeNeg = v, neg
		case "--dst-type":
			r.dstType, r.dstTypeNeg = v, neg
		case "--mark":
			r.hasMark, r.markNeg = true, neg
			if r.markVal, r.markMask, err = parseMarkValue(v); err != nil {
				return nil, err
			}
		case "--ctstate":
			r.ctstates, r.ctNeg = strings.Split(v, ","), neg
		case "--dport":
			port, err := strconv.ParseUint(v, 10, 16)
			if err != nil || neg {
				return nil, fmt.Errorf("port match %q: %w", v, ErrUnknownRule)
			}
			r.dport = uint16(port)
		case "--to-destination":
			if r.to, err = netip.ParseAddrPort(v); err != nil {
				return nil, fmt.Errorf("DNAT to %q: %w", v, ErrUnknownRule)
			}
		case "-j":
			r.target = v
		case "--or-mark", "--xor-mark", "--set-xmark", "--set-mark":
			if r.markVal, r.markMask, err = parseMarkTarget(w, v); err != nil {
				return nil, err
			}
		case "--random-fully", "--random":
		default:
			return nil, fmt.Errorf("option %s: %w", w, ErrUnknownRule)
		}
		neg = false
	}
	if r.target == "" {
		return nil, fmt.Errorf("no target: %w", ErrUnknownRule)
	}
	return r, nil
}

// parseMarkTarget reads a MARK target's option opt of value v as
// --set-xmark's value and mask: the mark becomes mark&^mask ^ val.
func parseMarkTarget(opt, v string) (val, mask uint32, err error) {
	val, mask, err = parseMarkValue(v)
	if err != nil {
		return 0, 0, err
	}
	switch opt {
	case "--or-mark":
		mask = val
	case "--xor-mark":
		mask = 0
	case "--set-mark":
		if !strings.Contains(v, "/") {
			mask = ^uint32(0)
		}
		// --set-mark v/m clears m, then ors v: as xor when v is within
		// m, which is how iptables prints it.
	}
	return val, mask, nil
}

// parseMarkValue reads "0x4000" or "0x4000/0x4000"; the mask defaults to
// all bits.
func parseMarkValue(s string) (val, mask uint32, err error) {
	vs, ms, hasMask := strings.Cut(s, "/")
	v, err := strconv.ParseUint(vs, 0, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("mark %q: %w", s, ErrUnknownRule)
	}
	m := uint64(^uint32(0))
	if hasMask {
		if m, err = strconv.ParseUint(ms, 0, 32); err != nil {
			return 0, 0, fmt.Errorf("mark %q: %w", s, ErrUnknownRule)
		}
	}
	return uint32(v), uint32(m), nil
}

// splitRule splits a listed rule into words; double quotes group (a
// comment's text).
func splitRule(s string) ([]string, error) {
	var out []string
	var b strings.Builder
	in, quoted := false, false
	for _, c := range s {
		switch {
		case c == '"':
			quoted, in = !quoted, true
		case c == ' ' && !quoted:
			if in {
				out = append(out, b.String())
				b.Reset()
			}
			in = false
		default:
			b.WriteRune(c)
			in = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unbalanced quotes: %w", ErrUnknownRule)
	}
	if in {
		out = append(out, b.String())
	}
	return out, nil
}

func (t *ruleTracer) matches(r *rule) (bool, error) {
	switch {
	case r.proto != "" && r.proto != strings.ToLower(handle.ProtoName(t.proto)):
		return false, nil
	case r.src.IsValid() && r.src.Contains(t.src) == r.srcNeg:
		return false, nil
	case r.dst.IsValid() && r.dst.Contains(t.dst) == r.dstNeg:
		return false, nil
	case r.inIface != "" && t.inIface(r.inIface) == r.inNeg:
		return false, nil
	case r.hasMark && (t.mark&r.markMask == r.markVal) == r.markNeg:
		return false, nil
	case r.ctstates != nil && slices.Contains(r.ctstates, "NEW") == r.ctNeg:
		// Trace follows first packets only.
		return false, nil
	case r.dport != 0 && r.dport != t.dport:
		return false, nil
	}
	for _, at := range []struct {
		typ   string
		neg   bool
		local bool
	}{{r.srcType, r.srcTypeNeg, t.srcLocal}, {r.dstType, r.dstTypeNeg, t.dstLocal}} {
		switch at.typ {
		case "":
		case "LOCAL":
			if at.local == at.neg {
				return false, nil
			}
		default:
			return false, fmt.Errorf("address type %s: %w", at.typ, ErrUnknownRule)
		}
	}
	if r.set == "" {
		return true, nil
	}
	in, err := t.inSet(r.set, r.setFlags)
	return err == nil && in != r.setNeg, err
}

// inIface is "-i name" (ruleport.EntersVia).
func (t *ruleTracer) inIface(name string) bool { return ruleport.EntersVia(t.p, name) }

// inSet reports whether the packet's element along flags ("dst,dst") is a
// member of set name, as the kernel's set match decides.
func (t *ruleTracer) inSet(name string, flags []string) (bool, error) {
	set, ok := t.r.Sets[name]
	if !ok {
		// iptables refuses a rule naming a missing set, so only a set
		// destroyed under the rule gets here: it matches nothing.
		return false, nil
	}
	in, err := ipsetmatch.Contains(set.Type, set.Members, flags, ipsetmatch.Packet{
		Src: t.src, Dst: t.dst, Proto: strings.ToLower(handle.ProtoName(t.proto)), DPort: int(t.dport)})
	if err != nil {
		return false, fmt.Errorf("set %s: %w: %w", name, err, ErrUnknownRule)
	}
	return in, nil
}

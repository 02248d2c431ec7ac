package nftables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// Trace answers whether another table's base chain decides the first
// packet of a connection before the dataplane's nat chain sees it, at
// prerouting (output for a packet from the node): decided is true when a
// rule drops, rejects, DNATs or redirects it, and v is then that verdict,
// naming no service (it is not the proxy's); a redirect is a DNAT to the
// unspecified address at its port. steps name the rules that decided
// something, as "table chain: rule", for people. A rule of a form Trace
// cannot follow (a mark match, a map of addresses) is taken as not
// matching; when it would decide, a step "not followed: ..." says so.
func (o *Others) Trace(p dataplane.Packet, nodeIPs []netip.Addr) (v dataplane.Verdict, decided bool, steps []string) {
	hook := "prerouting"
	if p.From == dataplane.FromNode {
		hook = "output"
	}
	e := &othersTrace{p: p, nodeIPs: nodeIPs, ipX: "ip"}
	if o.family == v1.IPv6Protocol {
		e.ipX = "ip6"
	}
	for _, b := range o.hooks[hook] {
		e.unsure = false
		res := e.chain(b.t, b.c, 0)
		if (res.kind == oNext || res.kind == oReturn) && b.c.policy == "drop" && !e.unsure {
			e.steps = append(e.steps, b.t.name+" "+b.c.name+": policy drop")
			res.kind = oDrop
		}
		switch res.kind {
		case oDrop:
			return dataplane.Verdict{Action: dataplane.Drop}, true, e.steps
		case oReject:
			return dataplane.Verdict{Action: dataplane.Reject}, true, e.steps
		case oDNAT:
			slices.SortFunc(res.eps, netip.AddrPort.Compare)
			return dataplane.Verdict{Action: dataplane.DNAT, Endpoints: slices.Compact(res.eps)}, true, e.steps
		}
	}
	return dataplane.Verdict{}, false, e.steps
}

type okind int

const (
	oNext   okind = iota // no verdict: on to the next rule
	oReturn              // back to the calling chain
	oAccept
	oDrop
	oReject
	oDNAT
)

type oResult struct {
	kind okind
	eps  []netip.AddrPort
}

// othersTrace is one packet's way through other tables.
type othersTrace struct {
	p       dataplane.Packet
	nodeIPs []netip.Addr
	ipX     string
	steps   []string
	// unsure is set when a rule that could have decided was not followed.
	unsure bool
}

func (e *othersTrace) chain(t *otherTable, c *otherChain, depth int) oResult {
	if depth > maxOthersDepth {
		return oResult{}
	}
	for _, rule := range c.rules {
		res := e.rule(t, c.name, rule, depth)
		switch res.kind {
		case oNext:
			continue
		case oReturn:
			return oResult{kind: oReturn}
		}
		return res
	}
	return oResult{}
}

// maxOthersDepth bounds chain recursion, so that a looping ruleset cannot
// hang a trace.
const maxOthersDepth = 32

// deciding are the words of a rule that make it decide something.
var deciding = []string{"accept", "drop", "reject", "jump", "goto", "vmap", "dnat", "redirect"}

// rule applies one rule: its matches, then its verdict.
func (e *othersTrace) rule(t *otherTable, chain string, r otherRule, depth int) oResult {
	toks := r.toks
	for i := 0; i < len(toks); {
		switch toks[i] {
		case "counter":
			i++
			for i+1 < len(toks) && (toks[i] == "packets" || toks[i] == "bytes") {
				i += 2
			}
			continue
		case "comment":
			i += 2
			continue
		}
		if res, ok := e.statement(t, chain, r, i, depth); ok {
			return res
		}
		next, res, done := e.match(t, chain, r, i, depth)
		if done {
			return res
		}
		i = next
	}
	return oResult{}
}

// statement applies the statement at r.toks[i], if there is one there; ok
// reports that there is, and then res is the rule's result.
func (e *othersTrace) statement(t *otherTable, chain string, r otherRule, i, depth int) (res oResult, ok bool) {
	rule, toks := r.text, r.toks
	switch tok := toks[i]; tok {
	case "accept", "drop", "return":
		e.step(t, chain, rule)
		return oResult{kind: map[string]okind{"accept": oAccept, "drop": oDrop, "return": oReturn}[tok]}, true
	case "reject":
		e.step(t, chain, rule)
		return oResult{kind: oReject}, true
	case "jump", "goto":
		if i+1 >= len(toks) {
			return e.unknown(t, chain, rule), true
		}
		e.step(t, chain, rule)
		return e.jump(t, tok, toks[i+1], depth), true
	case "dnat", "redirect":
		ep, found := e.natTarget(toks[i:])
		if !found {
			return e.unknown(t, chain, rule), true
		}
		e.step(t, chain, rule)
		return oResult{kind: oDNAT, eps: []netip.AddrPort{ep}}, true
	case "masquerade", "snat", "notrack":
		return oResult{}, true
	case "numgen":
		// "numgen random mod N vmap { 0 : goto a, ... }": every branch.
		if i+5 >= len(toks) || toks[i+1] != "random" || toks[i+2] != "mod" || toks[i+4] != "vmap" || !strings.HasPrefix(toks[i+5], "{") {
			return e.unknown(t, chain, rule), true
		}
		e.step(t, chain, rule)
		return e.branches(t, parseElements("= "+toks[i+5]), depth), true
	}
	return oResult{}, false
}

// match applies the match at r.toks[i]: selectors joined by " . ", then a
// value, a set or a verdict map. next is where the rule goes on when the
// packet matches; done reports that the rule ends here, with res.
func (e *othersTrace) match(t *otherTable, chain string, r otherRule, i, depth int) (next int, res oResult, done bool) {
	rule, toks := r.text, r.toks
	var keys [][]string
	for {
		sel, n := e.selector(toks[i:])
		switch {
		case n == 0:
			return i, e.unknown(t, chain, rule), true
		case sel == nil:
			return i, oResult{}, true
		}
		keys, i = append(keys, sel), i+n
		if i < len(toks) && toks[i] == "." {
			i++
			continue
		}
		break
	}
	if i >= len(toks) {
		return i, e.unknown(t, chain, rule), true
	}
	switch op := toks[i]; {
	case op == "vmap":
		return i, e.vmapMatch(t, chain, r, i, keys, depth), true
	case len(keys) > 1 || strings.HasPrefix(op, "@"):
		// A concatenation is matched against a set.
		if len(keys) > 1 && !strings.HasPrefix(op, "@") && !strings.HasPrefix(op, "{") {
			return i, e.unknown(t, chain, rule), true
		}
		set, ok := e.set(t, op)
		if !ok {
			return i, e.unknown(t, chain, rule), true
		}
		if set.lookup(keys) == nil {
			return i, oResult{}, true
		}
		return i + 1, oResult{}, false
	}
	return e.compare(t, chain, rule, toks, i, keys)
}

// vmapMatch applies the verdict map named at r.toks[i+1] to keys; a key it
// does not hold leaves the rule without a verdict.
func (e *othersTrace) vmapMatch(t *otherTable, chain string, r otherRule, i int, keys [][]string, depth int) oResult {
	rule, toks := r.text, r.toks
	if i+1 >= len(toks) {
		return e.unknown(t, chain, rule)
	}
	set, ok := e.set(t, toks[i+1])
	if !ok {
		return e.unknown(t, chain, rule)
	}
	if el := set.lookup(keys); el != nil && len(el.Value) == 1 {
		e.step(t, chain, rule+"  ["+strings.Join(el.Key, " . ")+" : "+el.Value[0]+"]")
		return e.verdict(t, el.Value[0], depth)
	}
	return oResult{}
}

// compare matches one selector's key against the value or set at toks[i],
// after an optional "!=".
func (e *othersTrace) compare(t *otherTable, chain, rule string, toks []string, i int, keys [][]string) (next int, res oResult, done bool) {
	neg := toks[i] == "!="
	if neg {
		i++
	}
	if i >= len(toks) || len(keys) != 1 {
		return i, e.unknown(t, chain, rule), true
	}
	var hit bool
	if strings.HasPrefix(toks[i], "{") || strings.HasPrefix(toks[i], "@") {
		set, ok := e.set(t, toks[i])
		if !ok {
			return i, e.unknown(t, chain, rule), true
		}
		hit = set.lookup(keys) != nil
	} else {
		hit = matchOne(keys[0], toks[i])
	}
	if hit == neg {
		return i, oResult{}, true
	}
	return i + 1, oResult{}, false
}

// step records a rule that decided something.
func (e *othersTrace) step(t *otherTable, chain, rule string) {
	e.steps = append(e.steps, t.name+" "+chain+": "+rule)
}

// unknown is a rule Trace cannot follow: it does not match, and when it
// could have decided the trace is unsure.
func (e *othersTrace) unknown(t *otherTable, chain, rule string) oResult {
	f := strings.Fields(rule)
	if slices.ContainsFunc(deciding, func(w string) bool { return slices.Contains(f, w) }) {
		e.steps = append(e.steps, "not followed: "+t.name+" "+chain+": "+rule)
		e.unsure = true
	}
	return oResult{}
}

func (e *othersTrace) jump(t *otherTable, how, target string, depth int) oResult {
	c, ok := t.chains[target]
	if !ok {
		return oResult{}
	}
	res := e.chain(t, c, depth+1)
	switch {
	case res.kind != oNext && res.kind != oReturn:
		return res
	case how == "goto":
		// The chain that went there ends with it.
		return oResult{kind: oReturn}
	}
	return oResult{}
}

// verdict applies a verdict map's value.
func (e *othersTrace) verdict(t *otherTable, v string, depth int) oResult {
	f := strings.Fields(v)
	switch {
	case len(f) == 2 && (f[0] == "jump" || f[0] == "goto"):
		return e.jump(t, f[0], f[1], depth)
	case len(f) == 1 && f[0] == "accept":
		return oResult{kind: oAccept}
	case len(f) == 1 && f[0] == "drop":
		return oResult{kind: oDrop}
	case len(f) == 1 && f[0] == "return":
		return oResult{kind: oReturn}
	}
	e.unsure = true
	return oResult{}
}

// branches follows every branch of a random choice; they decide together
// only when they all DNAT, or all do the same.
func (e *othersTrace) branches(t *otherTable, elems []*knftables.Element, depth int) oResult {
	var out oResult
	for i, el := range elems {
		if len(el.Value) != 1 {
			e.unsure = true
			return oResult{}
		}
		res := e.verdict(t, el.Value[0], depth)
		if i > 0 && res.kind != out.kind {
			e.unsure = true
			return oResult{}
		}
		out.kind, out.eps = res.kind, append(out.eps, res.eps...)
	}
	return out
}

// natTarget reads "dnat [ip|ip6] to ADDR[:PORT]" or "redirect [to :PORT]".
func (e *othersTrace) natTarget(toks []string) (netip.AddrPort, bool) {
	if toks[0] == "redirect" {
		any := netip.IPv4Unspecified()
		if e.p.Dst.Addr().Is6() {
			any = netip.IPv6Unspecified()
		}
		port := e.p.Dst.Port()
		if len(toks) >= 3 && toks[1] == "to" {
			n, err := strconv.ParseUint(strings.TrimPrefix(toks[2], ":"), 10, 16)
			if err != nil {
				return netip.AddrPort{}, false
			}
			port = uint16(n)
		}
		return netip.AddrPortFrom(any, port), true
	}
	i := 1
	if i < len(toks) && (toks[i] == "ip" || toks[i] == "ip6") {
		i++
	}
	if i+1 >= len(toks) || toks[i] != "to" {
		return netip.AddrPort{}, false
	}
	s := toks[i+1]
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, true
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a, e.p.Dst.Port()), true
}

// selector reads the selector at the start of toks and returns the values
// the packet has for it (each a possible one: a protocol as a name and
// number) and how many tokens it took; n is 0 for one it does not know,
// values nil for one that makes the rule not match at all ("tcp dport"
// of a UDP packet).
func (e *othersTrace) selector(toks []string) (values []string, n int) {
	two := func(a, b string) bool { return len(toks) >= 2 && toks[0] == a && toks[1] == b }
	proto := strings.ToLower(string(e.p.Protocol))
	switch {
	case two(e.ipX, "daddr"):
		return []string{e.p.Dst.Addr().String()}, 2
	case two(e.ipX, "saddr"):
		return []string{e.p.Src.String()}, 2
	case two("meta", "l4proto"), two("ip", "protocol") && e.ipX == "ip", two("ip6", "nexthdr") && e.ipX == "ip6":
		return []string{proto, protoNumber(proto)}, 2
	case two("th", "dport"):
		return []string{strconv.Itoa(int(e.p.Dst.Port()))}, 2
	case len(toks) >= 2 && toks[1] == "dport" && slices.Contains([]string{"tcp", "udp", "sctp"}, toks[0]):
		if toks[0] != proto {
			// "tcp dport" matches TCP packets only, whatever follows.
			return nil, 2
		}
		return []string{strconv.Itoa(int(e.p.Dst.Port()))}, 2
	case len(toks) >= 3 && toks[0] == "fib" && toks[1] == "daddr" && toks[2] == "type":
		if e.p.Dst.Addr().IsLoopback() || slices.Contains(e.nodeIPs, e.p.Dst.Addr()) {
			return []string{"local"}, 3
		}
		return []string{"unicast"}, 3
	case two("ct", "state"):
		return []string{"new"}, 2
	case len(toks) >= 1 && (toks[0] == "iifname" || toks[0] == "iif"), two("meta", "iifname"), two("meta", "iif"):
		n := 1
		if toks[0] == "meta" {
			n = 2
		}
		switch {
		case e.p.From == dataplane.FromNode:
			// A packet of the node has no input interface.
			return []string{""}, n
		case e.p.Interface != "":
			return []string{e.p.Interface}, n
		}
		// Which interface a packet enters by is not known.
	}
	return nil, 0
}

func protoNumber(p string) string {
	return map[string]string{"tcp": "6", "udp": "17", "sctp": "132"}[p]
}

// set returns a named set or map ("@name") or an anonymous one
// ("{ a, b }").
func (e *othersTrace) set(t *otherTable, s string) (*otherSet, bool) {
	if name, ok := strings.CutPrefix(s, "@"); ok {
		set, ok := t.sets[name]
		return set, ok
	}
	if strings.HasPrefix(s, "{") {
		return newOtherSet(parseElements("= " + s)), true
	}
	return nil, false
}

// lookup returns the element whose key the packet's values for each
// selector match, nil if none does.
func (s *otherSet) lookup(keys [][]string) *knftables.Element {
	// Every combination of the values (a protocol has a name and a
	// number): at most a few.
	var try func(i int, prefix string) *knftables.Element
	try = func(i int, prefix string) *knftables.Element {
		if i == len(keys) {
			return s.exact[prefix]
		}
		for _, v := range keys[i] {
			k := v
			if i > 0 {
				k = prefix + " . " + v
			}
			if el := try(i+1, k); el != nil {
				return el
			}
		}
		return nil
	}
	if el := try(0, ""); el != nil {
		return el
	}
	for _, el := range s.ranged {
		if matchKey(keys, el.Key) {
			return el
		}
	}
	return nil
}

// matchKey reports whether the packet's values for each selector match an
// element's key, component by component.
func matchKey(keys [][]string, key []string) bool {
	if len(keys) != len(key) {
		return false
	}
	for i, k := range key {
		if !matchOne(keys[i], k) {
			return false
		}
	}
	return true
}

// matchOne reports whether one of values matches x: equal, or inside x as
// a prefix ("10.0.0.0/8") or a range ("10.0.0.1-10.0.0.9", "80-90").
func matchOne(values []string, x string) bool {
	x = strings.Trim(x, `"`)
	for _, v := range values {
		switch {
		case v == x:
			return true
		case strings.HasSuffix(x, "*"):
			// An interface name pattern.
			if strings.HasPrefix(v, strings.TrimSuffix(x, "*")) {
				return true
			}
		case strings.Contains(x, "/"):
			p, err1 := netip.ParsePrefix(x)
			a, err2 := netip.ParseAddr(v)
			if err1 == nil && err2 == nil && p.Contains(a) {
				return true
			}
		case strings.Contains(x, "-"):
			lo, hi, _ := strings.Cut(x, "-")
			if a, err := netip.ParseAddr(v); err == nil {
				l, err1 := netip.ParseAddr(lo)
				h, err2 := netip.ParseAddr(hi)
				if err1 == nil && err2 == nil && l.Compare(a) <= 0 && a.Compare(h) <= 0 {
					return true
				}
			} else if n, err := strconv.Atoi(v); err == nil {
				l, err1 := strconv.Atoi(lo)
				h, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && l <= n && n <= h {
					return true
				}
			}
		}
	}
	return false
}

// tokenize splits a rule into words, keeping a quoted string and a braced
// list ("{ a, b }") each one token.
func tokenize(rule string) []string {
	var out []string
	for i := 0; i < len(rule); {
		switch c := rule[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			j := strings.IndexByte(rule[i+1:], '"')
			if j < 0 {
				return append(out, rule[i:])
			}
			out, i = append(out, rule[i:i+j+2]), i+j+2
		case c == '{':
			j := strings.IndexByte(rule[i:], '}')
			if j < 0 {
				return append(out, rule[i:])
			}
			out, i = append(out, rule[i:i+j+1]), i+j+1
		default:
			j := strings.IndexAny(rule[i:], " \t")
			if j < 0 {
				return append(out, rule[i:])
			}
			out, i = append(out, rule[i:i+j]), i+j
		}
	}
	return out
}

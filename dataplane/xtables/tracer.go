package xtables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/ipsetmatch"
	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
)

// maxTraceDepth bounds chain recursion, so that a looping ruleset cannot
// hang a trace.
const maxTraceDepth = 32

// Trace follows the first packet of a connection through rs and returns
// the verdict in the shape State.Lookup gives: mangle then nat PREROUTING
// (mangle then nat OUTPUT for packets from the node), then the filter
// hooks the packet crosses, then nat POSTROUTING for the masquerade.
// nodeIPs are the addresses that count as the node's own, with loopback,
// for "--src-type/--dst-type LOCAL". A DROP or REJECT in mangle or filter
// is the verdict, naming the service its rule's comment names.
//
// A REDIRECT is a DNAT to the node itself: to the unspecified address at
// its --to-ports, the port a socket of the node gets the connection on.
// So is a DNAT of the port alone ("--to-destination :PORT") of a packet
// for an address of the node.
// A TPROXY in mangle PREROUTING gives the same verdict without rewriting
// the packet: to its --on-ip (unspecified when not given, any of the
// node's addresses) at its --on-port (the packet's own port when 0); nat
// PREROUTING is not consulted, conntrack sees no DNAT, and the packet is
// delivered locally (filter INPUT), unmasqueraded. The trace assumes the
// policy routing that delivers the packets of --tproxy-mark locally, and
// a transparent socket on the port.
// A statistic match is taken both ways, so every endpoint the packet may
// reach is reported; "recent --rcheck" never matches (there is no history)
// but marks the verdict as pinned by affinity. Conntrack state is NEW, plus
// DNAT once the packet was rewritten.
func (rs *Ruleset) Trace(p dataplane.Packet, nodeIPs []netip.Addr) dataplane.Verdict {
	v, _ := rs.trace(p, nodeIPs)
	return v
}

// TraceSteps is Trace that also returns the rules the packet matched that
// decide something (a jump, a mark, a verdict), in the order it met them,
// each as "table CHAIN: rule" (the rule as listed after "-A CHAIN"), for
// people to read; their wording is not part of the contract.
func (rs *Ruleset) TraceSteps(p dataplane.Packet, nodeIPs []netip.Addr) (dataplane.Verdict, []string) {
	return rs.trace(p, nodeIPs)
}

func (rs *Ruleset) trace(p dataplane.Packet, nodeIPs []netip.Addr) (dataplane.Verdict, []string) {
	t := &tracer{rs: rs, p: p, nodeIPs: nodeIPs, src: p.Src, dst: p.Dst.Addr(), dport: int(p.Dst.Port()),
		proto: strings.ToLower(string(p.Protocol))}

	hook := "PREROUTING"
	if p.From == dataplane.FromNode {
		hook = "OUTPUT"
	}
	t.run("mangle", hook, 0)
	if v, ok := t.tableVerdict(); ok {
		return v, t.steps
	}
	if len(t.outcomes) == 0 {
		// A TPROXY's packet is not NATed: nat does not see it.
		t.run("nat", hook, 0)
	}

	if len(t.outcomes) > 0 && !t.outcomes[0].tproxy {
		// The filter table sees the rewritten packet; any candidate will
		// do, as the filter rules never match endpoint addresses.
		t.dst, t.dport = t.outcomes[0].ep.Addr(), int(t.outcomes[0].ep.Port())
		t.dnat = true
	}
	hooks := []string{"FORWARD"}
	if t.isLocal(t.dst) || len(t.outcomes) > 0 && t.outcomes[0].redirect {
		hooks = []string{"INPUT"}
	}
	if p.From == dataplane.FromNode {
		hooks = []string{"OUTPUT"}
		if t.isLocal(t.dst) {
			hooks = append(hooks, "INPUT")
		}
	}
	for _, h := range hooks {
		t.verdict, t.verdictRule = "", nil
		t.run("filter", h, 0)
		if v, ok := t.tableVerdict(); ok {
			return v, t.steps
		}
		if t.verdict == "ACCEPT" && t.verdictRule.hcAccept() && len(t.outcomes) == 0 {
			return dataplane.Verdict{Action: dataplane.Accept, Service: t.verdictRule.service()}, t.steps
		}
	}
	if len(t.outcomes) == 0 {
		return dataplane.Verdict{Action: dataplane.NotAService}, t.steps
	}
	v := dataplane.Verdict{Action: dataplane.DNAT, Service: t.service, Affinity: t.affinity, Masquerade: true}
	for _, o := range t.outcomes {
		if slices.Contains(v.Endpoints, o.ep) {
			continue
		}
		v.Endpoints = append(v.Endpoints, o.ep)
		t.mark = o.mark
		t.masq = false
		steps := len(t.steps)
		if !o.tproxy {
			// A TPROXY's packet is delivered from PREROUTING.
			t.run("nat", "POSTROUTING", 0)
		}
		if len(v.Endpoints) > 1 {
			// Every candidate crosses the same rules; name them once.
			t.steps = t.steps[:steps]
		}
		if !t.masq || o.redirect {
			v.Masquerade = false
		}
		if o.hairpin {
			v.Hairpin = append(v.Hairpin, o.ep)
		}
	}
	slices.SortFunc(v.Endpoints, netip.AddrPort.Compare)
	slices.SortFunc(v.Hairpin, netip.AddrPort.Compare)
	return v, t.steps
}

type outcome struct {
	ep      netip.AddrPort
	mark    uint32
	hairpin bool
	// redirect is a REDIRECT or a TPROXY: ep is the socket of the node
	// that gets the connection (the unspecified address: any of its
	// addresses).
	redirect bool
	// tproxy is a TPROXY: the packet is not rewritten.
	tproxy bool
}

type tracer struct {
	rs      *Ruleset
	p       dataplane.Packet
	nodeIPs []netip.Addr

	src, dst netip.Addr
	dport    int
	proto    string
	mark     uint32
	dnat     bool

	outcomes []outcome
	service  servicemodel.PortName
	affinity bool

	// verdict is how the last run of mangle or filter ended (ACCEPT,
	// DROP, REJECT or ""), by verdictRule.
	verdict     string
	verdictRule *Rule
	masq        bool

	steps []string
}

// redirectTo is where a REDIRECT with --to-ports ports sends the packet:
// to the node itself (the unspecified address stands for whichever of its
// addresses the kernel picks) at the first port of ports, or at the
// packet's own port without one.
func (t *tracer) redirectTo(ports string) netip.AddrPort {
	port := uint16(t.dport)
	first, _, _ := strings.Cut(ports, "-")
	if n, err := strconv.ParseUint(first, 10, 16); err == nil {
		port = uint16(n)
	}
	any := netip.IPv4Unspecified()
	if t.dst.Is6() {
		any = netip.IPv6Unspecified()
	}
	return netip.AddrPortFrom(any, port)
}

// dnatTo is the outcome of a DNAT to dest. One of the port alone keeps
// the packet's address; to an address of the node, it is a REDIRECT's
// (the unspecified address at that port), whichever of them it was.
func (t *tracer) dnatTo(dest string, hairpin bool) outcome {
	port, ok := strings.CutPrefix(dest, ":")
	if !ok {
		ep, _ := netip.ParseAddrPort(dest)
		return outcome{ep: ep, mark: t.mark, hairpin: hairpin}
	}
	if t.isLocal(t.dst) {
		return outcome{ep: t.redirectTo(port), mark: t.mark, redirect: true}
	}
	n, _ := strconv.ParseUint(port, 10, 16)
	return outcome{ep: netip.AddrPortFrom(t.dst, uint16(n)), mark: t.mark, hairpin: hairpin}
}

// tproxyTo is where a TPROXY sends the packet: a socket of the node at
// --on-ip, or any of its addresses (as redirectTo), and at --on-port, or
// the packet's own port for 0.
func (t *tracer) tproxyTo(tp tproxyTarget) netip.AddrPort {
	ep := t.redirectTo("")
	if tp.onPort != 0 {
		ep = netip.AddrPortFrom(ep.Addr(), uint16(tp.onPort))
	}
	if tp.onIP.IsValid() && !tp.onIP.IsUnspecified() {
		ep = netip.AddrPortFrom(tp.onIP, ep.Port())
	}
	return ep
}

// tableVerdict is the verdict of a DROP or REJECT the last run of mangle
// or filter ended with.
func (t *tracer) tableVerdict() (dataplane.Verdict, bool) {
	switch t.verdict {
	case "DROP":
		return dataplane.Verdict{Action: dataplane.Drop, Service: t.verdictRule.service()}, true
	case "REJECT":
		return dataplane.Verdict{Action: dataplane.Reject, Service: t.verdictRule.service()}, true
	}
	return dataplane.Verdict{}, false
}

func (t *tracer) isLocal(a netip.Addr) bool {
	return a.IsLoopback() || slices.Contains(t.nodeIPs, a)
}

// chainResult is how a chain invocation ended.
type chainResult int

const (
	fellThrough chainResult = iota
	returned
	terminated
)

// run executes chain. A DNAT in an invocation that also sent the packet to
// the mark-for-masquerade chain is a hairpin: in an endpoint chain only the
// "-s <endpoint IP>" rule does that.
func (t *tracer) run(table, chain string, depth int) chainResult {
	if depth > maxTraceDepth {
		return terminated
	}
	tb := t.rs.tables[table]
	ch, ok := tb.chains[chain]
	if !ok {
		return fellThrough
	}
	localMark := false
	for _, r := range ch.rules {
		if !t.matches(r) {
			continue
		}
		if r.recentCheck {
			continue
		}
		if r.Target != "" {
			t.steps = append(t.steps, table+" "+chain+": "+r.Text)
		}
		switch r.Target {
		case "":
			continue
		case "ACCEPT", "DROP", "REJECT":
			if table != "nat" {
				t.verdict, t.verdictRule = r.Target, r
			}
			return terminated
		case "RETURN":
			return returned
		case "MARK":
			if r.setsMark {
				t.mark |= r.orMark
				localMark = true
			}
			if r.clearsMark {
				t.mark ^= r.xorMark
			}
			continue
		case "MASQUERADE":
			t.masq = true
			return terminated
		case "DNAT":
			o := t.dnatTo(r.toDestination, localMark)
			if o.redirect && t.service == (servicemodel.PortName{}) && len(t.outcomes) == 0 {
				t.service = r.service()
			}
			t.outcomes = append(t.outcomes, o)
			return terminated
		case "REDIRECT":
			if table != "nat" {
				continue
			}
			if t.service == (servicemodel.PortName{}) && len(t.outcomes) == 0 {
				t.service = r.service()
			}
			t.outcomes = append(t.outcomes, outcome{ep: t.redirectTo(r.toPorts), mark: t.mark, redirect: true})
			return terminated
		case "TPROXY":
			// Valid from mangle PREROUTING only, which packets from the
			// node do not cross first.
			if table != "mangle" || t.p.From == dataplane.FromNode {
				continue
			}
			if t.service == (servicemodel.PortName{}) && len(t.outcomes) == 0 {
				t.service = r.service()
			}
			t.mark = t.mark&^r.tproxy.markMask ^ r.tproxy.markVal
			t.outcomes = append(t.outcomes, outcome{ep: t.tproxyTo(r.tproxy), mark: t.mark, redirect: true, tproxy: true})
			return terminated
		}
		// A jump to a user chain: remember which service the packet is
		// for from the first rule that names one, and explore it.
		before, saveMark := len(t.outcomes), t.mark
		setService := table != "filter" && t.service == (servicemodel.PortName{}) && len(t.outcomes) == 0
		if setService {
			t.service = r.service()
		}
		if t.rs.hasAffinityCheck(table, r.Target) {
			t.affinity = true
		}
		res := t.run(table, r.Target, depth+1)
		if t.markMasqChain(table, r.Target) {
			localMark = true
		}
		if setService && len(t.outcomes) == before {
			t.service = servicemodel.PortName{}
		}
		if res == terminated {
			if r.probabilistic {
				// The other branch of the coin flip goes on in this chain,
				// with the mark as it was before the jump.
				t.mark = saveMark
				continue
			}
			return terminated
		}
	}
	return fellThrough
}

// markMasqChain reports whether chain is a one-rule chain that only sets a
// mark (the mark-for-masquerade chain).
func (t *tracer) markMasqChain(table, chain string) bool {
	ch, ok := t.rs.tables[table].chains[chain]
	return ok && len(ch.rules) == 1 && ch.rules[0].Target == "MARK" && ch.rules[0].setsMark
}

// hasAffinityCheck reports whether chain starts with recent --rcheck rules.
func (rs *Ruleset) hasAffinityCheck(table, chain string) bool {
	ch, ok := rs.tables[table].chains[chain]
	return ok && slices.ContainsFunc(ch.rules, func(r *Rule) bool { return r.recentCheck })
}

func (t *tracer) matches(r *Rule) bool {
	switch {
	case r.matchSet != "" && !t.inSet(r.matchSet):
		return false
	case r.proto != "" && r.proto != t.proto:
		return false
	case r.dport != 0 && r.dport != t.dport:
		return false
	case r.src != nil && !r.src.matches(t.src):
		return false
	case r.dst != nil && !r.dst.matches(t.dst):
		return false
	case r.srcLocal && (t.p.From == dataplane.FromNode || t.isLocal(t.src)) == r.srcNeg:
		return false
	case r.dstLocal && t.isLocal(t.dst) == r.dstNeg:
		return false
	case r.hasMark && (t.mark&r.markMask == r.markVal) == r.markNeg:
		return false
	}
	if r.inIface != "" && t.inIface(r.inIface) == r.inNeg {
		return false
	}
	if r.ctstates != nil {
		states := []string{"NEW"}
		if t.dnat {
			states = append(states, "DNAT")
		}
		any := slices.ContainsFunc(r.ctstates, func(s string) bool { return slices.Contains(states, s) })
		if any == r.ctNeg {
			return false
		}
	}
	return true
}

// inSet evaluates a "[! ]NAME FLAGS" set match against the Ruleset's
// ipsets; a set that is not known, or of a type not modelled, matches
// nothing (negated or not).
func (t *tracer) inSet(match string) bool {
	neg := strings.HasPrefix(match, "! ")
	name, flags, _ := strings.Cut(strings.TrimPrefix(match, "! "), " ")
	set, ok := t.rs.ipsets[name]
	if !ok {
		return false
	}
	in, err := ipsetmatch.Contains(set.Type, set.Members, strings.Split(flags, ","),
		ipsetmatch.Packet{Src: t.src, Dst: t.dst, Proto: t.proto, DPort: t.dport})
	return err == nil && in != neg
}

// inIface is "-i name" (ruleport.EntersVia), except that a packet said
// to enter through no interface in particular did not enter through
// loopback: the rules that let the node's own looped-back packets by
// with "-i lo" must not let a pod's by.
func (t *tracer) inIface(name string) bool {
	if name == "lo" && t.p.Interface == "" {
		return false
	}
	return ruleport.EntersVia(t.p, name)
}

// service reads the service port a rule belongs to from its comment
// ("ns/name:port ...") and protocol.
func (r *Rule) service() servicemodel.PortName {
	if r == nil {
		return servicemodel.PortName{}
	}
	word, _, _ := strings.Cut(r.Comment, " ")
	nsName, portName, _ := strings.Cut(word, ":")
	ns, name, ok := strings.Cut(nsName, "/")
	if !ok {
		return servicemodel.PortName{}
	}
	proto := protoFromString(r.proto)
	if r.hcAccept() {
		proto = "TCP"
		if _, p, ok := strings.Cut(r.Comment, " health check node port for "); ok {
			proto = protoFromString(p)
		}
	}
	return servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: portName, Protocol: proto}
}

// hcAccept reports whether r is a health-check node port rule.
func (r *Rule) hcAccept() bool {
	return r != nil && r.Target == "ACCEPT" && strings.Contains(r.Comment, " health check node port")
}

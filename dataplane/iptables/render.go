package iptables

import (
	"iter"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/fanout"
	v1 "k8s.io/api/core/v1"
)

// shared names a chain that every service port writes rules into. The
// dataplane edits these rule by rule, never rewriting them on a partial
// sync.
type shared int

const (
	natServices shared = iota
	natNodePorts
	filterServices
	filterExternal
	filterNodePorts
	filterProxyFirewall
	numShared
)

func (s shared) isNAT() bool { return s == natServices || s == natNodePorts }

func (c chainNames) sharedName(s shared) string {
	switch s {
	case natServices, filterServices:
		return c.services
	case natNodePorts, filterNodePorts:
		return c.nodePorts
	case filterExternal:
		return c.externalServices
	default:
		return c.proxyFirewall
	}
}

// largeClusterEndpoints is upstream's threshold above which the per-endpoint
// comments are left out, to keep the ruleset small.
const largeClusterEndpoints = 1000

// rendered is the rules of one service port: its lines in the shared chains
// and its own nat chains.
type rendered struct {
	dispatch [numShared][]string
	own      ownChains
}

// ownChains is the own nat chains of one service port, kept compactly:
// every rule of every chain in one block of text, one rule per line
// without the "-A chain " that the restore input adds, and where each
// chain's rules end. At 10k services × 10 endpoints this holds the rules
// in about half the memory one string per rule took, and a full sync
// streams it to the kernel without building the input first.
type ownChains struct {
	text  []byte
	spans []chainSpan
}

// chainSpan is one own chain: its name, where its rules end in the text,
// and how many there are.
type chainSpan struct {
	name  string
	end   int32
	rules int32
}

// all yields each chain's name and rules (lines, each ending in '\n').
func (o *ownChains) all() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		start := int32(0)
		for _, c := range o.spans {
			if !yield(c.name, o.text[start:c.end]) {
				return
			}
			start = c.end
		}
	}
}

// ruleCount is the number of rules in every chain.
func (o *ownChains) ruleCount() int {
	n := 0
	for _, c := range o.spans {
		n += int(c.rules)
	}
	return n
}

// renderer writes rules for one view.
type renderer struct {
	names chainNames
	v     *view
	// epChains caches endpoint chain names within one renderPort: where
	// each is in epNames, which holds them all until the port is done and
	// they become one string, rather than one per endpoint.
	epChains map[*endpoints.Endpoint]nameRef
	epNames  []byte
	// epSpans are the endpoint chains among own.spans, whose names
	// takeOwn fills in.
	epSpans []epSpan
	// own collects the own chains of the port being rendered; it is
	// copied out, at its exact size, when the port is done.
	own ownChains
	// rules counts the rules of the chain being written, and line is
	// where the rule being written starts in its text.
	rules int32
	line  int
	// probs caches probability(n) by n.
	probs []string
	// skip reports an input left out: Dataplane.skip, or a record of it
	// when renderers run concurrently.
	skip fanout.Skip
}

// add appends one rule, from its space-separated parts, to the own chain
// being written.
func (r *renderer) add(parts ...string) {
	for _, p := range parts {
		r.word(p)
	}
	r.endRule()
}

// word appends one part of a rule; empty parts are left out.
func (r *renderer) word(p string) {
	if p == "" {
		return
	}
	r.space()
	r.own.text = append(r.own.text, p...)
}

// space separates the next part of a rule from the previous one.
func (r *renderer) space() {
	if len(r.own.text) > r.line {
		r.own.text = append(r.own.text, ' ')
	}
}

// endRule ends the rule being written.
func (r *renderer) endRule() {
	r.own.text = append(r.own.text, '\n')
	r.line = len(r.own.text)
	r.rules++
}

// endChain ends the own chain name, whose rules were added since the last
// endChain.
func (r *renderer) endChain(name string) {
	r.own.spans = append(r.own.spans, chainSpan{name: name, end: int32(len(r.own.text)), rules: r.rules})
	r.rules = 0
}

// nameRef is where an endpoint chain's name is in renderer.epNames.
type nameRef struct{ start, end int32 }

// epSpan is an endpoint chain: its index in own.spans and its name.
type epSpan struct {
	span int
	name nameRef
}

// wordName appends an endpoint chain's name as one part of a rule.
func (r *renderer) wordName(n nameRef) {
	r.space()
	r.own.text = append(r.own.text, r.epNames[n.start:n.end]...)
}

// endEndpointChain ends the endpoint chain named n.
func (r *renderer) endEndpointChain(n nameRef) {
	r.epSpans = append(r.epSpans, epSpan{span: len(r.own.spans), name: n})
	r.endChain("")
}

// takeOwn returns the own chains written since the last takeOwn, in memory
// of their own, and forgets the endpoint chains' names.
func (r *renderer) takeOwn() ownChains {
	out := ownChains{text: slices.Clone(r.own.text), spans: slices.Clone(r.own.spans)}
	if len(r.epSpans) > 0 {
		names := string(r.epNames)
		for _, e := range r.epSpans {
			out.spans[e.span].name = names[e.name.start:e.name.end]
		}
	}
	r.own.text, r.own.spans, r.line = r.own.text[:0], r.own.spans[:0], 0
	clear(r.epChains)
	r.epNames, r.epSpans = r.epNames[:0], r.epSpans[:0]
	return out
}

// rule builds one rule from its space-separated parts, in one allocation
// of its exact size: the shared chains keep every rule.
func (r *renderer) rule(parts ...string) string {
	n := -1
	for _, p := range parts {
		if p != "" {
			n += len(p) + 1
		}
	}
	var b strings.Builder
	b.Grow(max(n, 0))
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p)
	}
	return b.String()
}

// comment is the comment match of the text its parts make, built in one
// allocation.
func comment(parts ...string) string {
	const open, end = `-m comment --comment "`, `"`
	n := len(open) + len(end)
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(open)
	for _, p := range parts {
		b.WriteString(p)
	}
	b.WriteString(end)
	return b.String()
}

// epComment is the comment of p's endpoint chains, which large-cluster
// mode leaves out.
func (r *renderer) epComment(p *port) string {
	if r.v.noComments {
		return ""
	}
	return comment(p.name)
}

// targetComment is the comment of p's rules that pick endpoint e, which
// large-cluster mode leaves out.
func (r *renderer) targetComment(p *port, e *endpoints.Endpoint) string {
	if r.v.noComments {
		return ""
	}
	return comment(p.name, " -> ", e.Addr.String())
}

func dstMatch(a netip.Addr) string {
	if !a.IsValid() {
		// AppendTo writes nothing for it where String names it.
		return "-d " + a.String()
	}
	var buf [len("-d ") + len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")]byte
	return string(a.AppendTo(append(buf[:0], "-d "...)))
}

// protoMatch is the protocol match of proto ("tcp", "udp" or "sctp").
func protoMatch(proto string) string {
	switch proto {
	case "tcp":
		return "-m tcp -p tcp"
	case "udp":
		return "-m udp -p udp"
	case "sctp":
		return "-m sctp -p sctp"
	}
	return "-m " + proto + " -p " + proto
}

// selection is the endpoints of one port after removing unusable ones.
type selection struct {
	cluster, local, all []*endpoints.Endpoint
	hasAny              bool
}

// renderPort writes the rules of p given its endpoint selection.
func (r *renderer) renderPort(p *port, sel selection) *rendered {
	out := &rendered{}
	sp := p.SP
	proto := protoMatch(p.Proto)
	dport := "--dport " + strconv.Itoa(int(sp.Port))

	usesCluster := len(sel.cluster) > 0
	usesLocal := len(sel.local) > 0
	accessible := sp.NodePort != 0 || len(p.ExternalIPs) > 0 || len(p.LBVIPs) > 0
	usesExt := sel.hasAny && accessible
	usesFW := sel.hasAny && len(p.LBVIPs) > 0 && len(p.SourceRanges) > 0
	// Each chain name is a hash; only the chains this port writes are
	// named, and rules jump only to those (an unnamed one is "").
	var svc, svl, ext, fw string
	if usesCluster {
		svc = r.names.serviceChain(kindSVC, p.id)
	}
	if usesLocal {
		svl = r.names.serviceChain(kindSVL, p.id)
	}
	if usesExt {
		ext = r.names.serviceChain(kindEXT, p.id)
	}
	if usesFW {
		fw = r.names.serviceChain(kindFW, p.id)
	}

	internalChain, hasInternal := svc, sel.hasAny
	if sp.InternalPolicyLocal {
		internalChain = svl
		hasInternal = hasInternal && len(sel.local) > 0
	}
	externalPolicy, hasExternal := svc, sel.hasAny
	if sp.ExternalPolicyLocal {
		externalPolicy = svl
		hasExternal = hasExternal && len(sel.local) > 0
	}
	// A jump may only target a chain this port writes; the affinity
	// package never selects so that one is missing, but a bad State must
	// still not produce a ruleset the kernel rejects.
	if internalChain == "" {
		hasInternal = false
	}
	if externalPolicy == "" {
		hasExternal = false
	}
	lbChain := ext
	if usesFW {
		lbChain = fw
	}

	var intTarget, intComment, extTarget, extComment string
	if !sel.hasAny {
		intTarget, extTarget = "REJECT", "REJECT"
		intComment = comment(p.name, " has no endpoints")
		extComment = intComment
	} else {
		if !hasInternal {
			intTarget, intComment = "DROP", comment(p.name, " has no local endpoints")
		}
		if !hasExternal {
			extTarget, extComment = "DROP", comment(p.name, " has no local endpoints")
		}
	}
	add := func(s shared, rule string) { out.dispatch[s] = append(out.dispatch[s], rule) }

	cip := dstMatch(sp.ClusterIP)
	var cipComment string
	if hasInternal {
		cipComment = comment(p.name, " cluster IP")
		add(natServices, r.rule(cipComment, proto, cip, dport, "-j", internalChain))
	} else {
		add(filterServices, r.rule(intComment, proto, cip, dport, "-j", intTarget))
	}
	for _, a := range p.ExternalIPs {
		if sel.hasAny {
			add(natServices, r.rule(comment(p.name, " external IP"), proto, dstMatch(a), dport, "-j", ext))
		}
		if !hasExternal {
			add(filterExternal, r.rule(extComment, proto, dstMatch(a), dport, "-j", extTarget))
		}
	}
	for _, a := range p.LBVIPs {
		if sel.hasAny {
			add(natServices, r.rule(comment(p.name, " loadbalancer IP"), proto, dstMatch(a), dport, "-j", lbChain))
		}
		if usesFW {
			add(filterProxyFirewall, r.rule(comment(p.name, " traffic not accepted by ", fw), proto, dstMatch(a), dport, "-j DROP"))
		}
	}
	if !hasExternal {
		for _, a := range p.LBVIPs {
			add(filterExternal, r.rule(extComment, proto, dstMatch(a), dport, "-j", extTarget))
		}
	}
	if np := sp.NodePort; np != 0 {
		npPort := "--dport " + strconv.Itoa(int(np))
		if sel.hasAny {
			add(natNodePorts, r.rule(comment(p.name), proto, npPort, "-j", ext))
		}
		if !hasExternal {
			add(filterExternal, r.rule(extComment, "-m addrtype --dst-type LOCAL", proto, npPort, "-j", extTarget))
		}
	}
	if hc := sp.HealthCheckNodePort; hc != 0 {
		// The rule is TCP whatever the port's protocol; the comment names
		// another protocol so that the rule still identifies its port.
		c := p.name + " health check node port"
		if sp.Protocol != v1.ProtocolTCP {
			c += " for " + string(sp.Protocol)
		}
		add(filterNodePorts, r.rule(comment(c), "-m tcp -p tcp --dport", strconv.Itoa(int(hc)), "-j ACCEPT"))
	}

	// internalMasq is the parts of the internal chain's leading rule.
	var internalMasq []string
	if hasInternal {
		if r.v.masqueradeAll {
			internalMasq = []string{cipComment, proto, cip, dport, "-j", r.names.markMasq}
		} else if r.v.ifNotLocal != "" {
			internalMasq = []string{cipComment, proto, cip, dport, r.v.ifNotLocal, "-j", r.names.markMasq}
		}
	}

	if usesExt {
		if !sp.ExternalPolicyLocal {
			r.add(comment("masquerade traffic for ", p.name, " external destinations"), "-j", r.names.markMasq)
		} else {
			if r.v.ifLocal != "" && usesCluster {
				r.add(comment("pod traffic for ", p.name, " external destinations"), r.v.ifLocal, "-j", svc)
			}
			r.add(comment("masquerade LOCAL traffic for ", p.name, " external destinations"), "-m addrtype --src-type LOCAL -j", r.names.markMasq)
			if usesCluster {
				r.add(comment("route LOCAL traffic for ", p.name, " external destinations"), "-m addrtype --src-type LOCAL -j", svc)
			}
		}
		if hasExternal {
			r.add("-j", externalPolicy)
		}
		r.endChain(ext)
	}

	if usesFW {
		c := comment(p.name, " loadbalancer IP")
		fromNode := false
		for _, cidr := range p.SourceRanges {
			r.add(c, "-s", cidr.String(), "-j", ext)
			fromNode = fromNode || slices.ContainsFunc(r.v.nodeIPs, cidr.Contains)
		}
		if fromNode {
			for _, a := range p.LBVIPs {
				r.add(c, "-s", a.String(), "-j", ext)
			}
		}
		r.add(comment("other traffic to ", p.name, " will be dropped by ", r.names.proxyFirewall))
		r.endChain(fw)
	}

	if usesCluster {
		r.policyChain(p, svc, sel.cluster, !sp.InternalPolicyLocal, internalMasq)
	}
	if usesLocal {
		r.policyChain(p, svl, sel.local, sp.InternalPolicyLocal, internalMasq)
	}
	// The endpoint chains are most of the ruleset: their addresses are
	// written straight into the text.
	c := r.epComment(p)
	for _, e := range sel.all {
		epc := r.epChain(p, e)
		r.word(c)
		r.word("-s")
		r.space()
		r.own.text = e.Addr.Addr().AppendTo(r.own.text)
		r.word("-j")
		r.word(r.names.markMasq)
		r.endRule()
		r.word(c)
		if p.AffinitySeconds > 0 {
			r.word("-m recent --name")
			r.wordName(epc)
			r.word("--set")
		}
		r.word(proto)
		r.word("-j DNAT --to-destination")
		r.space()
		r.own.text = e.Addr.AppendTo(r.own.text)
		r.endRule()
		r.endEndpointChain(epc)
	}
	out.own = r.takeOwn()
	return out
}

// policyChain writes a SVC or SVL chain balancing over eps; masq, when the
// chain is the internal one, is the parts of its leading masquerade rule.
func (r *renderer) policyChain(p *port, name string, eps []*endpoints.Endpoint, internal bool, masq []string) {
	if internal && masq != nil {
		r.add(masq...)
	}
	if p.AffinitySeconds > 0 {
		secs := strconv.FormatInt(p.AffinitySeconds, 10)
		for _, e := range eps {
			epc := r.epChain(p, e)
			r.word(r.targetComment(p, e))
			r.word("-m recent --name")
			r.wordName(epc)
			r.word("--rcheck --seconds")
			r.word(secs)
			r.word("--reap -j")
			r.wordName(epc)
			r.endRule()
		}
	}
	n := len(eps)
	for i, e := range eps {
		epc := r.epChain(p, e)
		r.word(r.targetComment(p, e))
		if i < n-1 {
			r.word("-m statistic --mode random --probability")
			r.word(r.probability(n - i))
		}
		r.word("-j")
		r.wordName(epc)
		r.endRule()
	}
	r.endChain(name)
}

// epChain names the chain of endpoint e of p, hashing each endpoint once
// per port although the SVC, SVL and SEP rules all name it.
func (r *renderer) epChain(p *port, e *endpoints.Endpoint) nameRef {
	if c, ok := r.epChains[e]; ok {
		return c
	}
	if r.epChains == nil {
		r.epChains = map[*endpoints.Endpoint]nameRef{}
	}
	start := len(r.epNames)
	r.epNames = r.names.appendEndpointChain(r.epNames, p.id, e.Addr)
	c := nameRef{int32(start), int32(len(r.epNames))}
	r.epChains[e] = c
	return c
}

// probability is upstream's 1/n, to ten decimals, formatted once per n.
func (r *renderer) probability(n int) string {
	if n >= len(r.probs) {
		r.probs = append(r.probs, make([]string, n+1-len(r.probs))...)
	}
	if r.probs[n] == "" {
		r.probs[n] = strconv.FormatFloat(1/float64(n), 'f', 10, 64)
	}
	return r.probs[n]
}

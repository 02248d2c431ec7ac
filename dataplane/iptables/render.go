package iptables

import (
	"iter"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/fanout"
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

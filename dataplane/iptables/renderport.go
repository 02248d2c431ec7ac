package iptables

import (
	"slices"
	"strconv"

	"github.com/proxykit/proxykit/endpoints"
	v1 "k8s.io/api/core/v1"
)

// selection is the endpoints of one port after removing unusable ones.
type selection struct {
	cluster, local, all []*endpoints.Endpoint
	hasAny              bool
}

// portPlan is what renderPort decides about one port before it writes a
// rule: every rule it writes depends on these, in the shared chains and in
// the port's own.
type portPlan struct {
	sel                selection
	usesCluster        bool
	usesLocal          bool
	usesExt            bool
	usesFW             bool
	svc, svl, ext, fw  string
	internalChain      string
	externalPolicy     string
	lbChain            string
	hasInternal        bool
	hasExternal        bool
	intTarget, intNote string
	extTarget, extNote string
	// cipNote is the comment of the cluster IP rule, which the internal
	// chain's masquerade rule repeats.
	cipNote string
}

// portMatch is the matches of p's cluster IP rule, which most of its rules
// repeat. They are kept apart from portPlan, whose chain names end up in
// the ruleset, so that the compiler keeps them on the stack.
type portMatch struct {
	proto, dport, cip string
}

// renderPort writes the rules of p given its endpoint selection.
func (r *renderer) renderPort(p *port, sel selection) *rendered {
	out := &rendered{}
	m := portMatch{
		proto: protoMatch(p.Proto),
		dport: "--dport " + strconv.Itoa(int(p.SP.Port)),
		cip:   dstMatch(p.SP.ClusterIP),
	}
	var pl portPlan
	r.planChains(p, sel, &pl)
	r.planTargets(p, &pl)
	r.dispatchRules(p, &pl, m, out)
	// masq is the parts of the internal chain's leading rule; it is built
	// here so that it stays on the stack.
	var masq []string
	if pl.hasInternal {
		if r.v.masqueradeAll {
			masq = []string{pl.cipNote, m.proto, m.cip, m.dport, "-j", r.names.markMasq}
		} else if r.v.ifNotLocal != "" {
			masq = []string{pl.cipNote, m.proto, m.cip, m.dport, r.v.ifNotLocal, "-j", r.names.markMasq}
		}
	}
	if pl.usesExt {
		r.externalChain(p, &pl)
	}
	if pl.usesFW {
		r.firewallChain(p, &pl)
	}
	if pl.usesCluster {
		r.policyChain(p, pl.svc, sel.cluster, !p.SP.InternalPolicyLocal, masq)
	}
	if pl.usesLocal {
		r.policyChain(p, pl.svl, sel.local, p.SP.InternalPolicyLocal, masq)
	}
	r.endpointChains(p, sel.all, m.proto)
	out.own = r.takeOwn()
	return out
}

// planChains names the own chains p writes and picks the one each kind of
// traffic jumps to.
func (r *renderer) planChains(p *port, sel selection, pl *portPlan) {
	sp := p.SP
	pl.sel = sel

	pl.usesCluster = len(sel.cluster) > 0
	pl.usesLocal = len(sel.local) > 0
	accessible := sp.NodePort != 0 || len(p.ExternalIPs) > 0 || len(p.LBVIPs) > 0
	pl.usesExt = sel.hasAny && accessible
	pl.usesFW = sel.hasAny && len(p.LBVIPs) > 0 && len(p.SourceRanges) > 0
	// Each chain name is a hash; only the chains this port writes are
	// named, and rules jump only to those (an unnamed one is "").
	if pl.usesCluster {
		pl.svc = r.names.serviceChain(kindSVC, p.id)
	}
	if pl.usesLocal {
		pl.svl = r.names.serviceChain(kindSVL, p.id)
	}
	if pl.usesExt {
		pl.ext = r.names.serviceChain(kindEXT, p.id)
	}
	if pl.usesFW {
		pl.fw = r.names.serviceChain(kindFW, p.id)
	}

	pl.internalChain, pl.hasInternal = pl.svc, sel.hasAny
	if sp.InternalPolicyLocal {
		pl.internalChain = pl.svl
		pl.hasInternal = pl.hasInternal && len(sel.local) > 0
	}
	pl.externalPolicy, pl.hasExternal = pl.svc, sel.hasAny
	if sp.ExternalPolicyLocal {
		pl.externalPolicy = pl.svl
		pl.hasExternal = pl.hasExternal && len(sel.local) > 0
	}
	// A jump may only target a chain this port writes; the affinity
	// package never selects so that one is missing, but a bad State must
	// still not produce a ruleset the kernel rejects.
	if pl.internalChain == "" {
		pl.hasInternal = false
	}
	if pl.externalPolicy == "" {
		pl.hasExternal = false
	}
	pl.lbChain = pl.ext
	if pl.usesFW {
		pl.lbChain = pl.fw
	}
}

// planTargets picks what traffic that has no chain to jump to meets in the
// filter table, and the comments of the rules that send it there.
func (r *renderer) planTargets(p *port, pl *portPlan) {
	if pl.hasInternal {
		pl.cipNote = comment(p.name, " cluster IP")
	}
	if !pl.sel.hasAny {
		pl.intTarget, pl.extTarget = "REJECT", "REJECT"
		pl.intNote = comment(p.name, " has no endpoints")
		pl.extNote = pl.intNote
		return
	}
	if !pl.hasInternal {
		pl.intTarget, pl.intNote = "DROP", comment(p.name, " has no local endpoints")
	}
	if !pl.hasExternal {
		pl.extTarget, pl.extNote = "DROP", comment(p.name, " has no local endpoints")
	}
}

// add appends rule to the shared chain s.
func (out *rendered) add(s shared, rule string) { out.dispatch[s] = append(out.dispatch[s], rule) }

// dispatchRules writes p's rules in the shared chains.
func (r *renderer) dispatchRules(p *port, pl *portPlan, m portMatch, out *rendered) {
	sp := p.SP
	proto, dport, hasAny := m.proto, m.dport, pl.sel.hasAny
	if pl.hasInternal {
		out.add(natServices, r.rule(pl.cipNote, proto, m.cip, dport, "-j", pl.internalChain))
	} else {
		out.add(filterServices, r.rule(pl.intNote, proto, m.cip, dport, "-j", pl.intTarget))
	}
	for _, a := range p.ExternalIPs {
		if hasAny {
			out.add(natServices, r.rule(comment(p.name, " external IP"), proto, dstMatch(a), dport, "-j", pl.ext))
		}
		if !pl.hasExternal {
			out.add(filterExternal, r.rule(pl.extNote, proto, dstMatch(a), dport, "-j", pl.extTarget))
		}
	}
	for _, a := range p.LBVIPs {
		if hasAny {
			out.add(natServices, r.rule(comment(p.name, " loadbalancer IP"), proto, dstMatch(a), dport, "-j", pl.lbChain))
		}
		if pl.usesFW {
			out.add(filterProxyFirewall, r.rule(comment(p.name, " traffic not accepted by ", pl.fw), proto, dstMatch(a), dport, "-j DROP"))
		}
	}
	if !pl.hasExternal {
		for _, a := range p.LBVIPs {
			out.add(filterExternal, r.rule(pl.extNote, proto, dstMatch(a), dport, "-j", pl.extTarget))
		}
	}
	if np := sp.NodePort; np != 0 {
		npPort := "--dport " + strconv.Itoa(int(np))
		if hasAny {
			if r.v.countsLocalhost() {
				// Counted apart, then sent where the rule below sends
				// every other node-port packet.
				out.add(natNodePorts, r.rule(comment(p.name), proto, "-d 127.0.0.0/8", npPort, "-m nfacct --nfacct-name", LocalhostNodePortsCounter, "-j", pl.ext))
			}
			out.add(natNodePorts, r.rule(comment(p.name), proto, npPort, "-j", pl.ext))
		}
		if !pl.hasExternal {
			out.add(filterExternal, r.rule(pl.extNote, "-m addrtype --dst-type LOCAL", proto, npPort, "-j", pl.extTarget))
		}
	}
	if hc := sp.HealthCheckNodePort; hc != 0 {
		// The rule is TCP whatever the port's protocol; the comment names
		// another protocol so that the rule still identifies its port.
		c := p.name + " health check node port"
		if sp.Protocol != v1.ProtocolTCP {
			c += " for " + string(sp.Protocol)
		}
		out.add(filterNodePorts, r.rule(comment(c), "-m tcp -p tcp --dport", strconv.Itoa(int(hc)), "-j ACCEPT"))
	}
}

// externalChain writes p's EXT chain.
func (r *renderer) externalChain(p *port, pl *portPlan) {
	if !p.SP.ExternalPolicyLocal {
		r.add(comment("masquerade traffic for ", p.name, " external destinations"), "-j", r.names.markMasq)
	} else {
		if r.v.ifLocal != "" && pl.usesCluster {
			r.add(comment("pod traffic for ", p.name, " external destinations"), r.v.ifLocal, "-j", pl.svc)
		}
		r.add(comment("masquerade LOCAL traffic for ", p.name, " external destinations"), "-m addrtype --src-type LOCAL -j", r.names.markMasq)
		if pl.usesCluster {
			r.add(comment("route LOCAL traffic for ", p.name, " external destinations"), "-m addrtype --src-type LOCAL -j", pl.svc)
		}
	}
	if pl.hasExternal {
		r.add("-j", pl.externalPolicy)
	}
	r.endChain(pl.ext)
}

// firewallChain writes p's FW chain, which lets only its source ranges
// through to the EXT chain.
func (r *renderer) firewallChain(p *port, pl *portPlan) {
	c := comment(p.name, " loadbalancer IP")
	fromNode := false
	for _, cidr := range p.SourceRanges {
		r.add(c, "-s", cidr.String(), "-j", pl.ext)
		fromNode = fromNode || slices.ContainsFunc(r.v.nodeIPs, cidr.Contains)
	}
	if fromNode {
		for _, a := range p.LBVIPs {
			r.add(c, "-s", a.String(), "-j", pl.ext)
		}
	}
	r.add(comment("other traffic to ", p.name, " will be dropped by ", r.names.proxyFirewall))
	r.endChain(pl.fw)
}

// endpointChains writes p's endpoint chains, which are most of the
// ruleset: their addresses are written straight into the text.
func (r *renderer) endpointChains(p *port, eps []*endpoints.Endpoint, proto string) {
	c := r.epComment(p)
	for _, e := range eps {
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
}

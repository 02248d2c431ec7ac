package xtables

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
)

// Reading is a kernel's iptables rules as troubleshooting reads them: the
// nat, filter and mangle rules iptables-save listed, the proxy's and
// everyone else's, so that another program's rule that decides first is
// seen. It is the iptables dataplane's kernel reading, and the base of
// the userspace and IPVS dataplanes'.
type Reading struct {
	Rules *Ruleset
	// NodeIPs are the node's addresses, which count as local with
	// loopback; State.Node.IPs.
	NodeIPs []netip.Addr
	// Skipped are the listed rules Rules lacks because the toolkit does
	// not model them (ParseSave); a trace may miss what they do.
	Skipped []SkippedRule
}

// NewReading reads iptables-save output (nat, filter and mangle; other
// tables are ignored) of one family.
func NewReading(save []byte, nodeIPs []netip.Addr) *Reading {
	rs, skipped := ParseSave(save)
	return &Reading{Rules: rs, NodeIPs: nodeIPs, Skipped: skipped}
}

// NewReadingWithout is NewReading without the chains whose names start
// with prefix (a dataplane's own, such as the ipvs dataplane's "PKV-")
// and the rules that jump to them: what the other programs' rules do.
func NewReadingWithout(save []byte, prefix string, nodeIPs []netip.Addr) *Reading {
	var kept []string
	for line := range strings.Lines(string(save)) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && strings.HasPrefix(f[0], ":"+prefix):
			continue
		case len(f) > 1 && f[0] == "-A" && strings.HasPrefix(f[1], prefix):
			continue
		case jumpsTo(f, prefix):
			continue
		}
		kept = append(kept, line)
	}
	return NewReading([]byte(strings.Join(kept, "")), nodeIPs)
}

// jumpsTo reports whether the rule's words jump to or go to a chain of
// prefix.
func jumpsTo(words []string, prefix string) bool {
	for i := 0; i+1 < len(words); i++ {
		if (words[i] == "-j" || words[i] == "-g") && strings.HasPrefix(words[i+1], prefix) {
			return true
		}
	}
	return false
}

// Trace is what the rules do with the first packet of a connection, in
// the shape State.Lookup answers; it never fails.
func (k *Reading) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	return k.Rules.Trace(p, k.NodeIPs), nil
}

// TraceSteps is Trace with the rules the packet met, chain by chain.
func (k *Reading) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	v, steps := k.Rules.TraceSteps(p, k.NodeIPs)
	return v, steps, nil
}

// Services lists the service ports named by the comments of the nat,
// filter and mangle rules, so that rules of services the model no longer
// has are found.
func (k *Reading) Services() []servicemodel.PortName {
	var all []servicemodel.PortName
	for _, table := range []string{"nat", "filter", "mangle"} {
		all = append(all, k.Rules.Services(table)...)
	}
	slices.SortFunc(all, servicemodel.PortName.Compare)
	return slices.Compact(all)
}

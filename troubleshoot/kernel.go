package troubleshoot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// IPTables is the Kernel of the iptables dataplane: the nat, filter and
// mangle rules iptables-save listed, the proxy's and everyone else's, so
// that another program's rule that decides first is seen.
type IPTables struct {
	Rules *xtables.Ruleset
	// NodeIPs are the node's addresses, which count as local with
	// loopback; State.Node.IPs.
	NodeIPs []netip.Addr
	// Skipped are the listed rules Rules lacks because the iptables
	// package does not model them (xtables.ParseSave); a trace may miss
	// what they do.
	Skipped []xtables.SkippedRule
}

// NewIPTables reads iptables-save output (nat, filter and mangle; other
// tables are ignored) of one family.
func NewIPTables(save []byte, nodeIPs []netip.Addr) *IPTables {
	rs, skipped := xtables.ParseSave(save)
	return &IPTables{Rules: rs, NodeIPs: nodeIPs, Skipped: skipped}
}

// NewIPTablesWithout is NewIPTables without the chains whose names start
// with prefix (a dataplane's own, such as the ipvs dataplane's "PKV-")
// and the rules that jump to them: what the other programs' rules do.
func NewIPTablesWithout(save []byte, prefix string, nodeIPs []netip.Addr) *IPTables {
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
	return NewIPTables([]byte(strings.Join(kept, "")), nodeIPs)
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

// Trace implements Kernel; it never fails.
func (k *IPTables) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	return k.Rules.Trace(p, k.NodeIPs), nil
}

// TraceSteps is Trace with the rules the packet met, chain by chain.
func (k *IPTables) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	v, steps := k.Rules.TraceSteps(p, k.NodeIPs)
	return v, steps, nil
}

// Services implements ServiceLister: the service ports named by the
// comments of the nat, filter and mangle rules.
func (k *IPTables) Services() []servicemodel.PortName {
	var all []servicemodel.PortName
	for _, table := range []string{"nat", "filter", "mangle"} {
		all = append(all, k.Rules.Services(table)...)
	}
	slices.SortFunc(all, servicemodel.PortName.Compare)
	return slices.Compact(all)
}

// NFTables is the Kernel of the nftables dataplane: its table as nft
// lists it (nftables.ParseListing) and, when Others is set, the other
// tables whose base chains run before its nat chain, so that another
// program's table that decides first (kube-proxy's, left behind) is seen.
type NFTables struct {
	Rules *nftables.Ruleset
	// Others are the ruleset's other tables (nftables.ParseOthers); nil
	// reads the dataplane's table alone.
	Others *nftables.Others
	// NodeIPs are the node's addresses, which count as local with
	// loopback; State.Node.IPs.
	NodeIPs []netip.Addr
}

// NewNFTables reads what "nft list table ip|ip6 <table>" printed of the
// dataplane's table of family.
func NewNFTables(listing []byte, family v1.IPFamily, nodeIPs []netip.Addr) (*NFTables, error) {
	rs, err := nftables.ParseListing(listing, family)
	if err != nil {
		return nil, err
	}
	return &NFTables{Rules: rs, NodeIPs: nodeIPs}, nil
}

// Trace implements Kernel.
func (k *NFTables) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	v, _, err := k.TraceSteps(p)
	return v, err
}

// TraceSteps is Trace with the chains entered and map elements matched:
// first the other tables' rules that decided something, then the
// dataplane's.
func (k *NFTables) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	var before []string
	if k.Others != nil {
		v, decided, steps := k.Others.Trace(p, k.NodeIPs)
		if decided {
			return v, steps, nil
		}
		before = steps
	}
	v, steps, err := k.Rules.Trace(p, k.NodeIPs)
	return v, append(before, steps...), err
}

// Services implements ServiceLister.
func (k *NFTables) Services() []servicemodel.PortName { return k.Rules.Services() }

// Userspace is the Kernel of the userspace dataplane in redirect mode
// (userspace.RedirectConfig): its rules (mangle TPROXY and DROP for
// traffic entering the node, nat REDIRECT for the node's own, nat DNAT of
// the port alone for node ports, filter REJECT), read with everyone's as
// IPTables reads them, and the forwarder each of them leads to. A
// forwarder routes its connections as the model does, so a packet sent to
// the forwarder of the service port the model names gets the model's
// verdict; one sent elsewhere, or to an address and port no socket
// listens on, gets its own: the kernel refuses a redirected or DNATed
// connection there and drops a TPROXY's packet.
type Userspace struct {
	IPTables *IPTables
	// Model is the State the forwarders route by.
	Model *dataplane.State
	// Listening reports whether a socket of the node listens at addr for
	// protocol, addr being where a rule leads: the unspecified address
	// (any of the node's) for a REDIRECT or a DNAT of the port alone, the
	// --on-ip for a TPROXY. A socket listens there if it is bound to that
	// address and port, or to the unspecified address on that port (a
	// dual-stack socket's "::" for IPv4 too); at the unspecified address,
	// any socket on the port does: so a cluster IP's missing socket is
	// not hidden by a LoadBalancer IP's on the same port
	// (ListeningSockets.Listening is one). A socket is taken to be
	// transparent (IP_TRANSPARENT, as the forwarders' are) for a TPROXY.
	// nil takes every redirect to reach its forwarder.
	Listening func(protocol v1.Protocol, addr netip.AddrPort) bool
}

// Trace implements Kernel; it never fails.
func (k *Userspace) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	v, _, err := k.TraceSteps(p)
	return v, err
}

// TraceSteps is Trace with the rules the packet met, then the forwarder.
func (k *Userspace) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	v, steps, err := k.IPTables.TraceSteps(p)
	if err != nil || v.Action != dataplane.DNAT || len(v.Endpoints) != 1 {
		return v, steps, err
	}
	// A REDIRECT (or a DNAT of the port alone) leads to a socket of the
	// node, the unspecified address; a TPROXY to one at the address it
	// names, if any. Another DNAT leads to an endpoint.
	tproxy := tproxied(steps)
	if !tproxy && !v.Endpoints[0].Addr().IsUnspecified() {
		return v, steps, nil
	}
	to := v.Endpoints[0]
	if k.Listening != nil && !k.Listening(p.Protocol, to) {
		if tproxy {
			// TPROXY finds no socket to hand the packet to.
			steps = append(steps, fmt.Sprintf("no transparent socket of the node listens on %s %s: the kernel drops the packet", p.Protocol, socketAt(to)))
			return dataplane.Verdict{Action: dataplane.Drop, Service: v.Service}, steps, nil
		}
		steps = append(steps, fmt.Sprintf("no socket of the node listens on %s %s: the kernel refuses the connection", p.Protocol, socketAt(to)))
		return dataplane.Verdict{Action: dataplane.Reject, Service: v.Service}, steps, nil
	}
	if v.Service.Name == "" {
		// Another program's redirect.
		return v, steps, nil
	}
	model := k.Model.Lookup(p)
	if model.Service != v.Service {
		return v, steps, nil
	}
	steps = append(steps, fmt.Sprintf("forwarder of %s on %s: routes as the model does", ServiceString(v.Service), socketAt(to)))
	return model, steps, nil
}

// socketAt names where a rule leads in a step: the port alone for the
// unspecified address, which stands for any of the node's.
func socketAt(addr netip.AddrPort) string {
	if addr.Addr().IsUnspecified() {
		return fmt.Sprintf("port %d", addr.Port())
	}
	return addr.String()
}

// tproxied reports whether a trace's steps met a TPROXY rule: the tracer
// follows one in mangle only, and nothing after it sends the packet
// elsewhere.
func tproxied(steps []string) bool {
	return slices.ContainsFunc(steps, func(s string) bool {
		return strings.HasPrefix(s, "mangle ") && strings.Contains(s, " -j TPROXY ")
	})
}

// Services implements ServiceLister: the service ports the rules name.
func (k *Userspace) Services() []servicemodel.PortName { return k.IPTables.Services() }

// VerifyListeners is Verify for the userspace dataplane, whose kernel
// reading is the frontends its forwarders listen on
// (userspace.Dataplane.Listeners): every frontend of a service port with
// an endpoint must have a listener (Missing), and no listener may serve a
// frontend the model lacks or that has no endpoint (Extra).
func VerifyListeners(s *dataplane.State, listeners map[userspace.Frontend]netip.AddrPort) []Drift {
	type key struct {
		addr  netip.AddrPort
		proto string
	}
	want := map[key]servicemodel.PortName{}
	var order []key
	unspec := netip.IPv4Unspecified()
	if s.Family == v1.IPv6Protocol {
		unspec = netip.IPv6Unspecified()
	}
	for sp := range s.Services.All() {
		if !s.Select(sp).HasAny {
			continue
		}
		addrs := append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...)
		addrs = append(addrs, sp.LoadBalancerVIPs...)
		var keys []key
		for _, a := range addrs {
			keys = append(keys, key{netip.AddrPortFrom(a, sp.Port), string(sp.Protocol)})
		}
		if sp.NodePort != 0 {
			keys = append(keys, key{netip.AddrPortFrom(unspec, sp.NodePort), string(sp.Protocol)})
		}
		for _, k := range keys {
			// The first claim in the model's order wins, as in Lookup.
			if old, ok := want[k]; !ok || sp.Name.Compare(old) < 0 {
				if !ok {
					order = append(order, k)
				}
				want[k] = sp.Name
			}
		}
	}
	var out []Drift
	have := map[key]bool{}
	for fe := range listeners {
		k := key{fe.Addr, string(fe.Protocol)}
		have[k] = true
		if _, ok := want[k]; !ok {
			out = append(out, Drift{Kind: Extra, Frontend: fe.String(),
				Detail: fmt.Sprintf("a forwarder listens for %s (%s), the model has no endpoint there", fe, fe.Kind)})
		}
	}
	for _, k := range order {
		if !have[k] {
			out = append(out, Drift{Service: want[k], Kind: Missing, Frontend: k.addr.String() + "/" + k.proto,
				Detail: "no forwarder listens for it; the model has endpoints"})
		}
	}
	slices.SortFunc(out, func(a, b Drift) int {
		return cmp.Or(a.Service.Compare(b.Service), cmp.Compare(a.Frontend, b.Frontend))
	})
	return out
}

package nftables

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/internal/ruleport"
	"sigs.k8s.io/knftables"
)

// baseChain is a chain hooked into netfilter; its name says type and hook.
type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

// The base chains, as kube-proxy's. The pre-DNAT filter chains run the
// source-range firewall before the nat chains rewrite the destination.
var baseChains = [...]baseChain{
	{"filter-prerouting-pre-dnat", knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{"filter-output-pre-dnat", knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{"filter-input", knftables.FilterType, knftables.InputHook, knftables.FilterPriority},
	{"filter-forward", knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
	{"filter-output", knftables.FilterType, knftables.OutputHook, knftables.FilterPriority},
	{"nat-prerouting", knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{"nat-output", knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{"nat-postrouting", knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// jumps are the rules of the base chains. Rejects happen in the input,
// forward and output hooks because kernels before 5.9 refuse reject in
// prerouting.
var jumps = [...]struct{ from, rule string }{
	{"filter-input", "ct state new jump " + chainNodePortEPCheck},
	{"filter-input", "ct state new jump " + chainServiceEPCheck},
	{"filter-forward", "ct state new jump " + chainServiceEPCheck},
	{"filter-output", "ct state new jump " + chainServiceEPCheck},
	{"filter-prerouting-pre-dnat", "ct state new jump " + chainFirewallCheck},
	{"filter-output-pre-dnat", "ct state new jump " + chainFirewallCheck},
	{"nat-output", "jump " + chainServices},
	{"nat-prerouting", "jump " + chainServices},
	{"nat-postrouting", "jump " + chainMasquerading},
	{"filter-forward", "ct state new jump " + chainClusterIPsCheck},
	{"filter-output", "ct state new jump " + chainClusterIPsCheck},
}

// staticChains are the fixed regular chains.
var staticChains = [...]string{
	chainClusterIPsCheck, chainFirewallCheck, chainMasquerading, chainNodePortEPCheck,
	chainRejectChain, chainServiceEPCheck, chainServices,
}

// setDef is a fixed set or map.
type setDef struct {
	name, typ, comment string
	isMap              bool
}

func (d *Dataplane) sets() []setDef {
	a := d.addrT
	return []setDef{
		{setClusterIPs, a, "Active ClusterIPs", false},
		{setHairpin, a + " . " + a + " . inet_proto . inet_service", "service hairpin connections", false},
		{mapServiceIPs, a + " . inet_proto . inet_service : verdict", "ClusterIP, ExternalIP and LoadBalancer IP traffic", true},
		{mapServiceNodePorts, "inet_proto . inet_service : verdict", "NodePort traffic", true},
		{mapFirewallIPs, a + " . inet_proto . inet_service : verdict", "destinations that are subject to LoadBalancerSourceRanges", true},
		{mapNoEndpointServices, a + " . inet_proto . inet_service : verdict", "vmap to drop or reject packets to services with no endpoints", true},
		{mapNoEndpointNodePort, "inet_proto . inet_service : verdict", "vmap to drop or reject packets to service nodeports with no endpoints", true},
	}
}

// static is the fixed part of the table for one State: what a full sync
// rewrites whatever the services.
type static struct {
	// rules of each fixed chain, base chains included.
	rules map[string][]string
	// nodePortIPs are the elements of nodeport-ips; nil when every node
	// address serves node ports and the set does not exist.
	nodePortIPs []string
	// sig identifies all of the above: a State whose static part differs
	// from the programmed one needs a full sync.
	sig string
}

// localMatch is the match for local pod traffic (not, when negate), ""
// without a detector.
func (d *Dataplane) localMatch(s *dataplane.State, negate bool) string {
	not := ""
	if negate {
		not = "!= "
	}
	det := s.Settings.LocalDetector
	switch det.Mode {
	case dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR:
		if cidr, ok := s.DetectionCIDR(); ok {
			return d.ipX + " saddr " + not + cidr.String()
		}
	case dataplane.LocalModeBridgeInterface, dataplane.LocalModeInterfaceNamePrefix:
		// A name no rule may hold never gets here (checkState).
		if name, ok := backend.LocalInterface(det, "*"); ok {
			return "iifname " + not + `"` + name + `"`
		}
	}
	return ""
}

// nodePortAddresses returns the node IPs that serve node ports, or
// matchAll when every local address does.
func (d *Dataplane) nodePortAddresses(s *dataplane.State) (ips []string, matchAll bool) {
	var cidrs []netip.Prefix
	for _, p := range s.Settings.NodePortAddresses {
		if !p.IsValid() || p.Addr().Is6() != d.ipv6 || p.Addr().Is4In6() {
			continue
		}
		if p.Bits() == 0 {
			return nil, true
		}
		cidrs = append(cidrs, p)
	}
	if len(cidrs) == 0 {
		return nil, true
	}
	ips = []string{}
	for _, ip := range s.Node.IPs {
		if ruleport.OfFamily(ip, d.ipv6) && !ip.IsLoopback() && slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Contains(ip) }) {
			ips = append(ips, ip.String())
		}
	}
	slices.Sort(ips)
	return slices.Compact(ips), false
}

// serviceCIDRs lists the State's service CIDRs of this family for a rule,
// "" when there is none.
func (d *Dataplane) serviceCIDRs(s *dataplane.State) string {
	var list []string
	for _, p := range s.ServiceCIDRs {
		if p.IsValid() && p.Addr().Is6() == d.ipv6 && !p.Addr().Is4In6() {
			list = append(list, p.Masked().String())
		}
	}
	return strings.Join(list, " , ")
}

func (d *Dataplane) static(s *dataplane.State) *static {
	st := &static{rules: map[string][]string{}}
	for _, j := range jumps {
		st.rules[j.from] = append(st.rules[j.from], j.rule)
	}
	ipX, masq := d.ipX, "mark set mark or "+d.mark
	add := func(chain string, rules ...string) { st.rules[chain] = append(st.rules[chain], rules...) }
	add(chainMasquerading,
		"mark and "+d.mark+" != 0 mark set mark xor "+d.mark+" masquerade fully-random",
		"ct status dnat "+ipX+" saddr . "+ipX+" daddr . meta l4proto . th dport @"+setHairpin+" masquerade fully-random")
	add(chainClusterIPsCheck, ipX+" daddr @"+setClusterIPs+" reject")
	if cidrs := d.serviceCIDRs(s); cidrs != "" {
		add(chainClusterIPsCheck, ipX+" daddr { "+cidrs+" } drop")
	}
	add(chainRejectChain, "reject")
	add(chainServiceEPCheck, ipX+" daddr . meta l4proto . th dport vmap @"+mapNoEndpointServices)
	add(chainFirewallCheck, ipX+" daddr . meta l4proto . th dport vmap @"+mapFirewallIPs)

	notLocalhost := "ip daddr != 127.0.0.0/8"
	if d.ipv6 {
		notLocalhost = "ip6 daddr != ::1"
	}
	ips, matchAll := d.nodePortAddresses(s)
	st.nodePortIPs = ips
	if matchAll {
		add(chainNodePortEPCheck, notLocalhost+" meta l4proto . th dport vmap @"+mapNoEndpointNodePort)
	} else {
		add(chainNodePortEPCheck, ipX+" daddr @"+setNodePortIPs+" meta l4proto . th dport vmap @"+mapNoEndpointNodePort)
	}
	if s.Settings.MasqueradeAll {
		add(chainServices, ipX+" daddr @"+setClusterIPs+" "+masq)
	} else if notLocal := d.localMatch(s, true); notLocal != "" {
		add(chainServices, ipX+" daddr @"+setClusterIPs+" "+notLocal+" "+masq)
	}
	add(chainServices, ipX+" daddr . meta l4proto . th dport vmap @"+mapServiceIPs)
	if matchAll {
		add(chainServices, "fib daddr type local "+notLocalhost+" meta l4proto . th dport vmap @"+mapServiceNodePorts)
	} else {
		add(chainServices, ipX+" daddr @"+setNodePortIPs+" meta l4proto . th dport vmap @"+mapServiceNodePorts)
	}

	var b strings.Builder
	for _, c := range append(baseChainNames(), staticChains[:]...) {
		b.WriteString(c + "\n")
		for _, r := range st.rules[c] {
			b.WriteString(r + "\n")
		}
	}
	b.WriteString(strings.Join(ips, ","))
	if ips == nil {
		b.WriteString("*")
	}
	st.sig = b.String()
	return st
}

func baseChainNames() []string {
	out := make([]string, len(baseChains))
	for i, c := range baseChains {
		out[i] = c.name
	}
	return out
}

// writeStatic adds the fixed part of the table to p: the table, the base
// chains (re-created when recreate is set, so that changed properties do
// not fail the transaction), the fixed chains rewritten, and the sets and
// maps.
func (d *Dataplane) writeStatic(p *plan, st *static, recreate bool) {
	p.add(&knftables.Table{Comment: knftables.PtrTo("rules for proxykit")})
	for _, bc := range baseChains {
		if recreate {
			p.add(&knftables.Chain{Name: bc.name})
			p.delete(&knftables.Chain{Name: bc.name})
		}
		p.add(&knftables.Chain{Name: bc.name, Type: knftables.PtrTo(bc.typ), Hook: knftables.PtrTo(bc.hook), Priority: knftables.PtrTo(bc.priority)})
		p.flush(&knftables.Chain{Name: bc.name})
	}
	for _, c := range staticChains {
		p.add(&knftables.Chain{Name: c})
		p.flush(&knftables.Chain{Name: c})
	}
	for _, sd := range d.sets() {
		if sd.isMap {
			p.add(&knftables.Map{Name: sd.name, Type: sd.typ, Comment: knftables.PtrTo(sd.comment)})
		} else {
			p.add(&knftables.Set{Name: sd.name, Type: sd.typ, Comment: knftables.PtrTo(sd.comment)})
		}
	}
	npSet := &knftables.Set{Name: setNodePortIPs, Type: d.addrT, Comment: knftables.PtrTo("IPs that accept NodePort traffic")}
	p.add(npSet)
	p.flush(&knftables.Set{Name: setNodePortIPs})
	for _, ip := range st.nodePortIPs {
		p.add(&knftables.Element{Set: setNodePortIPs, Key: []string{ip}})
	}
	for _, c := range append(baseChainNames(), staticChains[:]...) {
		for _, r := range st.rules[c] {
			p.add(&knftables.Rule{Chain: c, Rule: r})
		}
	}
	if st.nodePortIPs == nil {
		// Only after the rules that referred to it are gone.
		p.delete(&knftables.Set{Name: setNodePortIPs})
	}
}

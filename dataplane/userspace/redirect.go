package userspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// DefaultRedirectChainPrefix prefixes redirect mode's chains: never the
// iptables dataplane's "PK-", so that both can run on one node.
const DefaultRedirectChainPrefix = "PKU-"

// Defaults of the RedirectConfig fields whose zero value means "the
// default".
const (
	// DefaultTProxyMark is the fwmark bit TPROXY sets: none of those
	// kube-proxy (0x4000, 0x8000), Calico (0xffff0000) or Cilium (0x0f00)
	// use.
	DefaultTProxyMark uint32 = 0x2000
	// DefaultRouteTable is the routing table of the local route marked
	// packets take ("PK" in ASCII).
	DefaultRouteTable = 0x504b
	// DefaultRulePriority is the priority of the routing rule that sends
	// marked packets to DefaultRouteTable: ahead of the main table's
	// 32766.
	DefaultRulePriority = 1000
)

// RedirectConfig configures redirect mode: the node's service traffic is
// caught by netfilter rules and sent to the forwarders, which listen on a
// free port of loopback (a service address's) or of every address (a node
// port's), where a filter rule refuses any connection that no rule sent.
// Traffic entering the node (from pods,
// whatever their network's shape, and from outside) is diverted with
// mangle TPROXY rules, which hand a packet to a local socket without
// rewriting it, plus a policy route that delivers marked packets locally;
// the node's own traffic is redirected with nat REDIRECT rules. A
// destination whose service has no endpoints gets a filter REJECT rule,
// and one that policy drops a mangle DROP rule. The rules go through the
// iptables package's Runner (one iptables-restore per Sync), the policy
// route through netlink, so redirect mode needs root.
//
// The zero value writes IPv4 rules with the iptables binaries on PATH, in
// chains prefixed "PKU-", with the policy route of DefaultTProxyMark,
// DefaultRouteTable and DefaultRulePriority made over netlink in the
// network namespace New is called in.
type RedirectConfig struct {
	// Runner writes the rules; nil means an xtables.ExecRunner for the
	// Dataplane's family. An xtables.FakeRunner records them instead.
	Runner xtables.Runner
	// Routing installs the policy route; nil means a NetlinkRouting
	// opened in the network namespace of the thread calling New. Tests
	// over an xtables.FakeRunner pass a *FakePolicyRouting, so that
	// nothing reaches the machine's routing.
	Routing PolicyRouting
	// ChainPrefix prefixes the chains; "" means
	// DefaultRedirectChainPrefix. At most 16 characters of A-Z, 0-9, '-'
	// and '_'.
	ChainPrefix string
	// TProxyMark is the fwmark bits TPROXY sets and the routing rule
	// matches; 0 means DefaultTProxyMark. Choose bits no other program of
	// the node uses.
	TProxyMark uint32
	// RouteTable is the routing table holding the local route; 0 means
	// DefaultRouteTable. Not 253, 254 or 255 (the kernel's own).
	RouteTable int
	// RulePriority is the routing rule's priority; 0 means
	// DefaultRulePriority. It must come before the main table's (32766).
	RulePriority int
}

var validRedirectPrefix = regexp.MustCompile(`^[A-Z0-9_-]{1,16}$`)

// redirector keeps the rules and the policy route of the forwarders.
type redirector struct {
	runner  xtables.Runner
	routing PolicyRouting
	policy  PolicyRoute
	// closeRouting closes a routing the redirector opened itself.
	closeRouting func()
	ipv6         bool
	// services is the nat chain of service addresses (hooked from
	// OUTPUT: the node's own traffic), ending in the jump to nodePorts
	// for local destinations; nodePorts is also hooked from PREROUTING
	// for local destinations. divert is the mangle chain diverting
	// traffic that enters the node for service addresses (hooked from
	// PREROUTING), firewall the mangle chain of drops (hooked from
	// PREROUTING and OUTPUT, ahead of divert); reject is the filter chain
	// (hooked from INPUT, FORWARD and OUTPUT), and guard the filter chain
	// that refuses new connections a redirect did not send to a
	// forwarder's own port (hooked from INPUT).
	services, nodePorts, divert, firewall, reject, guard string
	// programmed is each destination's rules as written ("-A CHAIN
	// spec" of their table), nil when none; valid is false until a full
	// write succeeded and after any failure.
	programmed map[destKey][]rule
	valid      bool
	// listed is the chains as listed right after the last write, what
	// Reconcile compares the kernel with; nil before the first.
	listed xtables.Listing
	// gen reads the rules' generation (xtables.GenerationOf), nil when the
	// backend has none; seenGen is the one at which the rules were last
	// seen as written, when seen.
	gen     func(context.Context) (uint32, error)
	seenGen uint32
	seen    bool
	// repaired is what a write found changed by someone else and undid
	// (by writing everything): the next Reconcile reports it, so that it
	// is counted and seen in health as the canary's findings are.
	repaired []string
	log      logr.Logger
}

type rule struct {
	table string
	chain string
	spec  string
}

// redirectTables are the tables redirect mode writes, in the order of its
// restores.
var redirectTables = [...]string{"nat", "mangle", "filter"}

func newRedirector(cfg RedirectConfig, fam v1.IPFamily, log logr.Logger) (*redirector, error) {
	prefix := cfg.ChainPrefix
	if prefix == "" {
		prefix = DefaultRedirectChainPrefix
	}
	if !validRedirectPrefix.MatchString(prefix) {
		return nil, fmt.Errorf("userspace: RedirectConfig.ChainPrefix %q: want at most 16 characters of A-Z, 0-9, '-' and '_'", prefix)
	}
	policy := PolicyRoute{Family: fam, Mark: cmp.Or(cfg.TProxyMark, DefaultTProxyMark),
		Table: cmp.Or(cfg.RouteTable, DefaultRouteTable), Priority: cmp.Or(cfg.RulePriority, DefaultRulePriority)}
	switch {
	case policy.Table < 0 || policy.Table >= 253 && policy.Table <= 255:
		return nil, fmt.Errorf("userspace: RedirectConfig.RouteTable %d: want a table of its own, not 253-255 (the kernel's)", policy.Table)
	case policy.Priority < 0 || policy.Priority >= 32766:
		return nil, fmt.Errorf("userspace: RedirectConfig.RulePriority %d: want 1 to 32765, ahead of the main table's rule", policy.Priority)
	}
	r := &redirector{
		runner:       cfg.Runner,
		routing:      cfg.Routing,
		policy:       policy,
		ipv6:         fam == v1.IPv6Protocol,
		services:     prefix + "SERVICES",
		nodePorts:    prefix + "NODEPORTS",
		divert:       prefix + "TPROXY",
		firewall:     prefix + "FIREWALL",
		reject:       prefix + "REJECT",
		guard:        prefix + "FORWARDERS",
		programmed:   map[destKey][]rule{},
		closeRouting: func() {},
		log:          log,
	}
	if r.runner == nil {
		er, err := xtables.NewExecRunner(xtables.ExecConfig{Family: fam})
		if err != nil {
			return nil, fmt.Errorf("userspace: redirect mode: %w", err)
		}
		log.V(2).Info("Found iptables", "version", er.Version())
		r.runner = er
	}
	r.gen = xtables.GenerationOf(r.runner)
	if r.routing == nil {
		nr, err := OpenNetlinkRouting()
		if err != nil {
			return nil, fmt.Errorf("userspace: redirect mode: %w", err)
		}
		r.routing, r.closeRouting = nr, nr.Close
	}
	return r, nil
}

func (r *redirector) jumps() []xtables.Jump {
	j := func(table, chain, target string, match ...string) xtables.Jump {
		return xtables.Jump{Table: table, Chain: chain, Rule: append(match,
			"-m", "comment", "--comment", "proxykit userspace redirects", "-j", target)}
	}
	// Each jump is inserted first in its chain: the firewall's after the
	// diversion's, so that it runs ahead of it. Only a connection's first
	// packet enters the guard: a later one belongs to a connection the
	// guard let in.
	return []xtables.Jump{
		j("nat", "OUTPUT", r.services), j("nat", "PREROUTING", r.nodePorts, "-m", "addrtype", "--dst-type", "LOCAL"),
		j("mangle", "PREROUTING", r.divert), j("mangle", "PREROUTING", r.firewall), j("mangle", "OUTPUT", r.firewall),
		j("filter", "INPUT", r.reject), j("filter", "FORWARD", r.reject), j("filter", "OUTPUT", r.reject),
		j("filter", "INPUT", r.guard, "-m", "conntrack", "--ctstate", "NEW"),
	}
}

// legacyJumps are the jumps earlier versions made and this one does not:
// removed at every full write, so that an upgraded node leaves the
// traffic entering it to TPROXY.
func (r *redirector) legacyJumps() []xtables.Jump {
	return []xtables.Jump{{Table: "nat", Chain: "PREROUTING", Rule: []string{
		"-m", "comment", "--comment", "proxykit userspace redirects", "-j", r.services}}}
}

// rulesOf returns the rules f needs: while it listens, those sending its
// traffic to its socket, the drops its policy makes and the guard of its
// socket's port; REJECT while nothing of it has endpoints; none otherwise
// (a socket that could not bind yet).
//
// A service address is not the node's: a packet entering the node for it
// is diverted by TPROXY, untouched, to the ingress socket on that address
// and port, and the node's own packet is redirected to the socket on
// loopback. A node port's destination is the node's already: a DNAT of
// the port alone, keeping the address, sends it to the socket on every
// address whichever interface it came through, and the guard refuses a
// connection that reached that port any other way.
func (r *redirector) rulesOf(f *forwarder, rt *routes) []rule {
	proto := strings.ToLower(string(f.key.proto))
	claims := rt.dests[f.key]
	if f.key.proto == v1.ProtocolSCTP || len(claims) == 0 {
		return nil
	}
	match := "-p " + proto + " -m " + proto + " --dport " + strconv.Itoa(int(f.key.port))
	comment := fmt.Sprintf(`-m comment --comment "%s %s"`, claims[0].view.sp.Name, f.fe.Kind)
	bound, ok := f.boundAddr()
	switch {
	case ok && !f.key.nodePort():
		dst := "-d " + host(f.key.addr)
		out := r.drops(claims, rt, comment, []string{dst}, match)
		return append(out,
			rule{"nat", r.services, join(comment, dst, match, fmt.Sprintf("-j REDIRECT --to-ports %d", bound.Port()))},
			rule{"mangle", r.divert, join(comment, dst, match,
				fmt.Sprintf("-j TPROXY --on-port %d --on-ip %s --tproxy-mark %#x/%#x", f.key.port, f.key.addr, r.policy.Mark, r.policy.Mark))},
			r.guardOf(f, bound))
	case ok:
		dsts := r.nodePortDests(rt)
		local := make([]string, len(dsts))
		for i, dst := range dsts {
			local[i] = join(dst, "-m addrtype --dst-type LOCAL")
		}
		out := r.drops(claims, rt, comment, local, match)
		for _, dst := range dsts {
			out = append(out, rule{"nat", r.nodePorts, join(comment, dst, match, fmt.Sprintf("-j DNAT --to-destination :%d", bound.Port()))})
		}
		return append(out, r.guardOf(f, bound))
	case !f.want && !f.key.nodePort():
		return []rule{{"filter", r.reject, fmt.Sprintf("%s -d %s %s -j REJECT", comment, host(f.key.addr), match)}}
	case !f.want:
		return []rule{{"filter", r.reject, fmt.Sprintf("%s -m addrtype --dst-type LOCAL %s -j REJECT", comment, match)}}
	}
	return nil
}

// guardOf is the rule of the guard chain that refuses a new connection
// to the port f's socket listens on, bound: the chain's head has already
// let through those a redirect or DNAT sent there, so what is left came
// straight to that port (an outside client probing the node's ports, or a
// program of the node). The refusal is the kernel's own for a port where
// nothing listens, a TCP reset or an ICMP port unreachable. Its comment
// names the destination, which the port (the kernel's pick) does not,
// and no service: troubleshooting then never takes the rule for a
// service's verdict, and the comment stays within iptables' 255 bytes
// whatever the names' lengths.
func (r *redirector) guardOf(f *forwarder, bound netip.AddrPort) rule {
	proto := strings.ToLower(string(f.key.proto))
	dest := f.fe.String()
	if f.key.nodePort() {
		dest = fmt.Sprintf("%d/%s", f.key.port, f.key.proto)
	}
	comment := fmt.Sprintf(`-m comment --comment "forwarder of %s %s"`, f.fe.Kind, dest)
	dst := ""
	if !bound.Addr().IsUnspecified() {
		dst = "-d " + host(bound.Addr())
	}
	target := "-j REJECT"
	if f.key.proto == v1.ProtocolTCP {
		target += " --reject-with tcp-reset"
	}
	return rule{"filter", r.guard, join(comment, dst, "-p "+proto, "-m "+proto, fmt.Sprintf("--dport %d", bound.Port()), target)}
}

// join joins the non-empty parts of a rule with spaces.
func join(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), " ")
}

// drops returns the rules of the firewall chain that drop, ahead of any
// diversion, what the policy of a destination's only claimant drops
// (State.Lookup): every packet to a cluster IP whose internal traffic
// policy finds no local endpoint; external packets (neither from a pod the
// local-traffic detector knows nor from the node) to a frontend whose
// external traffic policy finds none; and packets to a LoadBalancer VIP
// from outside its source ranges. A destination several service ports
// claim is left to its forwarder, which holds such connections
// unanswered.
func (r *redirector) drops(claims []claim, rt *routes, comment string, dsts []string, match string) []rule {
	if len(claims) != 1 {
		return nil
	}
	cl := claims[0]
	v := cl.view
	var out []rule
	add := func(cond, target string) {
		for _, dst := range dsts {
			out = append(out, rule{"mangle", r.firewall, join(comment, dst, match, cond, target)})
		}
	}
	if cl.kind == ClusterIP {
		if !v.hasInternal {
			add("", "-j DROP")
		}
		return out
	}
	if !v.hasExternal {
		add(join(r.notLocalPod(rt), "-m addrtype ! --src-type LOCAL"), "-j DROP")
	}
	if cl.kind == LoadBalancerIP && v.usesFirewall {
		// The ranges are let through to what follows; the rest dropped.
		for _, p := range v.sp.LoadBalancerSourceRanges {
			if p.Addr().Is6() == r.ipv6 {
				add("-s "+p.Masked().String(), "-j RETURN")
			}
		}
		for _, vip := range v.sp.LoadBalancerVIPs {
			if vip.Is6() == r.ipv6 && rt.allowedBySourceRanges(v.sp, vip) {
				add("-s "+host(vip), "-j RETURN")
			}
		}
		add("", "-j DROP")
	}
	return out
}

// notLocalPod is the match of packets the local-traffic detector does not
// take for pod traffic, "" without a detector.
func (r *redirector) notLocalPod(rt *routes) string {
	d := rt.set.LocalDetector
	switch d.Mode {
	case dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR:
		if rt.hasDetect {
			return "! -s " + rt.detect.Masked().String()
		}
	case dataplane.LocalModeBridgeInterface, dataplane.LocalModeInterfaceNamePrefix:
		// A name no rule may hold never gets here (Sync's CheckState).
		if name, ok := backend.LocalInterface(d, "+"); ok {
			return "! -i " + name
		}
	}
	return ""
}

// nodePortDests are the destination matches of node port rules (behind
// the jumps' "--dst-type LOCAL"): NodePortAddresses' CIDRs of the family,
// or every local address.
func (r *redirector) nodePortDests(rt *routes) []string {
	var cidrs []string
	for _, p := range rt.set.NodePortAddresses {
		if p.Addr().Is6() != r.ipv6 {
			continue
		}
		if p.Bits() == 0 {
			return []string{""}
		}
		cidrs = append(cidrs, "-d "+p.Masked().String())
	}
	if len(cidrs) == 0 {
		return []string{""}
	}
	slices.Sort(cidrs)
	return slices.Compact(cidrs)
}

// loopbackReturn is the rule heading the node port chain that keeps
// loopback out of it, "" when localhost node ports are served (IPv4 only).
func (r *redirector) loopbackReturn(rt *routes) string {
	switch {
	case r.ipv6:
		return "-d ::1/128 -j RETURN"
	case !rt.set.LocalhostNodePorts:
		return "-d 127.0.0.0/8 -j RETURN"
	}
	return ""
}

func host(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }

// sync writes the rules of the forwarders of keys (every forwarder when
// full, or when the last write failed) in one restore; a full write also
// hooks the chains in and makes sure of the policy route.
func (r *redirector) sync(ctx context.Context, fwds map[destKey]*forwarder, keys []destKey, rt *routes, full bool) (int, error) {
	full = full || !r.valid
	if !full {
		full = r.foreignChange(ctx)
	}
	want := map[destKey][]rule{}
	if full {
		keys = slices.Collect(maps.Keys(fwds))
	}
	for _, k := range keys {
		if f := fwds[k]; f != nil {
			want[k] = r.rulesOf(f, rt)
		}
	}
	var b strings.Builder
	for _, table := range redirectTables {
		if body := r.render(table, keys, want, rt, full); body != "" {
			fmt.Fprintf(&b, "*%s\n%sCOMMIT\n", table, body)
		}
	}
	if b.Len() > 0 {
		if err := r.runner.Restore(ctx, xtables.RestoreBytes(b.String())); err != nil {
			r.valid = false
			return 0, fmt.Errorf("userspace: write redirect rules: %w", err)
		}
		listed, err := r.owned().List(ctx, r.runner)
		if err != nil {
			r.valid = false
			return 0, fmt.Errorf("userspace: list redirect rules: %w", err)
		}
		r.listed = listed
	}
	if full {
		listed := r.listed
		if b.Len() == 0 {
			var err error
			if listed, err = r.owned().List(ctx, r.runner); err != nil {
				r.valid = false
				return 0, fmt.Errorf("userspace: list redirect rules: %w", err)
			}
		}
		if err := r.hook(ctx, listed); err != nil {
			r.valid = false
			return 0, err
		}
		clear(r.programmed)
	}
	for _, k := range keys {
		if rules := want[k]; len(rules) > 0 {
			r.programmed[k] = rules
		} else {
			delete(r.programmed, k)
		}
	}
	r.valid = true
	r.noteGeneration(ctx)
	return b.Len(), nil
}

// render returns the restore lines of one table: the whole of its chains
// when full, else the removal and addition of the rules of keys that
// changed.
func (r *redirector) render(table string, keys []destKey, want map[destKey][]rule, rt *routes, full bool) string {
	var body strings.Builder
	if full {
		for _, c := range r.chains(table) {
			fmt.Fprintf(&body, ":%s - [0:0]\n", c)
		}
		switch table {
		case "nat":
			fmt.Fprintf(&body, "-A %s -m addrtype --dst-type LOCAL -j %s\n", r.services, r.nodePorts)
			if ret := r.loopbackReturn(rt); ret != "" {
				fmt.Fprintf(&body, "-A %s %s\n", r.nodePorts, ret)
			}
		case "filter":
			// What a REDIRECT or DNAT sent (the packet's conntrack
			// entry says so) is the forwarders' to take.
			fmt.Fprintf(&body, "-A %s -m conntrack --ctstate DNAT -j RETURN\n", r.guard)
		}
	} else {
		for _, k := range keys {
			if slices.Equal(r.programmed[k], want[k]) {
				continue
			}
			for _, ru := range r.programmed[k] {
				if ru.table == table {
					fmt.Fprintf(&body, "-D %s %s\n", ru.chain, ru.spec)
				}
			}
		}
	}
	for _, k := range sortedKeys(want) {
		if !full && slices.Equal(r.programmed[k], want[k]) {
			continue
		}
		var ahead []string
		for _, ru := range want[k] {
			switch {
			case ru.table != table:
			case ru.chain == r.services:
				ahead = append(ahead, ru.spec)
			default:
				fmt.Fprintf(&body, "-A %s %s\n", ru.chain, ru.spec)
			}
		}
		// Service rules go first, ahead of the chain's last rule (the jump
		// to node ports), each inserted at the top: the last first, so
		// that they keep their order.
		for _, spec := range slices.Backward(ahead) {
			fmt.Fprintf(&body, "-I %s 1 %s\n", r.services, spec)
		}
	}
	return body.String()
}

// hook inserts the jumps listed lacks into the chains, removes those of
// earlier versions and makes sure of the policy route.
func (r *redirector) hook(ctx context.Context, listed xtables.Listing) error {
	if err := r.owned().Hook(ctx, r.runner, listed); err != nil {
		return fmt.Errorf("userspace: hook redirect rules: %w", err)
	}
	for _, j := range r.legacyJumps() {
		if err := r.runner.DeleteJump(ctx, j); err != nil {
			return fmt.Errorf("userspace: unhook an earlier version's redirect rules: %w", err)
		}
	}
	if err := r.routing.Ensure(ctx, r.policy); err != nil {
		return fmt.Errorf("userspace: %w", err)
	}
	return nil
}

// chains are the chains of table, the head first.
func (r *redirector) chains(table string) []string {
	switch table {
	case "nat":
		return []string{r.services, r.nodePorts}
	case "mangle":
		return []string{r.divert, r.firewall}
	}
	return []string{r.reject, r.guard}
}

func sortedKeys(m map[destKey][]rule) []destKey {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b destKey) int {
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		if c := int(a.port) - int(b.port); c != 0 {
			return c
		}
		return strings.Compare(string(a.proto), string(b.proto))
	})
	return keys
}

// cleanup unhooks and deletes the chains and the policy route, whether
// or not they exist.
func (r *redirector) cleanup(ctx context.Context) error {
	var errs []error
	for _, j := range r.legacyJumps() {
		if err := r.runner.DeleteJump(ctx, j); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.owned().Remove(ctx, r.runner); err != nil {
		errs = append(errs, err)
	}
	if err := r.routing.Remove(ctx, r.policy); err != nil {
		errs = append(errs, err)
	}
	clear(r.programmed)
	r.valid, r.listed = false, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("userspace: remove redirect rules: %w", err)
	}
	return nil
}

// redirectSync writes the rules of the forwarders of keys; with mu held.
func (d *Dataplane) redirectSync(ctx context.Context, keys []destKey, full bool) (int, error) {
	if d.redir == nil {
		return 0, nil
	}
	d.routesMu.RLock()
	defer d.routesMu.RUnlock()
	return d.redir.sync(ctx, d.fwds, keys, &d.routes, full)
}

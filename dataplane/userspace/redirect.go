package userspace

import (
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
	"github.com/proxykit/proxykit/dataplane/iptables"
	v1 "k8s.io/api/core/v1"
)

// DefaultRedirectChainPrefix prefixes redirect mode's chains: never the
// iptables dataplane's "PK-", so that both can run on one node.
const DefaultRedirectChainPrefix = "PKU-"

// RedirectConfig configures redirect mode: kube-proxy's userspace design.
// Every forwarder listens on a free port of every node address, and nat
// REDIRECT rules send each service address and node port there; a
// destination whose service has no endpoints gets a filter REJECT rule
// instead. The rules go through the iptables package's Runner (one
// iptables-restore per Sync), so redirect mode needs root.
//
// The zero value writes IPv4 rules with the iptables binaries on PATH,
// in chains prefixed "PKU-".
type RedirectConfig struct {
	// Runner writes the rules; nil means an iptables.ExecRunner for the
	// Dataplane's family. An iptables.FakeRunner records them instead.
	Runner iptables.Runner
	// ChainPrefix prefixes the chains; "" means
	// DefaultRedirectChainPrefix. At most 16 characters of A-Z, 0-9, '-'
	// and '_'.
	ChainPrefix string
}

var validRedirectPrefix = regexp.MustCompile(`^[A-Z0-9_-]{1,16}$`)

// redirector keeps the REDIRECT and REJECT rules of the forwarders.
type redirector struct {
	runner iptables.Runner
	ipv6   bool
	// services is the nat chain of service addresses (hooked from
	// PREROUTING and OUTPUT), ending in the jump to nodePorts for local
	// destinations; reject is the filter chain (hooked from INPUT,
	// FORWARD and OUTPUT).
	services, nodePorts, reject string
	// programmed is each destination's rules as written ("-A CHAIN
	// spec" of their table), nil when none; valid is false until a full
	// write succeeded and after any failure.
	programmed map[destKey][]rule
	valid      bool
	// listed is the three chains as listed right after the last write,
	// what Reconcile compares the kernel with; nil before the first.
	listed map[tableChain][]string
}

type rule struct {
	table string
	chain string
	spec  string
}

func newRedirector(cfg RedirectConfig, family v1.IPFamily, log logr.Logger) (*redirector, error) {
	prefix := cfg.ChainPrefix
	if prefix == "" {
		prefix = DefaultRedirectChainPrefix
	}
	if !validRedirectPrefix.MatchString(prefix) {
		return nil, fmt.Errorf("userspace: RedirectConfig.ChainPrefix %q: want at most 16 characters of A-Z, 0-9, '-' and '_'", prefix)
	}
	r := &redirector{
		runner:     cfg.Runner,
		ipv6:       family == v1.IPv6Protocol,
		services:   prefix + "SERVICES",
		nodePorts:  prefix + "NODEPORTS",
		reject:     prefix + "REJECT",
		programmed: map[destKey][]rule{},
	}
	if r.runner == nil {
		er, err := iptables.NewExecRunner(iptables.ExecConfig{Family: family})
		if err != nil {
			return nil, fmt.Errorf("userspace: redirect mode: %w", err)
		}
		log.V(2).Info("Found iptables", "version", er.Version())
		r.runner = er
	}
	return r, nil
}

func (r *redirector) jumps() []iptables.Jump {
	j := func(table, chain, target string) iptables.Jump {
		return iptables.Jump{Table: table, Chain: chain, Rule: []string{
			"-m", "comment", "--comment", "proxykit userspace redirects", "-j", target}}
	}
	return []iptables.Jump{
		j("nat", "PREROUTING", r.services), j("nat", "OUTPUT", r.services),
		j("filter", "INPUT", r.reject), j("filter", "FORWARD", r.reject), j("filter", "OUTPUT", r.reject),
	}
}

// rulesOf returns the rules f needs: REDIRECT to its socket while it
// listens, REJECT while nothing of it has endpoints, none otherwise (a
// socket that could not bind yet).
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
		return []rule{{"nat", r.services, fmt.Sprintf("%s -d %s %s -j REDIRECT --to-ports %d", comment, host(f.key.addr), match, bound.Port())}}
	case ok:
		var out []rule
		for _, dst := range r.nodePortDests(rt) {
			out = append(out, rule{"nat", r.nodePorts, fmt.Sprintf("%s%s %s -j REDIRECT --to-ports %d", comment, dst, match, bound.Port())})
		}
		return out
	case !f.want && !f.key.nodePort():
		return []rule{{"filter", r.reject, fmt.Sprintf("%s -d %s %s -j REJECT", comment, host(f.key.addr), match)}}
	case !f.want:
		return []rule{{"filter", r.reject, fmt.Sprintf("%s -m addrtype --dst-type LOCAL %s -j REJECT", comment, match)}}
	}
	return nil
}

// nodePortDests are the destination matches of node port rules (after
// the jump's "--dst-type LOCAL"): NodePortAddresses' CIDRs of the family,
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
		cidrs = append(cidrs, " -d "+p.Masked().String())
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
// full, or when the last write failed) in one restore.
func (r *redirector) sync(ctx context.Context, fwds map[destKey]*forwarder, keys []destKey, rt *routes, full bool) (int, error) {
	full = full || !r.valid
	var b strings.Builder
	want := map[destKey][]rule{}
	if full {
		keys = slices.Collect(maps.Keys(fwds))
	}
	for _, k := range keys {
		if f := fwds[k]; f != nil {
			want[k] = r.rulesOf(f, rt)
		}
	}
	tables := [2]string{"nat", "filter"}
	for _, table := range tables {
		var body strings.Builder
		if full {
			for _, c := range r.chains(table) {
				fmt.Fprintf(&body, ":%s - [0:0]\n", c)
			}
			if table == "nat" {
				fmt.Fprintf(&body, "-A %s -m addrtype --dst-type LOCAL -j %s\n", r.services, r.nodePorts)
				if ret := r.loopbackReturn(rt); ret != "" {
					fmt.Fprintf(&body, "-A %s %s\n", r.nodePorts, ret)
				}
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
			for _, ru := range want[k] {
				if ru.table != table {
					continue
				}
				// Service rules go first, ahead of the chain's last rule,
				// the jump to node ports.
				op := "-A " + ru.chain
				if ru.chain == r.services {
					op = "-I " + ru.chain + " 1"
				}
				fmt.Fprintf(&body, "%s %s\n", op, ru.spec)
			}
		}
		if body.Len() > 0 {
			fmt.Fprintf(&b, "*%s\n%sCOMMIT\n", table, body.String())
		}
	}
	if b.Len() > 0 {
		if err := r.runner.Restore(ctx, iptables.RestoreBytes(b.String())); err != nil {
			r.valid = false
			return 0, fmt.Errorf("userspace: write redirect rules: %w", err)
		}
		listed, err := r.list(ctx)
		if err != nil {
			r.valid = false
			return 0, fmt.Errorf("userspace: list redirect rules: %w", err)
		}
		r.listed = listed
	}
	if full {
		for _, j := range r.jumps() {
			if err := r.runner.EnsureJump(ctx, j); err != nil {
				r.valid = false
				return 0, fmt.Errorf("userspace: hook redirect rules: %w", err)
			}
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
	return b.Len(), nil
}

func (r *redirector) chains(table string) []string {
	if table == "nat" {
		return []string{r.services, r.nodePorts}
	}
	return []string{r.reject}
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

// cleanup unhooks and deletes the chains, whether or not they exist.
func (r *redirector) cleanup(ctx context.Context) error {
	var errs []error
	for _, j := range r.jumps() {
		if err := r.runner.DeleteJump(ctx, j); err != nil {
			errs = append(errs, err)
		}
	}
	var b strings.Builder
	for _, table := range []string{"nat", "filter"} {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range r.chains(table) {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		for _, c := range r.chains(table) {
			fmt.Fprintf(&b, "-X %s\n", c)
		}
		b.WriteString("COMMIT\n")
	}
	if err := r.runner.Restore(ctx, iptables.RestoreBytes(b.String())); err != nil {
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

package iptables

import (
	"bytes"
	"context"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"k8s.io/apimachinery/pkg/types"
)

// keyed is the rendering of one service port.
type keyed struct {
	key string
	r   *rendered
}

type svcState struct {
	ports     []keyed
	endpoints int
}

// programmed is a model of what the dataplane's chains hold.
type programmed struct {
	view     *view
	services map[types.NamespacedName]*svcState
	// ports caches sortedPorts.
	ports  []keyed
	shared [numShared][]entry
	// endpoints is the total endpoint count, for large-cluster mode.
	endpoints int
	// liberal is nf_conntrack_tcp_be_liberal being set, which makes the
	// INVALID-drop rule unnecessary.
	liberal bool
	// state is the State last synced.
	state *dataplane.State
	// rules counts the rules of the dataplane's own chains, per table.
	rules [numTables]int
	// verified maps "table chain" to a hash of the rules a Reconcile
	// read back for that chain and found as programmed. Until the
	// dataplane writes the chain again, the same listing needs no
	// comparing rule by rule; every write forgets the chain.
	verified map[string]uint64
}

// writer accumulates restore input.
type writer struct{ bytes.Buffer }

func (w *writer) line(parts ...string) {
	for _, p := range parts {
		w.WriteString(p)
	}
	w.WriteByte('\n')
}

// jumps are the rules in built-in chains that hook the dataplane in, in
// the order they are inserted at the top of their chains (so the last one
// ends up first), as upstream orders them.
func (d *Dataplane) jumps() []xtables.Jump {
	n := d.names
	newOnly := []string{"-m", "conntrack", "--ctstate", "NEW"}
	j := func(table, chain string, extra []string, comment, target string) xtables.Jump {
		rule := append(slices.Clone(extra), "-m", "comment", "--comment", comment, "-j", target)
		return xtables.Jump{Table: table, Chain: chain, Rule: rule}
	}
	return []xtables.Jump{
		j("filter", "INPUT", newOnly, "proxykit externally-visible service portals", n.externalServices),
		j("filter", "FORWARD", newOnly, "proxykit externally-visible service portals", n.externalServices),
		// Not in upstream: without it the node's own connections to an
		// external IP or VIP of a service with no endpoints leave the node
		// instead of being rejected, which State.Lookup does not allow.
		j("filter", "OUTPUT", newOnly, "proxykit externally-visible service portals", n.externalServices),
		j("filter", "INPUT", nil, "proxykit health check service ports", n.nodePorts),
		j("filter", "FORWARD", newOnly, "proxykit service portals", n.services),
		j("filter", "OUTPUT", newOnly, "proxykit service portals", n.services),
		j("filter", "FORWARD", nil, "proxykit forwarding rules", n.forward),
		j("filter", "INPUT", newOnly, "proxykit load balancer firewall", n.proxyFirewall),
		j("filter", "OUTPUT", newOnly, "proxykit load balancer firewall", n.proxyFirewall),
		j("filter", "FORWARD", newOnly, "proxykit load balancer firewall", n.proxyFirewall),
		j("nat", "OUTPUT", nil, "proxykit service portals", n.services),
		j("nat", "PREROUTING", nil, "proxykit service portals", n.services),
		j("nat", "POSTROUTING", nil, "proxykit postrouting rules", n.postrouting),
		j("filter", "INPUT", nil, "proxykit localnet firewall", n.firewall),
		j("filter", "OUTPUT", nil, "proxykit localnet firewall", n.firewall),
	}
}

// Sysctls the dataplane reads or sets.
const (
	sysctlRouteLocalnet = "net/ipv4/conf/all/route_localnet"
	sysctlTCPBeLiberal  = "net/netfilter/nf_conntrack_tcp_be_liberal"
)

// Sync implements dataplane.Dataplane. The first Sync, the first after a
// failure or a failed Reconcile, and one after a change of node addresses
// or settings rewrite every chain the dataplane owns and delete stale
// ones; the others write only the chains of services that changed plus
// single-rule edits of the shared chains. Repairing what someone else
// changed is Reconcile's job, not a periodic rewrite's.
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := d.checkState(s); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	prog := d.prog
	full := prog == nil
	var v *view
	if !full {
		if s == prog.state {
			d.stats = SyncStats{}
			for t := range numTables {
				d.metrics.rulesLastSync[t].Set(0)
			}
			return nil
		}
		v = newView(s, d.ipv6)
		v.noComments = prog.view.noComments
		// Only a full sync makes the counters again.
		v.accounting = prog.view.accounting
		full = !v.equal(prog.view)
	}
	var err error
	if !full {
		var again bool
		again, err = d.partialSync(ctx, s, v)
		full = again
	}
	if full {
		err = d.fullSync(ctx, s)
	}
	if err != nil {
		d.prog = nil
		return err
	}
	d.prog.state = s
	d.last = s
	for t := range numTables {
		d.metrics.rules[t].Set(float64(d.prog.rules[t]))
		d.metrics.rulesLastSync[t].Set(float64(d.stats.written[t]))
	}
	return nil
}

package iptables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/fanout"
	"github.com/proxykit/proxykit/internal/logtext"
	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
)

// renderer returns a renderer for view v that reports skips to skip.
func (d *Dataplane) renderer(v *view, skip fanout.Skip) *renderer {
	return &renderer{names: d.names, v: v, skip: skip}
}

// countEndpoints is upstream's large-cluster measure for one service.
func (d *Dataplane) countEndpoints(s *dataplane.State, nn types.NamespacedName) int {
	n := 0
	for _, sp := range s.Services.Service(nn) {
		if sp != nil {
			n += len(s.Endpoints.Get(sp.Name))
		}
	}
	return n
}

// service renders every valid port of service nn, whose inputs in s
// are ports and eps (one endpoint list per port).
func (r *renderer) service(s *dataplane.State, nn types.NamespacedName, ports []*servicemodel.ServicePort, eps [][]*endpoints.Endpoint) *svcState {
	if len(ports) == 0 {
		return nil
	}
	st := &svcState{ports: make([]keyed, 0, len(ports))}
	for i, sp := range ports {
		p, reason := checkPort(sp, r.v.ipv6, func(why string) { r.skip(why, "service", logtext.Name(nn)) })
		if reason != "" {
			r.skip(reason, "service", logtext.Name(nn))
			continue
		}
		st.ports = append(st.ports, keyed{p.key, r.renderPort(p, r.selection(s, sp, eps[i], nn))})
		st.endpoints += len(eps[i])
	}
	slices.SortFunc(st.ports, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	// Two ports with one key would write identical chains; keep the first.
	st.ports = slices.CompactFunc(st.ports, func(a, b keyed) bool { return a.key == b.key })
	if len(st.ports) == 0 {
		return nil
	}
	return st
}

// selection asks the State which of eps, sp's endpoints, serve sp and
// drops those that cannot be written into a rule.
func (r *renderer) selection(s *dataplane.State, sp *servicemodel.ServicePort, eps []*endpoints.Endpoint, nn types.NamespacedName) selection {
	sel := s.SelectFrom(sp, eps)
	out := selection{hasAny: sel.HasAny}
	dropped := 0
	ipv6 := r.v.ipv6
	keep := func(in []*endpoints.Endpoint) []*endpoints.Endpoint {
		if !slices.ContainsFunc(in, func(e *endpoints.Endpoint) bool { return !ruleport.UsableEndpoint(e, ipv6) }) {
			return in
		}
		var res []*endpoints.Endpoint
		for _, e := range in {
			if ruleport.UsableEndpoint(e, ipv6) {
				res = append(res, e)
			} else {
				dropped++
			}
		}
		return res
	}
	out.cluster, out.local, out.all = keep(sel.Cluster), keep(sel.Local), keep(sel.AllReachable)
	if dropped > 0 {
		r.skip("endpoint address invalid or of another family", "service", logtext.Name(nn))
		if len(out.all) == 0 && len(sel.AllReachable) > 0 {
			out.hasAny = false
		}
	}
	return out
}

// parallelMin is the fewest services per goroutine a full sync renders
// on several: below it, starting goroutines costs more than it saves.
const parallelMin = 256

// serviceInputs is what one service is rendered from.
type serviceInputs struct {
	nn    types.NamespacedName
	ports []*servicemodel.ServicePort
	eps   [][]*endpoints.Endpoint
}

// keep records st, the rendering of in, in prog and the cache next.
func keep(prog *programmed, next *renderCache, in serviceInputs, st *svcState) {
	next.services[in.nn] = cachedService{ports: in.ports, eps: in.eps, st: st}
	if st != nil {
		prog.services[in.nn] = st
	}
}

// build renders every service of s, reusing what cache holds for services
// whose inputs are unchanged, and returns the cache of this rendering;
// accounting says whether the nfacct counters exist.
func (d *Dataplane) build(s *dataplane.State, cache *renderCache, accounting bool) (*programmed, *renderCache) {
	v := newView(s, d.ipv6)
	v.accounting = accounting
	for _, r := range v.ignored {
		d.skip(r)
	}
	// Len counts ports, at least one per service: enough room for every
	// service, so that no map grows while it is filled.
	prog := &programmed{view: v, services: make(map[types.NamespacedName]*svcState, s.Services.Len())}
	// The endpoint count decides large-cluster mode, which every rule
	// depends on, so it is summed before anything is rendered; the inputs
	// looked up for it are kept for the rendering.
	all := make([]serviceInputs, 0, s.Services.Len())
	// Every service's lists are cut from one array, which the cache keeps
	// and drops as a whole.
	free := make([][]*endpoints.Endpoint, s.Services.Len())
	for nn, ports := range s.Services.Services() {
		var eps [][]*endpoints.Endpoint
		eps, free = endpointLists(s, ports, free)
		for _, list := range eps {
			prog.endpoints += len(list)
		}
		all = append(all, serviceInputs{nn, ports, eps})
	}
	v.noComments = prog.endpoints > largeClusterEndpoints
	old := cache.usable(s, v)
	next := &renderCache{view: v, node: s.Node, settings: s.Settings, services: make(map[types.NamespacedName]cachedService, s.Services.Len())}
	var todo []serviceInputs
	for _, in := range all {
		if st, ok := old.lookup(in.nn, in.ports, in.eps); ok {
			keep(prog, next, in, st)
		} else {
			todo = append(todo, in)
		}
	}
	sts := make([]*svcState, len(todo))
	fanout.Map(d.workers, parallelMin, todo, sts, d.skip, func(skip fanout.Skip) func(serviceInputs) *svcState {
		r := d.renderer(v, skip)
		return func(in serviceInputs) *svcState { return r.service(s, in.nn, in.ports, in.eps) }
	})
	for i, in := range todo {
		keep(prog, next, in, sts[i])
	}
	for _, k := range prog.sortedPorts() {
		for sh := range numShared {
			for i, rule := range k.r.dispatch[sh] {
				prog.shared[sh] = append(prog.shared[sh], entry{k.key, i, rule})
			}
		}
	}
	return prog, next
}

// sortedPorts returns every rendered port in key order, sorting them once
// until a partial sync changes the services.
func (p *programmed) sortedPorts() []keyed {
	if p.ports != nil {
		return p.ports
	}
	n := 0
	for _, st := range p.services {
		n += len(st.ports)
	}
	all := make([]keyed, 0, n)
	for _, st := range p.services {
		all = append(all, st.ports...)
	}
	slices.SortFunc(all, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	p.ports = all
	return all
}

// nodePortJumps are the last rules of the nat services chain.
func (d *Dataplane) nodePortJumps(v *view) []string {
	var out []string
	for _, dst := range v.nodePortDsts {
		out = append(out, comment("proxykit service nodeports; NOTE: this must be the last rule in this chain")+" "+dst+" -j "+d.names.nodePorts)
	}
	return out
}

// writeFull writes the restore input that replaces every chain of prog,
// deletes the stale chains and inserts jumps. ports are the service ports
// whose own chains it writes: all of prog's, or none for the fixed and
// shared chains alone.
func (d *Dataplane) writeFull(b *stream, prog *programmed, ports []keyed, stale []string, jumps []xtables.Jump) {
	n := d.names
	b.line("*filter")
	for _, c := range []string{n.services, n.externalServices, n.forward, n.nodePorts, n.proxyFirewall, n.firewall, n.canary} {
		b.line(":", c, " - [0:0]")
	}
	b.line("-A ", n.canary, canaryRule)
	if prog.view.localhostNodePorts {
		b.line("-A ", n.firewall, ` -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`)
	}
	if !prog.liberal {
		if prog.view.accounting {
			b.line("-A ", n.forward, " -m conntrack --ctstate INVALID -m nfacct --nfacct-name ", InvalidDroppedCounter, " -j DROP")
		} else {
			b.line("-A ", n.forward, " -m conntrack --ctstate INVALID -j DROP")
		}
	}
	b.line("-A ", n.forward, ` -m comment --comment "proxykit forwarding rules" -m mark --mark `, d.mark, "/", d.mark, " -j ACCEPT")
	b.line("-A ", n.forward, ` -m comment --comment "proxykit forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`)
	for _, sh := range []shared{filterServices, filterExternal, filterNodePorts, filterProxyFirewall} {
		for _, e := range prog.shared[sh] {
			b.line("-A ", n.sharedName(sh), " ", e.rule)
		}
	}
	writeJumps(b, "filter", jumps)
	b.line("COMMIT")

	b.line("*nat")
	for _, c := range []string{n.services, n.nodePorts, n.postrouting, n.markMasq, n.canary} {
		b.line(":", c, " - [0:0]")
	}
	b.line("-A ", n.canary, canaryRule)
	for _, k := range ports {
		b.decls(&k.r.own)
	}
	for _, c := range stale {
		b.line(":", c, " - [0:0]")
	}
	b.line("-A ", n.postrouting, " -m mark ! --mark ", d.mark, "/", d.mark, " -j RETURN")
	b.line("-A ", n.postrouting, " -j MARK --xor-mark ", d.mark)
	b.line("-A ", n.postrouting, ` -m comment --comment "proxykit service traffic requiring SNAT" -j MASQUERADE --random-fully`)
	b.line("-A ", n.markMasq, " -j MARK --or-mark ", d.mark)
	for _, e := range prog.shared[natServices] {
		b.line("-A ", n.services, " ", e.rule)
	}
	for _, r := range d.nodePortJumps(prog.view) {
		b.line("-A ", n.services, " ", r)
	}
	for _, e := range prog.shared[natNodePorts] {
		b.line("-A ", n.nodePorts, " ", e.rule)
	}
	for _, k := range ports {
		b.rules(&k.r.own)
	}
	for _, c := range stale {
		b.line("-X ", c)
	}
	writeJumps(b, "nat", jumps)
	b.line("COMMIT")
}

// fullSync rewrites everything the dataplane owns.
func (d *Dataplane) fullSync(ctx context.Context, s *dataplane.State) error {
	// Rendering is pure computation: it runs beside the listings, which
	// wait on processes. The listings stay on the calling goroutine, whose
	// thread may be in another network namespace.
	type rendering struct {
		prog  *programmed
		cache *renderCache
	}
	// The counters come first: whether they exist decides the rules.
	accounting := d.ensureCounters(ctx)
	done := make(chan rendering, 1)
	go func() {
		prog, cache := d.build(s, d.cache, accounting)
		done <- rendering{prog, cache}
	}()
	saves := map[string]*listing{}
	for _, table := range tableNames {
		out, err := d.runner.Save(ctx, table)
		if err != nil {
			d.log.Error(err, "Cannot list rules, stale chains stay and every jump is checked", "table", table)
			continue
		}
		saves[table] = d.parseListing(table, out)
	}
	r := <-done
	prog := r.prog
	d.cache = r.cache
	d.applySysctls(prog)
	stale := d.staleChains(saves["nat"], prog)
	// Jumps the listing lacks go into the restore itself: an iptables
	// command per jump would read the whole, now full, table each time.
	// Only where the table could not be listed is each one checked.
	var inRestore, checked []xtables.Jump
	for _, j := range d.jumps() {
		switch l := saves[j.Table]; {
		case l == nil:
			checked = append(checked, j)
		case !l.hasJump(j):
			inRestore = append(inRestore, j)
		}
	}
	in := d.fullInput(prog, stale, inRestore)
	d.warnSlowBackend(prog)
	if err := d.runner.Restore(ctx, in); err != nil {
		d.metrics.fullRestoreFailures.Inc()
		d.countTimeout(err)
		return fmt.Errorf("full sync: %w", err)
	}
	d.gens.noteFull(ctx)
	// A full sync writes every rule of the own chains, and only those.
	written := in.written
	prog.rules = written
	for _, j := range checked {
		if err := d.runner.EnsureJump(ctx, j); err != nil {
			return fmt.Errorf("full sync: %w", err)
		}
	}
	d.prog = prog
	d.stats = SyncStats{SyncReport: dataplane.SyncReport{Full: true, Bytes: in.size, Services: len(prog.services)}, written: written}
	d.log.V(2).Info("Full sync", "services", len(prog.services), "endpoints", prog.endpoints, "bytes", in.size, "staleChains", len(stale))
	return nil
}

// applySysctls reads whether conntrack is liberal (which makes the INVALID
// drop unnecessary) and enables route_localnet for localhost node ports.
func (d *Dataplane) applySysctls(prog *programmed) {
	if v, err := d.sysctl.Get(sysctlTCPBeLiberal); err == nil {
		prog.liberal = v != "" && v != "0"
	} else {
		d.log.V(2).Info("Cannot read sysctl, keeping the INVALID drop rule", "sysctl", sysctlTCPBeLiberal, "err", err)
	}
	if prog.view.localhostNodePorts {
		if err := d.sysctl.Set(sysctlRouteLocalnet, "1"); err != nil {
			d.log.Error(err, "Cannot enable node ports on localhost")
		}
	}
}

// staleChains lists the per-service nat chains of the prefix that prog
// does not use: left over from a previous run or a failed sync.
func (d *Dataplane) staleChains(nat *listing, prog *programmed) []string {
	var listed []string
	for _, c := range nat.chainNames() {
		if d.names.isServiceChain(c) {
			listed = append(listed, c)
		}
	}
	if len(listed) == 0 {
		return nil
	}
	used := make(map[string]bool, len(listed))
	for _, st := range prog.services {
		for _, k := range st.ports {
			for _, c := range k.r.own.spans {
				used[c.name] = true
			}
		}
	}
	var stale []string
	for _, c := range listed {
		if !used[c] {
			stale = append(stale, c)
		}
	}
	slices.Sort(stale)
	return stale
}

// writeJumps inserts the jumps of table at the top of their built-in
// chains, in order, so that the last ends up first (as kube-proxy orders
// them).
func writeJumps(b interface{ line(...string) }, table string, jumps []xtables.Jump) {
	for _, j := range jumps {
		if j.Table == table {
			b.line("-I ", j.Chain, " 1 ", xtables.JoinRule(j.Rule))
		}
	}
}

// nftSlowEndpoints is where iptables-nft becomes slow enough to warn about:
// here its restore of 10k endpoints' rules took 4.5 s where
// iptables-legacy took 0.2 s, and 100k endpoints' did not finish in 44
// minutes.
const nftSlowEndpoints = 5000

// warnSlowBackend says once, at the first full sync that is large enough,
// that the nft backend of iptables will be slow.
func (d *Dataplane) warnSlowBackend(prog *programmed) {
	r, ok := d.runner.(interface{ Backend() string })
	if d.warnedSlow || !ok || r.Backend() != "nft" || prog.endpoints < nftSlowEndpoints {
		return
	}
	d.warnedSlow = true
	d.log.Info("Large ruleset on the nft backend of iptables: restores will be slow and may hit their deadline; the nftables dataplane (--proxy-mode nftables) suits large clusters",
		"endpoints", prog.endpoints)
}

// countTimeout counts a restore killed at its deadline.
func (d *Dataplane) countTimeout(err error) {
	var re *xtables.RestoreError
	if errors.As(err, &re) && re.Timeout > 0 {
		d.metrics.restoreTimeouts.Inc()
	}
}

// fullInput is the restore input of a full sync, written on demand from
// the renderings prog keeps, never held whole.
type fullInput struct {
	d     *Dataplane
	prog  *programmed
	stale []string
	jumps []xtables.Jump
	// size and written are what WriteTo writes: its length and the own
	// rules per table.
	size    int
	written [numTables]int
}

// fullInput returns the input that replaces every chain of prog, deletes
// the stale chains and inserts jumps, having measured it.
func (d *Dataplane) fullInput(prog *programmed, stale []string, jumps []xtables.Jump) *fullInput {
	in := &fullInput{d: d, prog: prog, stale: stale, jumps: jumps}
	count := newStream(nil, d.names.canary)
	d.writeFull(count, prog, prog.sortedPorts(), stale, jumps)
	in.size, in.written = count.n, count.written
	return in
}

// WriteTo implements io.WriterTo.
func (in *fullInput) WriteTo(w io.Writer) (int64, error) {
	s := newStream(w, in.d.names.canary)
	in.d.writeFull(s, in.prog, in.prog.sortedPorts(), in.stale, in.jumps)
	s.flush()
	return int64(s.n), s.err
}

// Len implements RestoreInput.
func (in *fullInput) Len() int { return in.size }

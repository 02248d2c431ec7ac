package iptables

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
)

// entry is one rule of a shared chain, owned by the service port whose key
// it carries. Shared chains are kept sorted by (key, seq), so that the
// position of any rule can be computed without asking the kernel.
type entry struct {
	key  string
	seq  int
	rule string
}

func compareEntries(a, b entry) int {
	return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.seq, b.seq))
}

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
	shared   [numShared][]entry
	// endpoints is the total endpoint count, for large-cluster mode.
	endpoints int
	// liberal is nf_conntrack_tcp_be_liberal being set, which makes the
	// INVALID-drop rule unnecessary.
	liberal bool
	// state is the State last synced.
	state *dataplane.State
	// rules counts the rules of the dataplane's own chains, per table.
	rules [numTables]int
}

// writer accumulates restore input.
type writer struct{ bytes.Buffer }

func (w *writer) line(parts ...string) {
	for _, p := range parts {
		w.WriteString(p)
	}
	w.WriteByte('\n')
}

// joinRule renders argv as restore syntax, quoting words with spaces.
func joinRule(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if strings.ContainsAny(a, " \t") || a == "" {
			b.WriteString(`"` + a + `"`)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// jumps are the rules in built-in chains that hook the dataplane in, in
// the order they are inserted at the top of their chains (so the last one
// ends up first), as upstream orders them.
func (d *Dataplane) jumps() []Jump {
	n := d.names
	newOnly := []string{"-m", "conntrack", "--ctstate", "NEW"}
	j := func(table, chain string, extra []string, comment, target string) Jump {
		rule := append(slices.Clone(extra), "-m", "comment", "--comment", comment, "-j", target)
		return Jump{Table: table, Chain: chain, Rule: rule}
	}
	return []Jump{
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
// failure and one every FullSyncPeriod rewrite every chain the dataplane
// owns and delete stale ones; the others write only the chains of services
// that changed plus single-rule edits of the shared chains.
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := d.checkState(s); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	runner := d.runner
	if d.cfg.DryRun != nil {
		runner = dryRunner{d.cfg.DryRun}
	}
	now := d.cfg.Clock.Now()
	prog := d.prog
	full := prog == nil || d.cfg.FullSyncPeriod > 0 && now.Sub(d.lastFull) >= d.cfg.FullSyncPeriod
	var v *view
	if !full {
		if s == prog.state {
			d.stats = SyncStats{}
			for t := range numTables {
				d.metrics.rulesLastSync[t].Set(0)
			}
			return nil
		}
		v = newView(s, d.ipv6, func(r string) { d.skip(r) })
		v.noComments = prog.view.noComments
		full = !v.equal(prog.view)
	}
	var err error
	if !full {
		var again bool
		again, err = d.partialSync(ctx, runner, s, v)
		full = again
	}
	if full {
		err = d.fullSync(ctx, runner, s)
		if err == nil {
			d.lastFull = now
		}
	}
	if err != nil {
		d.prog = nil
		return err
	}
	d.prog.state = s
	d.lastGen = s.Generation
	for t := range numTables {
		d.metrics.rules[t].Set(float64(d.prog.rules[t]))
		d.metrics.rulesLastSync[t].Set(float64(d.stats.written[t]))
	}
	return nil
}

// dryRunner is the Runner of a dry-run Dataplane: restores go to a writer,
// nothing else happens.
type dryRunner struct{ w io.Writer }

func (r dryRunner) Restore(_ context.Context, data []byte) error {
	_, err := r.w.Write(data)
	return err
}
func (dryRunner) Save(context.Context, string) ([]byte, error)           { return nil, nil }
func (dryRunner) EnsureJump(context.Context, Jump) error                 { return nil }
func (dryRunner) DeleteJump(context.Context, Jump) error                 { return nil }
func (dryRunner) Sysctl(context.Context, string, string) (string, error) { return "0", nil }

// renderer returns a renderer for view v.
func (d *Dataplane) renderer(v *view) *renderer {
	return &renderer{names: d.names, v: v}
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

// renderService renders every valid port of service nn.
func (d *Dataplane) renderService(s *dataplane.State, r *renderer, nn types.NamespacedName) *svcState {
	ports := s.Services.Service(nn)
	if len(ports) == 0 {
		return nil
	}
	st := &svcState{}
	for _, sp := range ports {
		p, reason := checkPort(sp, d.ipv6, func(r string) { d.skip(r, "service", nn.String()) })
		if reason != "" {
			d.skip(reason, "service", nn.String())
			continue
		}
		st.ports = append(st.ports, keyed{p.key, r.renderPort(p, d.selection(s, sp, nn))})
		st.endpoints += len(s.Endpoints.Get(sp.Name))
	}
	slices.SortFunc(st.ports, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	// Two ports with one key would write identical chains; keep the first.
	st.ports = slices.CompactFunc(st.ports, func(a, b keyed) bool { return a.key == b.key })
	if len(st.ports) == 0 {
		return nil
	}
	return st
}

// selection asks the State which endpoints serve sp and drops those that
// cannot be written into a rule.
func (d *Dataplane) selection(s *dataplane.State, sp *servicemodel.ServicePort, nn types.NamespacedName) selection {
	sel := s.Select(sp)
	out := selection{hasAny: sel.HasAny}
	dropped := 0
	keep := func(in []*endpoints.Endpoint) []*endpoints.Endpoint {
		var res []*endpoints.Endpoint
		for _, e := range in {
			if usableEndpoint(e, d.ipv6) {
				res = append(res, e)
			} else {
				dropped++
			}
		}
		return res
	}
	out.cluster, out.local, out.all = keep(sel.Cluster), keep(sel.Local), keep(sel.AllReachable)
	if dropped > 0 {
		d.skip("endpoint address invalid or of another family", "service", nn.String())
		if len(out.all) == 0 && len(sel.AllReachable) > 0 {
			out.hasAny = false
		}
	}
	return out
}

// build renders every service of s.
func (d *Dataplane) build(s *dataplane.State) *programmed {
	v := newView(s, d.ipv6, func(r string) { d.skip(r) })
	prog := &programmed{view: v, services: map[types.NamespacedName]*svcState{}}
	for nn := range s.Services.Services() {
		prog.endpoints += d.countEndpoints(s, nn)
	}
	v.noComments = prog.endpoints > largeClusterEndpoints
	r := d.renderer(v)
	for nn := range s.Services.Services() {
		if st := d.renderService(s, r, nn); st != nil {
			prog.services[nn] = st
		}
	}
	for _, k := range prog.sortedPorts() {
		for sh := range numShared {
			for i, rule := range k.r.dispatch[sh] {
				prog.shared[sh] = append(prog.shared[sh], entry{k.key, i, rule})
			}
		}
	}
	return prog
}

// sortedPorts returns every rendered port in key order.
func (p *programmed) sortedPorts() []keyed {
	var all []keyed
	for _, st := range p.services {
		all = append(all, st.ports...)
	}
	slices.SortFunc(all, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
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

// writeFull writes the restore input that replaces every chain of prog and
// deletes the stale chains.
func (d *Dataplane) writeFull(b *writer, prog *programmed, stale []string) {
	n := d.names
	ports := prog.sortedPorts()
	b.line("*filter")
	for _, c := range []string{n.services, n.externalServices, n.forward, n.nodePorts, n.proxyFirewall, n.firewall} {
		b.line(":", c, " - [0:0]")
	}
	if prog.view.localhostNodePorts {
		b.line("-A ", n.firewall, ` -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`)
	}
	if !prog.liberal {
		b.line("-A ", n.forward, " -m conntrack --ctstate INVALID -j DROP")
	}
	b.line("-A ", n.forward, ` -m comment --comment "proxykit forwarding rules" -m mark --mark `, d.mark, "/", d.mark, " -j ACCEPT")
	b.line("-A ", n.forward, ` -m comment --comment "proxykit forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`)
	for _, sh := range []shared{filterServices, filterExternal, filterNodePorts, filterProxyFirewall} {
		for _, e := range prog.shared[sh] {
			b.line("-A ", n.sharedName(sh), " ", e.rule)
		}
	}
	b.line("COMMIT")

	b.line("*nat")
	for _, c := range []string{n.services, n.nodePorts, n.postrouting, n.markMasq} {
		b.line(":", c, " - [0:0]")
	}
	for _, k := range ports {
		for _, c := range k.r.chains {
			b.line(":", c.name, " - [0:0]")
		}
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
		for _, c := range k.r.chains {
			for _, r := range c.rules {
				b.line("-A ", c.name, " ", r)
			}
		}
	}
	for _, c := range stale {
		b.line("-X ", c)
	}
	b.line("COMMIT")
}

// fullSync rewrites everything the dataplane owns.
func (d *Dataplane) fullSync(ctx context.Context, runner Runner, s *dataplane.State) error {
	prog := d.build(s)
	if v, err := runner.Sysctl(ctx, sysctlTCPBeLiberal, ""); err == nil {
		prog.liberal = v != "" && v != "0"
	} else {
		d.log.V(2).Info("Cannot read sysctl, keeping the INVALID drop rule", "sysctl", sysctlTCPBeLiberal, "err", err)
	}
	if prog.view.localhostNodePorts {
		if _, err := runner.Sysctl(ctx, sysctlRouteLocalnet, "1"); err != nil {
			d.log.Error(err, "Cannot enable node ports on localhost")
		}
	}
	saves := map[string][]byte{}
	for _, table := range []string{"nat", "filter"} {
		out, err := runner.Save(ctx, table)
		if err != nil {
			d.log.Error(err, "Cannot list rules, stale chains stay and every jump is checked", "table", table)
			continue
		}
		saves[table] = out
	}
	stale := d.staleChains(saves["nat"], prog)
	var b writer
	d.writeFull(&b, prog, stale)
	if err := runner.Restore(ctx, b.Bytes()); err != nil {
		d.metrics.fullRestoreFailures.Inc()
		return fmt.Errorf("full sync: %w", err)
	}
	// A full sync writes every rule of the own chains, and only those.
	written := countWritten(b.Bytes())
	prog.rules = written
	// Each iptables command reads the whole table, seconds on a big node:
	// only jumps that the listing does not show are checked and added.
	for _, j := range d.jumps() {
		if listsJump(saves[j.Table], j) {
			continue
		}
		if err := runner.EnsureJump(ctx, j); err != nil {
			return fmt.Errorf("full sync: %w", err)
		}
	}
	d.prog = prog
	d.stats = SyncStats{Full: true, Bytes: b.Len(), Services: len(prog.services), written: written}
	d.log.V(2).Info("Full sync", "services", len(prog.services), "endpoints", prog.endpoints, "bytes", b.Len(), "staleChains", len(stale))
	return nil
}

// staleChains lists the per-service nat chains of the prefix that prog
// does not use: left over from a previous run or a failed sync.
func (d *Dataplane) staleChains(save []byte, prog *programmed) []string {
	used := map[string]bool{}
	for _, st := range prog.services {
		for _, k := range st.ports {
			for _, c := range k.r.chains {
				used[c.name] = true
			}
		}
	}
	var stale []string
	for _, c := range chainsInSave(save) {
		if d.names.isServiceChain(c) && !used[c] {
			stale = append(stale, c)
		}
	}
	slices.Sort(stale)
	return stale
}

// listsJump reports whether an iptables-save text has j: a rule of its
// chain with its comment and target. A false negative only costs a check.
func listsJump(save []byte, j Jump) bool {
	target, comment := j.Rule[len(j.Rule)-1], ""
	for i, a := range j.Rule {
		if a == "--comment" && i+1 < len(j.Rule) {
			comment = `"` + j.Rule[i+1] + `"`
		}
	}
	prefix := "-A " + j.Chain + " "
	for line := range bytes.Lines(save) {
		l := strings.TrimSpace(string(line))
		if strings.HasPrefix(l, prefix) && strings.HasSuffix(l, " -j "+target) && strings.Contains(l, comment) &&
			strings.Contains(l, "--ctstate NEW") == slices.Contains(j.Rule, "NEW") {
			return true
		}
	}
	return false
}

// chainsInSave returns the chains an iptables-save text declares.
func chainsInSave(data []byte) []string {
	var out []string
	for line := range bytes.Lines(data) {
		if len(line) > 1 && line[0] == ':' {
			if name, _, ok := bytes.Cut(line[1:], []byte(" ")); ok {
				out = append(out, string(name))
			}
		}
	}
	return out
}

// partialSync writes only what changed since d.prog. It reports again when
// the change needs a full sync instead (large-cluster mode flipped).
func (d *Dataplane) partialSync(ctx context.Context, runner Runner, s *dataplane.State, v *view) (again bool, err error) {
	prog := d.prog
	var candidates []types.NamespacedName
	if changed, ok := s.ChangedSince(d.lastGen); ok {
		candidates = changed.UnsortedList()
	} else {
		seen := map[types.NamespacedName]bool{}
		for nn := range s.Services.Services() {
			seen[nn] = true
		}
		for nn := range prog.services {
			seen[nn] = true
		}
		candidates = slices.Collect(maps.Keys(seen))
	}
	slices.SortFunc(candidates, func(a, b types.NamespacedName) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	total := prog.endpoints
	for _, nn := range candidates {
		if old := prog.services[nn]; old != nil {
			total -= old.endpoints
		}
		total += d.countEndpoints(s, nn)
	}
	if (total > largeClusterEndpoints) != v.noComments {
		return true, nil
	}

	r := d.renderer(v)
	var (
		natDecl, natRules, natDelete writer
		dels, ins                    [numShared][]entry
	)
	rendered := 0
	next := map[types.NamespacedName]*svcState{}
	for _, nn := range candidates {
		old, cur := prog.services[nn], d.renderService(s, r, nn)
		next[nn] = cur
		rendered++
		diffChains(old, cur, &natDecl, &natRules, &natDelete)
		diffShared(old, cur, &dels, &ins)
	}

	var filt, nat writer
	edits := 0
	rules := prog.rules
	for sh := range numShared {
		w, t := &filt, tableFilter
		if sh.isNAT() {
			w, t = &nat, tableNAT
		}
		before := len(prog.shared[sh])
		edits += applyShared(&prog.shared[sh], d.names.sharedName(sh), dels[sh], ins[sh], w)
		rules[t] += len(prog.shared[sh]) - before
	}
	var b writer
	if filt.Len() > 0 {
		b.line("*filter")
		b.Write(filt.Bytes())
		b.line("COMMIT")
	}
	if natDecl.Len()+nat.Len()+natRules.Len() > 0 {
		b.line("*nat")
		b.Write(natDecl.Bytes())
		b.Write(nat.Bytes())
		b.Write(natRules.Bytes())
		b.Write(natDelete.Bytes())
		b.line("COMMIT")
	}
	if b.Len() > 0 {
		if err := runner.Restore(ctx, b.Bytes()); err != nil {
			d.metrics.partialRestoreFailures.Inc()
			if re, ok := err.(*RestoreError); ok {
				re.Partial = true
			}
			return false, fmt.Errorf("partial sync: %w", err)
		}
	}
	for nn, st := range next {
		rules[tableNAT] += ruleCount(st) - ruleCount(prog.services[nn])
		if st == nil {
			delete(prog.services, nn)
		} else {
			prog.services[nn] = st
		}
	}
	prog.endpoints, prog.rules = total, rules
	d.stats = SyncStats{Bytes: b.Len(), Services: rendered, Edits: edits, written: countWritten(b.Bytes())}
	d.log.V(4).Info("Partial sync", "services", rendered, "edits", edits, "bytes", b.Len())
	return false, nil
}

func chainsOf(st *svcState) map[string][]string {
	m := map[string][]string{}
	if st != nil {
		for _, k := range st.ports {
			for _, c := range k.r.chains {
				m[c.name] = c.rules
			}
		}
	}
	return m
}

// diffChains writes the own chains of a service that differ between old
// and cur, and the deletion of those cur no longer has.
func diffChains(old, cur *svcState, decl, rules, del *writer) {
	oldChains := chainsOf(old)
	if cur != nil {
		for _, k := range cur.ports {
			for _, c := range k.r.chains {
				if prev, ok := oldChains[c.name]; ok && slices.Equal(prev, c.rules) {
					continue
				}
				decl.line(":", c.name, " - [0:0]")
				for _, r := range c.rules {
					rules.line("-A ", c.name, " ", r)
				}
			}
		}
	}
	curChains := chainsOf(cur)
	var gone []string
	for name := range oldChains {
		if _, ok := curChains[name]; !ok {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		decl.line(":", name, " - [0:0]")
		del.line("-X ", name)
	}
}

func entriesOf(st *svcState, sh shared) []entry {
	var out []entry
	if st != nil {
		for _, k := range st.ports {
			for i, r := range k.r.dispatch[sh] {
				out = append(out, entry{k.key, i, r})
			}
		}
	}
	return out
}

// diffShared collects the shared-chain rules of a service to delete and to
// insert.
func diffShared(old, cur *svcState, dels, ins *[numShared][]entry) {
	for sh := range numShared {
		o, c := entriesOf(old, sh), entriesOf(cur, sh)
		for _, e := range o {
			if i, ok := slices.BinarySearchFunc(c, e, compareEntries); !ok || c[i].rule != e.rule {
				dels[sh] = append(dels[sh], e)
			}
		}
		for _, e := range c {
			if i, ok := slices.BinarySearchFunc(o, e, compareEntries); !ok || o[i].rule != e.rule {
				ins[sh] = append(ins[sh], e)
			}
		}
	}
}

// applyShared edits the model of one shared chain and writes the same
// edits: deletions by exact rule, so that a kernel which drifted from the
// model fails loudly, then insertions by position in key order.
func applyShared(chain *[]entry, name string, dels, ins []entry, w *writer) int {
	for _, e := range dels {
		i, ok := slices.BinarySearchFunc(*chain, e, compareEntries)
		if !ok {
			continue
		}
		*chain = slices.Delete(*chain, i, i+1)
		w.line("-D ", name, " ", e.rule)
	}
	slices.SortFunc(ins, compareEntries)
	for _, e := range ins {
		i, _ := slices.BinarySearchFunc(*chain, e, compareEntries)
		*chain = slices.Insert(*chain, i, e)
		w.line("-I ", name, " ", fmt.Sprint(i+1), " ", e.rule)
	}
	return len(dels) + len(ins)
}

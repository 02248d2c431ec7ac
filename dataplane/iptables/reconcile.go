package iptables

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// Reconcile implements dataplane.Reconciler. It lists the nat and filter
// tables once each, compares every chain the dataplane owns, rule by rule
// and by what each rule does (iptables-save spells rules differently from
// the restore input), and the jumps into the built-in chains, with what
// the last Sync programmed. Only what differs is written: one restore that
// rewrites each chain found missing or changed and deletes chains of the
// prefix that nothing programmed and re-inserts the missing jumps. A
// reconcile of an untouched kernel runs no restore.
//
// The rule-count metric is set from what was read back (plus what the
// repair wrote), so it tells the kernel's truth, not the model's.
func (d *Dataplane) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	prog := d.prog
	if prog == nil {
		return dataplane.Drift{}, nil
	}
	gen, genErr := d.gens.read(ctx)
	c, err := d.compare(ctx, prog)
	if err != nil {
		d.prog = nil
		return dataplane.Drift{}, fmt.Errorf("reconcile: %w", err)
	}
	// The kernel was read as of gen: with the repair below it holds
	// what was programmed.
	if genErr == nil {
		d.gens.see(gen)
	} else {
		d.gens.forget()
	}
	if c.repair.Len() > 0 {
		before, ok := d.gens.before(ctx)
		if err := d.runner.Restore(ctx, xtables.RestoreBytes(c.repair.Bytes())); err != nil {
			d.metrics.repairRestoreFailures.Inc()
			d.countTimeout(err)
			d.prog = nil
			return dataplane.Drift{}, fmt.Errorf("reconcile: %w", err)
		}
		d.gens.noteWrite(ctx, before, ok)
	}
	prog.verified = c.verified
	for t := range numTables {
		d.metrics.rules[t].Set(float64(c.rules[t]))
	}
	drift := dataplane.Drift{Repaired: c.repaired}
	if !drift.Empty() {
		d.log.V(2).Info("Repaired rules changed by someone else", "repairs", len(c.repaired), "what", drift.String(), "bytes", c.repair.Len())
	}
	return drift, nil
}

// comparison is what a reading of the kernel found: what differs from
// prog (sorted), the restore input that repairs it, the rule count of each
// table once repaired, and the hashes of the chains found as programmed.
type comparison struct {
	repaired []string
	repair   writer
	rules    [numTables]int
	verified map[string]uint64
}

// compare lists the nat and filter tables and compares every chain the
// dataplane owns, and the jumps into the built-in chains, with prog. It
// writes nothing.
func (d *Dataplane) compare(ctx context.Context, prog *programmed) (*comparison, error) {
	// The wanted fixed and shared chains are read from what a full sync
	// would write for them; the service ports' own chains are compared
	// with the text the dataplane keeps of them, never copied.
	var fixed bytes.Buffer
	fs := newStream(&fixed, d.names.canary)
	d.writeFull(fs, prog, nil, nil, nil)
	fs.flush()
	chains := 0
	for _, k := range prog.sortedPorts() {
		chains += len(k.r.own.spans)
	}
	own := make(map[string][]byte, chains)
	for _, k := range prog.sortedPorts() {
		for name, rules := range k.r.own.all() {
			own[name] = rules
		}
	}
	c := &comparison{verified: make(map[string]uint64, len(prog.verified))}
	for t, table := range tableNames {
		save, err := d.runner.Save(ctx, table)
		if err != nil {
			return nil, err
		}
		got := d.parseListing(table, save)
		want := newWanted(d.parseListing(table, fixed.Bytes()))
		if table == "nat" {
			want.addOwn(prog.sortedPorts(), own)
		}
		var fix, stale []string
		for _, ch := range want.declared {
			problem, key := "", table+" "+ch
			if !got.has(ch) {
				problem = "missing"
			} else if h := hashRules(got.rules[ch]); prog.verified[key] == h {
				c.verified[key] = h
			} else if problem = want.compare(ch, got.rules[ch]); problem == "" {
				c.verified[key] = h
			}
			n := len(got.rules[ch])
			if problem != "" {
				c.repaired = append(c.repaired, table+" chain "+ch+": "+problem)
				fix = append(fix, ch)
				n = want.count(ch)
			}
			if ch != d.names.canary {
				c.rules[t] += n
			}
		}
		for _, ch := range got.declared {
			if d.names.owned(table, ch) && !want.has(ch) {
				c.repaired = append(c.repaired, table+" chain "+ch+": not programmed, deleted")
				stale = append(stale, ch)
			}
		}
		var jumps []xtables.Jump
		for _, j := range d.jumps() {
			if j.Table == table && !got.hasJump(j) {
				c.repaired = append(c.repaired, table+" chain "+j.Chain+": jump to "+j.Rule[len(j.Rule)-1]+" missing")
				jumps = append(jumps, j)
			}
		}
		if len(fix)+len(stale)+len(jumps) > 0 {
			writeRepair(&c.repair, table, want, fix, stale, jumps)
		}
	}
	slices.Sort(c.repaired)
	return c, nil
}

// wanted is what one table should hold: the fixed and shared chains as
// a listing, and the own chains of the service ports as the text the
// dataplane keeps.
type wanted struct {
	*listing
	own map[string][]byte
}

func newWanted(l *listing) *wanted { return &wanted{listing: l} }

// addOwn declares the own chains of ports, whose rules are in own.
func (w *wanted) addOwn(ports []keyed, own map[string][]byte) {
	w.own = own
	for _, k := range ports {
		for _, c := range k.r.own.spans {
			w.declared = append(w.declared, c.name)
			w.isChain[c.name] = true
		}
	}
}

// count is the number of rules chain should hold.
func (w *wanted) count(chain string) int {
	if text, ok := w.own[chain]; ok {
		return bytes.Count(text, []byte{'\n'})
	}
	return len(w.rules[chain])
}

// compare says how got differs from the rules chain should hold, or ""
// when each rule does what the wanted one does, in order.
func (w *wanted) compare(chain string, got []string) string {
	text, ok := w.own[chain]
	if !ok {
		return compareRules(w.rules[chain], got)
	}
	if n := bytes.Count(text, []byte{'\n'}); n != len(got) {
		return strconv.Itoa(len(got)) + " rules, want " + strconv.Itoa(n)
	}
	i := 0
	for line := range bytes.Lines(text) {
		if msg := compareRule(i, string(line[:len(line)-1]), got[i]); msg != "" {
			return msg
		}
		i++
	}
	return ""
}

// write appends the rules chain should hold to a restore input.
func (w *wanted) write(b *writer, chain string) {
	if text, ok := w.own[chain]; ok {
		for line := range bytes.Lines(text) {
			b.line("-A ", chain, " ", string(line[:len(line)-1]))
		}
		return
	}
	for _, r := range w.rules[chain] {
		b.line("-A ", chain, " ", r)
	}
}

// compareRules says how a chain's rules differ from what it should hold,
// or "" when each rule does what the wanted one does, in order.
func compareRules(want, got []string) string {
	if len(want) != len(got) {
		return strconv.Itoa(len(got)) + " rules, want " + strconv.Itoa(len(want))
	}
	for i := range want {
		if msg := compareRule(i, want[i], got[i]); msg != "" {
			return msg
		}
	}
	return ""
}

// compareRule says how rule i of a chain differs from what it should be,
// or "" when it does the same.
func compareRule(i int, want, got string) string {
	if want == got {
		return ""
	}
	w, _ := xtables.RuleKey(want)
	if g, ok := xtables.RuleKey(got); !ok || g != w {
		return "rule " + strconv.Itoa(i+1) + " changed"
	}
	return ""
}

// writeRepair writes the restore section that rewrites the chains fix of
// table as want has them, deletes the chains stale and inserts jumps.
func writeRepair(b *writer, table string, want *wanted, fix, stale []string, jumps []xtables.Jump) {
	b.line("*", table)
	for _, c := range slices.Concat(fix, stale) {
		b.line(":", c, " - [0:0]")
	}
	for _, c := range fix {
		want.write(b, c)
	}
	for _, c := range stale {
		b.line("-X ", c)
	}
	writeJumps(b, table, jumps)
	b.line("COMMIT")
}

// KernelChanged implements dataplane.KernelWatcher. With the nft backend
// of iptables, every change to any rule commits an nftables transaction,
// which moves the namespace's ruleset generation; with the legacy
// backend, every rule added, deleted or flushed moves the kernel's
// summary of its table (xtables.GenerationOf). The canary reads that
// (one netlink round trip, or one getsockopt per table) and, only when it
// moved since the kernel was last seen as programmed (by someone else:
// the dataplane's own restores are noted), lists the tables and compares
// every chain the dataplane owns, as Reconcile does, without repairing. A
// deleted rule, a flushed chain or a foreign rule in any of its chains is
// seen at the next poll. With a Runner that has no generation, it lists
// the canary chain of the nat and filter tables, which the last full sync
// or repair created with one rule: a missing chain or rule means someone
// flushed or replaced the table (a firewall reload, "iptables -F", a
// restore without --noflush); lesser changes wait for the periodic
// Reconcile.
func (d *Dataplane) KernelChanged(ctx context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	prog := d.prog
	if prog == nil {
		return false, nil
	}
	if d.gens.enabled() {
		gen, err := d.gens.read(ctx)
		if err != nil {
			return false, fmt.Errorf("canary: %w", err)
		}
		if d.gens.unchanged(gen) {
			return false, nil
		}
		c, err := d.compare(ctx, prog)
		if err != nil {
			return false, fmt.Errorf("canary: %w", err)
		}
		if len(c.repaired) > 0 {
			d.log.V(2).Info("Rules changed under the dataplane", "first", c.repaired[0], "changes", len(c.repaired))
			return true, nil
		}
		prog.verified = c.verified
		d.gens.see(gen)
		return false, nil
	}
	for _, table := range tableNames {
		rules, ok, err := d.runner.ListChain(ctx, table, d.names.canary)
		if err != nil {
			return false, fmt.Errorf("canary: %w", err)
		}
		if !ok || len(rules) != 1 {
			d.log.V(2).Info("Canary chain disturbed", "table", table, "chain", d.names.canary, "exists", ok, "rules", len(rules))
			return true, nil
		}
	}
	return false, nil
}

// hashRules fingerprints the rules of one chain as a listing shows them;
// never 0, which stands for "not verified".
func hashRules(rules []string) uint64 {
	h := fnv.New64a()
	for _, r := range rules {
		h.Write([]byte(r))
		h.Write([]byte{'\n'})
	}
	return h.Sum64() | 1
}

// forget drops the verification of every chain a restore input writes.
func (p *programmed) forget(data []byte) {
	if len(p.verified) == 0 {
		return
	}
	table := ""
	for raw := range bytes.Lines(data) {
		line := string(bytes.TrimSpace(raw))
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			delete(p.verified, table+" "+name)
		case len(line) > 3 && line[0] == '-':
			name, _, _ := strings.Cut(line[3:], " ")
			delete(p.verified, table+" "+name)
		}
	}
}

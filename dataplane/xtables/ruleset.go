package xtables

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Ruleset is an in-memory model of the filter, nat and mangle tables: what
// iptables-restore --noflush would leave in the kernel. FakeRunner keeps
// one, and Trace follows packets through one. It checks what the kernel
// checks that matters here (jumps to missing chains, deleting a referenced
// or missing chain or rule, insert positions, where a TPROXY may be) and
// rejects options it does not model, so a test catches rules the renderer should never write.
type Ruleset struct {
	tables map[string]*rtable
	// ipsets are the sets "-m set" matches look in; nil: none is known.
	ipsets map[string]IPSet
}

// IPSet is an ipset as a trace reads it: its type, as ipset names it
// ("hash:ip,port"), and its members in ipset's notation
// ("10.96.0.10,tcp:80"), sorted.
type IPSet struct {
	Type    string
	Members []string
}

// SetIPSets gives the trace the node's ipsets, by name: a rule's "-m set"
// match then matches as the kernel's does (the hash: types of ip, net and
// port dimensions). Without them, or for a set of another type, it never
// matches. Call it before tracing; members must be sorted.
func (rs *Ruleset) SetIPSets(sets map[string]IPSet) { rs.ipsets = sets }

type rtable struct {
	name   string
	chains map[string]*rchain
}

type rchain struct {
	builtin bool
	rules   []*Rule
}

// builtinChains are the chains every table starts with.
var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

// builtinTargets are the targets that are not chains.
var builtinTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "REJECT": true, "RETURN": true,
	"DNAT": true, "SNAT": true, "MASQUERADE": true, "MARK": true, "REDIRECT": true,
	"TPROXY": true,
}

// NewRuleset returns empty filter, nat and mangle tables.
func NewRuleset() *Ruleset {
	rs := &Ruleset{tables: map[string]*rtable{}}
	for t, chains := range builtinChains {
		tb := &rtable{name: t, chains: map[string]*rchain{}}
		for _, c := range chains {
			tb.chains[c] = &rchain{builtin: true}
		}
		rs.tables[t] = tb
	}
	return rs
}

func (t *rtable) clone() *rtable {
	c := &rtable{name: t.name, chains: make(map[string]*rchain, len(t.chains))}
	for name, ch := range t.chains {
		c.chains[name] = &rchain{builtin: ch.builtin, rules: slices.Clone(ch.rules)}
	}
	return c
}

// Clone returns an independent copy of rs.
func (rs *Ruleset) Clone() *Ruleset {
	c := &Ruleset{tables: map[string]*rtable{}}
	for n, t := range rs.tables {
		c.tables[n] = t.clone()
	}
	return c
}

// ParseError is a restore input the model rejects.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Apply applies restore input with --noflush semantics: each table is
// committed only if all of its lines apply and every jump in it resolves.
// On error, tables committed before the failing one stay committed, as
// with iptables-restore.
func (rs *Ruleset) Apply(data []byte) error {
	var (
		cur     *rtable
		curName string
		num     int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	fail := func(f string, a ...any) error { return &ParseError{Line: num, Msg: fmt.Sprintf(f, a...)} }
	for sc.Scan() {
		num++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '*' {
			if cur != nil {
				return fail("table %s not committed", curName)
			}
			curName = line[1:]
			t, ok := rs.tables[curName]
			if !ok {
				return fail("unknown table %q", curName)
			}
			cur = t.clone()
			continue
		}
		if cur == nil {
			return fail("line outside a table")
		}
		if line == "COMMIT" {
			if err := cur.checkJumps(); err != nil {
				return fail("%v", err)
			}
			rs.tables[curName] = cur
			cur = nil
			continue
		}
		if line[0] == ':' {
			f := strings.Fields(line[1:])
			if len(f) < 2 || !validChainName(f[0]) {
				return fail("bad chain line %q", line)
			}
			if ch, ok := cur.chains[f[0]]; ok {
				ch.rules = nil
			} else if f[1] != "-" {
				return fail("no built-in chain %s", f[0])
			} else {
				cur.chains[f[0]] = &rchain{}
			}
			continue
		}
		if err := cur.command(line); err != nil {
			return fail("%v", err)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if cur != nil {
		return fail("table %s not committed", curName)
	}
	return nil
}

func validChainName(s string) bool {
	return s != "" && len(s) <= MaxChainName && !strings.ContainsAny(s, " \t!\"'") && s[0] != '-'
}

// command applies one -A, -I, -D, -F, -N or -X line.
func (t *rtable) command(line string) error {
	words, err := splitWords(line)
	if err != nil {
		return err
	}
	if len(words) == 1 && words[0] == "-F" {
		for _, ch := range t.chains {
			ch.rules = nil
		}
		return nil
	}
	if len(words) < 2 {
		return fmt.Errorf("short command %q", line)
	}
	op, name, rest := words[0], words[1], words[2:]
	switch op {
	case "-N":
		if _, ok := t.chains[name]; ok {
			return fmt.Errorf("chain %s already exists", name)
		}
		if !validChainName(name) {
			return fmt.Errorf("bad chain name %q", name)
		}
		t.chains[name] = &rchain{}
		return nil
	case "-X":
		ch, ok := t.chains[name]
		switch {
		case !ok:
			return fmt.Errorf("no chain %s to delete", name)
		case ch.builtin:
			return fmt.Errorf("cannot delete built-in chain %s", name)
		case len(ch.rules) > 0:
			return fmt.Errorf("chain %s is not empty", name)
		}
		for cn, c := range t.chains {
			for _, r := range c.rules {
				if r.Target == name {
					return fmt.Errorf("chain %s is referenced by %s", name, cn)
				}
			}
		}
		delete(t.chains, name)
		return nil
	}
	ch, ok := t.chains[name]
	if !ok {
		return fmt.Errorf("no chain %s", name)
	}
	switch op {
	case "-F":
		ch.rules = nil
	case "-A":
		r, err := t.parseRule(rest)
		if err != nil {
			return err
		}
		ch.rules = append(ch.rules, r)
	case "-I":
		pos := 1
		if len(rest) > 0 {
			if n, err := strconv.Atoi(rest[0]); err == nil {
				pos, rest = n, rest[1:]
			}
		}
		if pos < 1 || pos > len(ch.rules)+1 {
			return fmt.Errorf("index of insertion too big: %d in %s of %d rules", pos, name, len(ch.rules))
		}
		r, err := t.parseRule(rest)
		if err != nil {
			return err
		}
		ch.rules = slices.Insert(ch.rules, pos-1, r)
	case "-D":
		if len(rest) == 1 {
			if n, err := strconv.Atoi(rest[0]); err == nil {
				if n < 1 || n > len(ch.rules) {
					return fmt.Errorf("no rule %d in %s", n, name)
				}
				ch.rules = slices.Delete(ch.rules, n-1, n)
				return nil
			}
		}
		r, err := parseRule(rest)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ch.rules, func(x *Rule) bool { return x.Text == r.Text })
		if i < 0 {
			return fmt.Errorf("bad rule (does a matching rule exist in %s?)", name)
		}
		ch.rules = slices.Delete(ch.rules, i, i+1)
	default:
		return fmt.Errorf("unsupported command %q", op)
	}
	return nil
}

// parseRule is parseRule for a rule of t: the kernel takes a TPROXY
// target in the mangle table only.
func (t *rtable) parseRule(words []string) (*Rule, error) {
	r, err := parseRule(words)
	if err == nil && r.Target == "TPROXY" && t.name != "mangle" {
		return nil, fmt.Errorf("TPROXY is only valid in the mangle table, not %s", t.name)
	}
	return r, err
}

// checkJumps requires every jump to name a chain or a built-in target,
// and a TPROXY to be reached from PREROUTING only, as the kernel does.
func (t *rtable) checkJumps() error {
	for _, name := range slices.Sorted(maps.Keys(t.chains)) {
		for _, r := range t.chains[name].rules {
			if r.Target != "" && !builtinTargets[r.Target] {
				if _, ok := t.chains[r.Target]; !ok {
					return fmt.Errorf("rule in %s jumps to missing chain %s", name, r.Target)
				}
			}
		}
	}
	for _, hook := range builtinChains[t.name] {
		if hook == "PREROUTING" {
			continue
		}
		if chain := t.reachedTarget(hook, "TPROXY", map[string]bool{}); chain != "" {
			return fmt.Errorf("TPROXY in %s is reached from %s; it is only valid from PREROUTING", chain, hook)
		}
	}
	return nil
}

// reachedTarget returns a chain reached from chain (itself included) that
// has a rule jumping to target, "" if none. Jumps are resolved (checkJumps)
// and seen stops loops.
func (t *rtable) reachedTarget(chain, target string, seen map[string]bool) string {
	if seen[chain] {
		return ""
	}
	seen[chain] = true
	ch := t.chains[chain]
	for _, r := range ch.rules {
		if r.Target == target {
			return chain
		}
	}
	for _, r := range ch.rules {
		if _, ok := t.chains[r.Target]; ok {
			if c := t.reachedTarget(r.Target, target, seen); c != "" {
				return c
			}
		}
	}
	return ""
}

// Chains returns the names of table's chains, sorted.
func (rs *Ruleset) Chains(table string) []string {
	t, ok := rs.tables[table]
	if !ok {
		return nil
	}
	return slices.Sorted(maps.Keys(t.chains))
}

// Rules returns the rule texts of a chain, nil if it does not exist.
func (rs *Ruleset) Rules(table, chain string) []string {
	t, ok := rs.tables[table]
	if !ok {
		return nil
	}
	ch, ok := t.chains[chain]
	if !ok {
		return nil
	}
	out := make([]string, len(ch.rules))
	for i, r := range ch.rules {
		out[i] = r.Text
	}
	return out
}

// Save returns table in iptables-save form, chains sorted by name (built-in
// chains first).
func (rs *Ruleset) Save(table string) []byte {
	t, ok := rs.tables[table]
	if !ok {
		return nil
	}
	var b bytes.Buffer
	line := func(parts ...string) {
		for _, p := range parts {
			b.WriteString(p)
		}
		b.WriteByte('\n')
	}
	line("*", table)
	names := rs.Chains(table)
	slices.SortStableFunc(names, func(a, c string) int {
		ab, cb := t.chains[a].builtin, t.chains[c].builtin
		switch {
		case ab && !cb:
			return -1
		case cb && !ab:
			return 1
		}
		return 0
	})
	for _, n := range names {
		pol := "-"
		if t.chains[n].builtin {
			pol = "ACCEPT"
		}
		line(":", n, " ", pol, " [0:0]")
	}
	for _, n := range names {
		for _, r := range t.chains[n].rules {
			line("-A ", n, " ", r.Text)
		}
	}
	line("COMMIT")
	return b.Bytes()
}

// splitWords splits a rule into words, honouring double quotes.
func splitWords(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			out = append(out, s[i+1:i+1+j])
			i += j + 2
		default:
			j := strings.IndexAny(s[i:], " \t")
			if j < 0 {
				j = len(s) - i
			}
			w := s[i : i+j]
			if strings.ContainsAny(w, `"'\`) {
				return nil, fmt.Errorf("stray quote in %q", s)
			}
			out = append(out, w)
			i += j
		}
	}
	return out, nil
}

// addrMatch is -s or -d.
type addrMatch struct {
	neg    bool
	prefix netip.Prefix
}

func (m *addrMatch) matches(a netip.Addr) bool {
	return m.prefix.Contains(a) != m.neg
}

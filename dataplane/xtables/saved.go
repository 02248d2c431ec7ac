package xtables

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/servicemodel"
)

// SkippedRule is a rule of an iptables-save listing that ParseSave left
// out of its Ruleset, because it uses a match or target this package does
// not model (another program's rule).
type SkippedRule struct {
	Table, Chain string
	// Rule is the rule as listed, after "-A CHAIN".
	Rule string
	Err  error
}

func (s SkippedRule) String() string {
	return fmt.Sprintf("%s %s: %s: %v", s.Table, s.Chain, s.Rule, s.Err)
}

// ParseSave reads what iptables-save (or ip6tables-save) printed of the nat,
// filter and mangle tables into a Ruleset that Trace can follow: the
// kernel's rules, everyone's, rather than what a Dataplane meant to write.
// Other tables are ignored. Unlike Apply it never fails on what it does not
// model: such rules are left out and returned, so that a caller can say
// that a trace may miss them; a jump to a chain that is not listed falls
// through, as Trace treats missing chains.
func ParseSave(data []byte) (*Ruleset, []SkippedRule) {
	rs := NewRuleset()
	var skipped []SkippedRule
	var cur *rtable
	var table string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line == "COMMIT":
		case line[0] == '*':
			table = line[1:]
			cur = rs.tables[table]
		case cur == nil:
		case line[0] == ':':
			name, _, _ := strings.Cut(line[1:], " ")
			if _, ok := cur.chains[name]; !ok && validChainName(name) {
				cur.chains[name] = &rchain{}
			}
		case strings.HasPrefix(line, "-A "):
			chain, rest, _ := strings.Cut(line[len("-A "):], " ")
			ch, ok := cur.chains[chain]
			if !ok {
				ch = &rchain{}
				cur.chains[chain] = ch
			}
			words, err := splitWords(rest)
			var r *Rule
			if err == nil {
				r, err = cur.parseRule(words)
			}
			if err != nil {
				skipped = append(skipped, SkippedRule{Table: table, Chain: chain, Rule: rest, Err: err})
				continue
			}
			ch.rules = append(ch.rules, r)
		}
	}
	return rs, skipped
}

// Services returns the service ports that table's rules name in their
// comments ("ns/name:port ..."), the way this package's rules do, sorted.
// Trace reads a packet's service from the same comments.
func (rs *Ruleset) Services(table string) []servicemodel.PortName {
	t, ok := rs.tables[table]
	if !ok {
		return nil
	}
	seen := map[servicemodel.PortName]bool{}
	for _, ch := range t.chains {
		for _, r := range ch.rules {
			if r.Comment == "" || r.proto == "" {
				continue
			}
			if pn := r.service(); pn.Name != "" {
				seen[pn] = true
			}
		}
	}
	return slices.SortedFunc(maps.Keys(seen), func(a, b servicemodel.PortName) int {
		return cmp.Compare(a.String()+string(a.Protocol), b.String()+string(b.Protocol))
	})
}

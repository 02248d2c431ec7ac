package iptables

import (
	"bytes"
	"strings"

	"github.com/proxykit/proxykit/dataplane/xtables"
)

// canaryRule is the one rule of each table's canary chain. A chain alone
// would survive "iptables -F", which empties every chain but deletes none;
// its rule does not.
const canaryRule = " -j RETURN"

// listing is one table as iptables-save (or a restore input) lists it:
// every chain it declares, and the rules of the chains the dataplane reads
// back (its own, and the built-in chains its jumps live in).
type listing struct {
	declared []string
	isChain  map[string]bool
	rules    map[string][]string
}

// parseListing reads the iptables-save text of table, or that table's
// section of a restore input. Other programs'
// chains are listed by name only: their rules may use matches this
// package does not parse, and are none of its business.
func (d *Dataplane) parseListing(table string, data []byte) *listing {
	// Sized up front: a large cluster lists a hundred thousand chains.
	chains := bytes.Count(data, []byte("\n:")) + 1
	l := &listing{declared: make([]string, 0, chains), isChain: make(map[string]bool, chains), rules: make(map[string][]string, chains)}
	hooked := map[string]bool{}
	for _, j := range d.jumps() {
		if j.Table == table {
			hooked[j.Chain] = true
		}
	}
	in := true
	// One string for the whole text: every rule kept is a piece of it.
	for raw := range strings.Lines(string(data)) {
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(line, "*"):
			// Input of several tables (a restore) is read for
			// table's section only.
			in = line[1:] == table
		case !in:
		case strings.HasPrefix(line, ":"):
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				l.declared = append(l.declared, name)
				l.isChain[name] = true
			}
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(line[len("-A "):], " ")
			if hooked[chain] || d.names.owned(table, chain) {
				l.rules[chain] = append(l.rules[chain], rule)
			}
		}
	}
	return l
}

// chainNames returns every chain declared; nil for a nil listing (a table
// that could not be read).
func (l *listing) chainNames() []string {
	if l == nil {
		return nil
	}
	return l.declared
}

func (l *listing) has(chain string) bool {
	return l != nil && l.isChain[chain]
}

// hasJump reports whether the listing holds j, compared by what the rule
// does rather than how it is spelled. A nil listing holds nothing, which
// only costs a check.
func (l *listing) hasJump(j xtables.Jump) bool {
	if l == nil {
		return false
	}
	key, ok := j.Key()
	if !ok {
		return false
	}
	for _, text := range l.rules[j.Chain] {
		if k, ok := xtables.RuleKey(text); ok && k == key {
			return true
		}
	}
	return false
}

// owned reports whether chain of table belongs to the prefix: a fixed
// chain of that table, the canary, or (in nat) a per-service chain.
func (c chainNames) owned(table, chain string) bool {
	if !strings.HasPrefix(chain, c.prefix) {
		return false
	}
	switch chain {
	case c.services, c.nodePorts, c.canary:
		return true
	}
	if table == "nat" {
		return chain == c.postrouting || chain == c.markMasq || c.isServiceChain(chain)
	}
	return chain == c.externalServices || chain == c.forward || chain == c.proxyFirewall || chain == c.firewall
}

package xtables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
)

// Chain is one chain of one table.
type Chain struct{ Table, Name string }

// OwnedChains are the chains a program owns outright, with the jumps from
// the built-in chains that hook them in. A program that keeps only a few
// helper chains (the IPVS and userspace dataplanes) rewrites them whole
// and finds out what others changed by comparing a listing taken right
// after its last write with one taken now: iptables-save spells a rule
// its own way, so the listing after the write, not the restore input, is
// what later listings must equal.
type OwnedChains struct {
	// Chains in the order they are declared; a table's chains may refer
	// to those before them.
	Chains []Chain
	// Jumps from the built-in chains, inserted in this order (so the last
	// ends up first in its chain).
	Jumps []Jump
	// Logger is told what Remove left or removed of iptables-nft's base
	// chains (RemoveEmptyHooks); the zero Logger is silent.
	Logger logr.Logger
}

// Listing is the rules of each owned chain, and of each built-in chain
// a jump is in, as iptables-save prints them; a chain that does not exist
// has none.
type Listing map[Chain][]string

// List lists every owned chain and every built-in chain a jump is in, from
// one iptables-save per table: a process per chain made a reconcile under
// emulation take seconds, and a listing serves both Changed and
// MissingJumps.
func (o *OwnedChains) List(ctx context.Context, r Runner) (Listing, error) {
	tables := o.tables()
	for _, t := range o.jumpTables() {
		if !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	saved, err := saveTables(ctx, r, tables)
	if err != nil {
		return nil, err
	}
	out := make(Listing, len(o.Chains)+len(o.Jumps))
	for _, c := range o.Chains {
		out[c] = saved.rules(c.Table, c.Name)
	}
	for _, j := range o.Jumps {
		c := Chain{j.Table, j.Chain}
		out[c] = saved.rules(c.Table, c.Name)
	}
	return out, nil
}

// Changed describes each owned chain whose rules in got differ from want
// ("nat chain PKV-SERVICES: 0 rules, want 3"), in the order of Chains.
func (o *OwnedChains) Changed(want, got Listing) []string {
	var out []string
	for _, c := range o.Chains {
		if !slices.Equal(want[c], got[c]) {
			out = append(out, fmt.Sprintf("%s chain %s: %d rules, want %d", c.Table, c.Name, len(got[c]), len(want[c])))
		}
	}
	return out
}

// Hook inserts the jumps that the built-in chains lack in l, a listing
// taken since the last write, in the order of Jumps: one restore
// (HookInput), not a process per jump.
func (o *OwnedChains) Hook(ctx context.Context, r Runner, l Listing) error {
	in := o.HookInput(l)
	if in == "" {
		return nil
	}
	if err := r.Restore(ctx, RestoreBytes(in)); err != nil {
		return fmt.Errorf("insert jumps: %w", err)
	}
	return nil
}

// HookInput is the restore input that inserts the jumps the built-in
// chains lack in l, in the order of Jumps (so the last ends up first in
// its chain), a table at a time; "" when none is missing. Appended to a
// restore that writes the chains, it hooks them in with the same process.
func (o *OwnedChains) HookInput(l Listing) string {
	missing := o.missing(l)
	var b strings.Builder
	for _, table := range o.jumpTables() {
		head := false
		for _, j := range missing {
			if j.Table != table {
				continue
			}
			if !head {
				fmt.Fprintf(&b, "*%s\n", table)
				head = true
			}
			fmt.Fprintf(&b, "-I %s 1 %s\n", j.Chain, JoinRule(j.Rule))
		}
		if head {
			b.WriteString("COMMIT\n")
		}
	}
	return b.String()
}

// JoinRule spells a rule's arguments as a restore line does: an argument
// with blanks, or an empty one, in double quotes. The arguments hold no
// quotes or backslashes (the rules the dataplanes write never do), which
// would need escapes that the FakeRunner's parser, like the dataplanes'
// readers, does not take.
func JoinRule(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t") {
			b.WriteString(`"` + a + `"`)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// MissingJumps describes each jump the built-in chains do not hold in l
// ("nat chain OUTPUT: no jump to PKU-SERVICES"), compared by what the rule
// does rather than how iptables-save spells it.
func (o *OwnedChains) MissingJumps(l Listing) []string {
	missing := o.missing(l)
	out := make([]string, 0, len(missing))
	for _, j := range missing {
		out = append(out, fmt.Sprintf("%s chain %s: no jump to %s", j.Table, j.Chain, j.target()))
	}
	return out
}

// missing are the jumps the built-in chains do not hold in l.
func (o *OwnedChains) missing(l Listing) []Jump {
	var out []Jump
	for _, j := range o.Jumps {
		if !slices.ContainsFunc(l[Chain{j.Table, j.Chain}], j.matches) {
			out = append(out, j)
		}
	}
	return out
}

// savedRules holds the "-A CHAIN ..." lines of some tables' saves, by
// table and chain.
type savedRules map[Chain][]string

func (s savedRules) rules(table, chain string) []string { return s[Chain{table, chain}] }

// saveTables runs Runner.Save for each table and keeps its rules.
func saveTables(ctx context.Context, r Runner, tables []string) (savedRules, error) {
	out := savedRules{}
	for _, table := range tables {
		save, err := r.Save(ctx, table)
		if err != nil {
			return nil, fmt.Errorf("list iptables table %s: %w", table, err)
		}
		for line := range strings.Lines(string(save)) {
			line = strings.TrimRight(line, "\n")
			rest, ok := strings.CutPrefix(line, "-A ")
			if !ok {
				continue
			}
			chain, _, _ := strings.Cut(rest, " ")
			c := Chain{table, chain}
			out[c] = append(out[c], line)
		}
	}
	return out, nil
}

// matches reports whether the listed rule is j: by Key, or for a rule this
// package cannot parse, by its target.
func (j Jump) matches(listed string) bool {
	want, ok := j.Key()
	if got, ok2 := RuleKey(listed); ok && ok2 {
		return want == got
	}
	return strings.HasSuffix(listed, " -j "+j.target())
}

func (j Jump) target() string {
	if len(j.Rule) == 0 {
		return ""
	}
	return j.Rule[len(j.Rule)-1]
}

// Remove deletes the jumps and then the chains, whether or not they
// exist, in one restore per table, then the built-in chains the jumps were
// in where iptables-nft left them empty (RemoveEmptyHooks). It tries
// everything and returns every failure.
func (o *OwnedChains) Remove(ctx context.Context, r Runner) error {
	var errs []error
	for _, j := range o.Jumps {
		if err := r.DeleteJump(ctx, j); err != nil {
			errs = append(errs, err)
		}
	}
	var b strings.Builder
	for _, table := range o.tables() {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range o.Chains {
			if c.Table == table {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
			}
		}
		for _, c := range o.Chains {
			if c.Table == table {
				fmt.Fprintf(&b, "-X %s\n", c.Name)
			}
		}
		b.WriteString("COMMIT\n")
	}
	if b.Len() > 0 {
		if err := r.Restore(ctx, RestoreBytes(b.String())); err != nil {
			errs = append(errs, fmt.Errorf("remove iptables chains: %w", err))
		}
	}
	for _, table := range o.jumpTables() {
		if err := RemoveEmptyHooks(ctx, r, o.Logger, table, HookedChains(o.Jumps, table)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tables are the tables of the chains, in order of first appearance.
func (o *OwnedChains) tables() []string {
	var out []string
	for _, c := range o.Chains {
		if !slices.Contains(out, c.Table) {
			out = append(out, c.Table)
		}
	}
	return out
}

// jumpTables are the tables of the jumps, in order of first appearance.
func (o *OwnedChains) jumpTables() []string {
	var out []string
	for _, j := range o.Jumps {
		if !slices.Contains(out, j.Table) {
			out = append(out, j.Table)
		}
	}
	return out
}

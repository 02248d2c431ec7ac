package iptables

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
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

// partialSync writes only what changed since d.prog. It reports again when
// the change needs a full sync instead (large-cluster mode flipped).
func (d *Dataplane) partialSync(ctx context.Context, s *dataplane.State, v *view) (again bool, err error) {
	prog := d.prog
	var candidates []types.NamespacedName
	if changed, ok := s.ChangedFrom(d.last); ok {
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

	r := d.renderer(v, d.skip)
	var (
		natDecl, natRules, natDelete writer
		dels, ins                    [numShared][]entry
	)
	rendered := 0
	next := map[types.NamespacedName]*svcState{}
	for _, nn := range candidates {
		ports, eps := inputs(s, nn)
		old, cur := prog.services[nn], r.service(s, nn, ports, eps)
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
		before, ok := d.gens.before(ctx)
		err := d.runner.Restore(ctx, xtables.RestoreBytes(b.Bytes()))
		d.gens.noteWrite(ctx, before, ok)
		if err != nil {
			d.metrics.partialRestoreFailures.Inc()
			d.countTimeout(err)
			if re, ok := err.(*xtables.RestoreError); ok {
				re.Partial = true
			}
			return false, fmt.Errorf("partial sync: %w", err)
		}
		prog.forget(b.Bytes())
	}
	prog.ports = nil
	for nn, st := range next {
		rules[tableNAT] += ruleCount(st) - ruleCount(prog.services[nn])
		if st == nil {
			delete(prog.services, nn)
		} else {
			prog.services[nn] = st
		}
	}
	prog.endpoints, prog.rules = total, rules
	d.stats = SyncStats{SyncReport: dataplane.SyncReport{Bytes: b.Len(), Services: rendered}, Edits: edits, written: countWritten(b.Bytes(), d.names)}
	d.log.V(4).Info("Partial sync", "services", rendered, "edits", edits, "bytes", b.Len())
	return false, nil
}

// chainsOf maps each own chain of a service to its rules.
func chainsOf(st *svcState) map[string][]byte {
	m := map[string][]byte{}
	if st != nil {
		for _, k := range st.ports {
			for name, rules := range k.r.own.all() {
				m[name] = rules
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
			for name, text := range k.r.own.all() {
				if prev, ok := oldChains[name]; ok && bytes.Equal(prev, text) {
					continue
				}
				decl.line(":", name, " - [0:0]")
				for line := range bytes.Lines(text) {
					rules.line("-A ", name, " ", string(line[:len(line)-1]))
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

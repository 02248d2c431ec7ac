package xtables

import (
	"context"
	"io"
	"net/netip"
	"slices"
	"sync"

	"github.com/proxykit/proxykit/dataplane"
)

// FakeRunner is a Runner that keeps a simulated kernel: restores apply to a
// Ruleset with iptables-restore's checks and atomicity, and every input is
// recorded. It is the dataplane's one way to run without touching the
// kernel: the conformance suite traces through it, and a dry run prints
// what it is handed (Output).
type FakeRunner struct {
	mu sync.Mutex
	rs *Ruleset
	// restores is every restore input, successful or not.
	restores [][]byte
	// gen counts the changes applied (Generation).
	gen uint32
	// Fail, if set, is consulted before each restore; an error it returns
	// is returned as if iptables-restore had rejected the input, and
	// nothing is applied.
	Fail func(data []byte) error
	// Output, if set, receives every restore input the fake applied, as
	// iptables-restore would have read it.
	Output io.Writer
}

// NewFakeRunner returns a FakeRunner with empty tables.
func NewFakeRunner() *FakeRunner {
	return &FakeRunner{rs: NewRuleset()}
}

// Restore implements Runner.
func (f *FakeRunner) Restore(_ context.Context, in RestoreInput) error {
	data, err := readAll(in)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores = append(f.restores, slices.Clone(data))
	if f.Fail != nil {
		if err := f.Fail(data); err != nil {
			return err
		}
	}
	next := f.rs.Clone()
	if err := next.Apply(data); err != nil {
		line := 0
		if pe, ok := err.(*ParseError); ok {
			line = pe.Line
		}
		return &RestoreError{Line: line, Context: extractLines(data, line, contextLines), Output: err.Error(), Err: err}
	}
	f.rs = next
	f.gen++
	if f.Output != nil {
		if _, err := f.Output.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// Save implements Runner.
func (f *FakeRunner) Save(_ context.Context, table string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rs.Save(table), nil
}

// EnsureJump implements Runner.
func (f *FakeRunner) EnsureJump(_ context.Context, j Jump) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := parseRule(j.Rule)
	if err != nil {
		return err
	}
	next := f.rs.Clone()
	if err := next.Apply([]byte("*" + j.Table + "\n" + "-I " + j.Chain + " 1 " + r.Text + "\nCOMMIT\n")); err != nil {
		return err
	}
	if slices.Contains(f.rs.Rules(j.Table, j.Chain), r.Text) {
		return nil
	}
	f.rs = next
	f.gen++
	return nil
}

// DeleteJump implements Runner.
func (f *FakeRunner) DeleteJump(_ context.Context, j Jump) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := parseRule(j.Rule)
	if err != nil {
		return err
	}
	if !slices.Contains(f.rs.Rules(j.Table, j.Chain), r.Text) {
		return nil
	}
	f.gen++
	return f.rs.Apply([]byte("*" + j.Table + "\n" + "-D " + j.Chain + " " + r.Text + "\nCOMMIT\n"))
}

// Generation counts the changes the fake applied, as the nftables ruleset
// generation counts iptables-nft's commits: a dataplane's canary reads it
// as it reads the kernel's.
func (f *FakeRunner) Generation(context.Context) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, nil
}

// ListChain implements Runner.
func (f *FakeRunner) ListChain(_ context.Context, table, chain string) ([]string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.rs.Chains(table), chain) {
		return nil, false, nil
	}
	var out []string
	for _, r := range f.rs.Rules(table, chain) {
		out = append(out, "-A "+chain+" "+r)
	}
	return out, true, nil
}

// Restores returns every restore input so far.
func (f *FakeRunner) Restores() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restores)
}

// Ruleset returns a copy of the simulated tables.
func (f *FakeRunner) Ruleset() *Ruleset {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rs.Clone()
}

// Trace follows p through the simulated tables; see Ruleset.Trace.
func (f *FakeRunner) Trace(p dataplane.Packet, nodeIPs []netip.Addr) dataplane.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rs.Trace(p, nodeIPs)
}

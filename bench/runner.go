package main

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// pkRunner is the xtables.Runner of proxykit's iptables dataplane: it
// records what is restored and fails on request, and hands everything to
// an ExecRunner or the package's FakeRunner, or discards it.
type pkRunner struct {
	exec  xtables.Runner
	fail  bool
	last  int
	first xtables.RestoreInput
}

func newPKRunner(be string, family v1.IPFamily) (*pkRunner, error) {
	var variant string
	switch be {
	case discard:
		return &pkRunner{}, nil
	case fake:
		return &pkRunner{exec: xtables.NewFakeRunner()}, nil
	case iptablesLegacy:
		variant = "legacy"
	case iptablesNFT:
		variant = "nft"
	default:
		return nil, fmt.Errorf("proxykit iptables cannot run on %s", be)
	}
	r, err := xtables.NewExecRunner(xtables.ExecConfig{Family: family, Variant: variant})
	if err != nil {
		return nil, err
	}
	return &pkRunner{exec: r}, nil
}

func (r *pkRunner) failNext()    { r.fail = true }
func (r *pkRunner) beginSync()   {}
func (r *pkRunner) written() int { return r.last }

func (r *pkRunner) firstInput() []byte {
	if r.first == nil {
		return nil
	}
	var b bytes.Buffer
	if _, err := r.first.WriteTo(&b); err != nil {
		return nil
	}
	return b.Bytes()
}

// dump is the nat and filter tables the fake holds, as iptables-save
// prints them.
func (r *pkRunner) dump() ([]byte, error) {
	var out []byte
	for _, table := range []string{"filter", "nat"} {
		b, err := r.exec.Save(context.Background(), table)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// Restore writes the input out, as the ExecRunner streams it into
// iptables-restore, so that a discarded restore costs the dataplane what
// a real one does.
func (r *pkRunner) Restore(ctx context.Context, in xtables.RestoreInput) error {
	if r.fail {
		r.fail = false
		return errInjected
	}
	r.last = in.Len()
	if r.first == nil && r.exec != nil {
		r.first = in
	}
	if r.exec == nil {
		_, err := in.WriteTo(io.Discard)
		return err
	}
	return r.exec.Restore(ctx, in)
}

func (r *pkRunner) Save(ctx context.Context, table string) ([]byte, error) {
	if r.exec == nil {
		return nil, nil
	}
	return r.exec.Save(ctx, table)
}

func (r *pkRunner) EnsureJump(ctx context.Context, j xtables.Jump) error {
	if r.exec == nil {
		return nil
	}
	return r.exec.EnsureJump(ctx, j)
}

func (r *pkRunner) DeleteJump(ctx context.Context, j xtables.Jump) error {
	if r.exec == nil {
		return nil
	}
	return r.exec.DeleteJump(ctx, j)
}

func (r *pkRunner) ListChain(ctx context.Context, table, chain string) ([]string, bool, error) {
	if r.exec == nil {
		return nil, false, nil
	}
	return r.exec.ListChain(ctx, table, chain)
}

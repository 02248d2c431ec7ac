package iptables

import (
	"context"
	"errors"

	"github.com/proxykit/proxykit/dataplane/xtables"
)

// generations follows the rules' generation for the canary (the nftables
// ruleset generation with the nft backend, a fingerprint of the tables'
// summaries with legacy): the generation at which the kernel was last
// seen holding what the dataplane programmed. Its zero value, and a
// Runner without a generation, is disabled.
type generations struct {
	// readGen reads the generation; nil when the Runner has none.
	readGen func(context.Context) (uint32, error)
	seen    bool
	gen     uint32
}

// newGenerations enables the generation when r has one
// (xtables.GenerationOf).
func newGenerations(r xtables.Runner) generations {
	return generations{readGen: xtables.GenerationOf(r)}
}

var errNoGenerations = errors.New("the iptables runner has no generation")

func (g *generations) enabled() bool { return g.readGen != nil }

// read returns the current generation; an error when disabled, so that
// callers note nothing.
func (g *generations) read(ctx context.Context) (uint32, error) {
	if g.readGen == nil {
		return 0, errNoGenerations
	}
	return g.readGen(ctx)
}

// unchanged reports whether the kernel was seen as programmed at gen.
func (g *generations) unchanged(gen uint32) bool { return g.seen && g.gen == gen }

// see records that the kernel held what was programmed at gen.
func (g *generations) see(gen uint32) { g.seen, g.gen = true, gen }

// forget makes the next canary compare the tables.
func (g *generations) forget() { g.seen = false }

// before reads the generation ahead of one of the dataplane's own writes.
func (g *generations) before(ctx context.Context) (uint32, bool) {
	if g.readGen == nil {
		return 0, false
	}
	gen, err := g.readGen(ctx)
	return gen, err == nil
}

// noteWrite records one of the dataplane's own writes, before being the
// generation read ahead of it (ok when it could be read). The kernel
// stays seen as programmed only when nobody else committed since it was
// last seen so, as far as the generations tell: one of theirs committed
// while the dataplane wrote is missed until the next Reconcile.
func (g *generations) noteWrite(ctx context.Context, before uint32, ok bool) {
	if g.readGen == nil {
		return
	}
	after, err := g.readGen(ctx)
	if !ok || err != nil || !g.unchanged(before) {
		g.seen = false
		return
	}
	g.see(after)
}

// noteFull records a full sync's write, which rewrote every chain the
// dataplane owns: whatever changed before it is gone.
func (g *generations) noteFull(ctx context.Context) {
	if g.readGen == nil {
		return
	}
	if after, err := g.readGen(ctx); err == nil {
		g.see(after)
		return
	}
	g.seen = false
}

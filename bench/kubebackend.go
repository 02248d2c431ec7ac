package main

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"

	kubenftables "k8s.io/kubernetes/pkg/proxy/nftables"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	"sigs.k8s.io/knftables"
)

// iptBackend is kube-proxy's iptables interface: upstream's exec one
// (inner) with recording and failure injection, or, with inner nil, one
// that accepts everything and keeps nothing, as proxykit's discarding
// runner does. Upstream's own fake (iptablestest) is not used for timing:
// it parses every restore into its model, which would be counted against
// kube-proxy.
type iptBackend struct {
	inner utiliptables.Interface
	fail  bool
	err   error
	last  int
	first []byte
}

func (b *iptBackend) failNext()          { b.fail = true }
func (b *iptBackend) written() int       { return b.last }
func (b *iptBackend) firstInput() []byte { return b.first }
func (b *iptBackend) failedLast() error  { return b.err }

func (b *iptBackend) RestoreAll(data []byte, flush utiliptables.FlushFlag, counters utiliptables.RestoreCountersFlag) error {
	b.err = nil
	if b.fail {
		b.fail = false
		b.err = errInjected
		return b.err
	}
	b.last = len(data)
	if b.first == nil {
		b.first = data
	}
	if b.inner != nil {
		b.err = b.inner.RestoreAll(data, flush, counters)
	}
	return b.err
}

func (b *iptBackend) EnsureChain(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	if b.inner == nil {
		return true, nil
	}
	return b.inner.EnsureChain(table, chain)
}

func (b *iptBackend) FlushChain(table utiliptables.Table, chain utiliptables.Chain) error {
	if b.inner == nil {
		return nil
	}
	return b.inner.FlushChain(table, chain)
}

func (b *iptBackend) DeleteChain(table utiliptables.Table, chain utiliptables.Chain) error {
	if b.inner == nil {
		return nil
	}
	return b.inner.DeleteChain(table, chain)
}

func (b *iptBackend) ChainExists(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	if b.inner == nil {
		return true, nil
	}
	return b.inner.ChainExists(table, chain)
}

func (b *iptBackend) EnsureRule(pos utiliptables.RulePosition, table utiliptables.Table, chain utiliptables.Chain, args ...string) (bool, error) {
	if b.inner == nil {
		return true, nil
	}
	return b.inner.EnsureRule(pos, table, chain, args...)
}

func (b *iptBackend) DeleteRule(table utiliptables.Table, chain utiliptables.Chain, args ...string) error {
	if b.inner == nil {
		return nil
	}
	return b.inner.DeleteRule(table, chain, args...)
}

func (b *iptBackend) IsIPv6() bool { return false }

func (b *iptBackend) Protocol() utiliptables.Protocol { return utiliptables.ProtocolIPv4 }

func (b *iptBackend) SaveInto(table utiliptables.Table, buf *bytes.Buffer) error {
	if b.inner == nil {
		return nil
	}
	return b.inner.SaveInto(table, buf)
}

func (b *iptBackend) Restore(table utiliptables.Table, data []byte, flush utiliptables.FlushFlag, counters utiliptables.RestoreCountersFlag) error {
	if b.inner == nil {
		return nil
	}
	return b.inner.Restore(table, data, flush, counters)
}

// Monitor does nothing: the canary poll would run concurrently with the
// measurements, and the proxiers are never left running long enough for
// it to matter.
func (b *iptBackend) Monitor(utiliptables.Chain, []utiliptables.Table, func(), time.Duration, <-chan struct{}) {
}

func (b *iptBackend) Present() error { return nil }

// nftBackend is the knftables.Interface of kube-proxy's nftables proxier:
// the real one (inner) with recording and failure injection, or, with
// inner nil, one that renders each transaction as the exec backend would
// write it to nft, and keeps only the chain, set and map names it
// created, which the proxier lists on every sync. knftables' Fake is not
// used for timing: it copies its whole model on every Run.
type nftBackend struct {
	inner knftables.Interface
	fail  bool
	err   error
	last  int
	first *knftables.Transaction
	// names holds the chains ("chain") and sets and maps ("sets", "maps").
	names map[string]map[string]bool
	nft   knftables.Interface
}

func newNFTBackend(inner knftables.Interface) *nftBackend {
	return &nftBackend{
		inner: inner,
		names: map[string]map[string]bool{"chain": {}, "set": {}, "map": {}},
		nft:   knftables.NewFake(knftables.IPv4Family, "kube-proxy"),
	}
}

func (b *nftBackend) failNext()         { b.fail = true }
func (b *nftBackend) written() int      { return b.last }
func (b *nftBackend) failedLast() error { return b.err }

func (b *nftBackend) firstInput() []byte {
	if b.first == nil {
		return nil
	}
	return []byte(b.first.String())
}

func (b *nftBackend) NewTransaction() *knftables.Transaction {
	if b.inner != nil {
		return b.inner.NewTransaction()
	}
	return b.nft.NewTransaction()
}

func (b *nftBackend) Run(ctx context.Context, tx *knftables.Transaction) error {
	b.err = nil
	if b.fail {
		b.fail = false
		b.err = errInjected
		return b.err
	}
	if b.first == nil {
		b.first = tx
	}
	if b.inner != nil {
		b.err = b.inner.Run(ctx, tx)
		return b.err
	}
	text := tx.String()
	b.last = len(text)
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		// "add chain ip kube-proxy NAME ...", "delete set ip kube-proxy NAME"
		if len(f) < 5 {
			continue
		}
		names := b.names[f[1]]
		switch {
		case names == nil:
		case f[0] == "add" || f[0] == "create":
			names[f[4]] = true
		case f[0] == "delete":
			delete(names, f[4])
		}
	}
	return nil
}

func (b *nftBackend) Check(ctx context.Context, tx *knftables.Transaction) error {
	if b.inner != nil {
		return b.inner.Check(ctx, tx)
	}
	return nil
}

func (b *nftBackend) ListAll(ctx context.Context) (map[string][]string, error) {
	if b.inner != nil {
		return b.inner.ListAll(ctx)
	}
	all := map[string][]string{}
	for kind := range b.names {
		all[kind], _ = b.List(ctx, kind)
	}
	return all, nil
}

func (b *nftBackend) List(ctx context.Context, objectType string) ([]string, error) {
	if b.inner != nil {
		return b.inner.List(ctx, objectType)
	}
	kind := strings.TrimSuffix(objectType, "s")
	var out []string
	for name := range b.names[kind] {
		out = append(out, name)
	}
	return out, nil
}

func (b *nftBackend) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	if b.inner != nil {
		return b.inner.ListRules(ctx, chain)
	}
	return nil, nil
}

func (b *nftBackend) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	if b.inner != nil {
		return b.inner.ListElements(ctx, objectType, name)
	}
	return nil, nil
}

func (b *nftBackend) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	if b.inner != nil {
		return b.inner.ListCounters(ctx)
	}
	return nil, nil
}

// swapNFTables puts an nftBackend in place of the knftables.Interface
// kube-proxy's nftables proxier made for itself. Its constructor takes no
// interface (it calls knftables.New), so the unexported field is replaced
// by reflection: the one place the benchmark reaches inside upstream.
// With discard, the backend keeps nothing; otherwise it wraps the
// proxier's own.
func swapNFTables(p *kubenftables.Proxier, discard bool) (*nftBackend, error) {
	f := reflect.ValueOf(p).Elem().FieldByName("nftables")
	if !f.IsValid() || f.Type() != reflect.TypeFor[knftables.Interface]() {
		return nil, fmt.Errorf("kube-proxy's nftables Proxier has no knftables.Interface field \"nftables\"")
	}
	field := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	var inner knftables.Interface
	if !discard {
		inner = field.Interface().(knftables.Interface)
	}
	b := newNFTBackend(inner)
	field.Set(reflect.ValueOf(knftables.Interface(b)))
	return b, nil
}

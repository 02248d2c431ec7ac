package main

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
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
	inner    utiliptables.Interface
	protocol utiliptables.Protocol
	// record keeps the first restore and the jumps ensured, per table, as
	// restore lines (the cross-check's input).
	record bool
	jumps  map[utiliptables.Table][]string
	chains map[utiliptables.Table][]utiliptables.Chain
	fail   bool
	err    error
	last   int
	first  []byte
}

func (b *iptBackend) failNext() { b.fail = true }

// beginSync implements backend: every system writes one restore per sync.
func (b *iptBackend) beginSync()         {}
func (b *iptBackend) written() int       { return b.last }
func (b *iptBackend) firstInput() []byte { return b.first }
func (b *iptBackend) failedLast() error  { return b.err }

var nfacctMatch = regexp.MustCompile(` -m nfacct --nfacct-name \S+`)

// dump is what the proxier wrote, as restore input: the last restore,
// then the jumps it ensured in built-in chains. (Upstream's fake
// iptables cannot be read back instead: its listing leaves comments
// unquoted.)
func (b *iptBackend) dump() ([]byte, error) {
	if !b.record {
		return nil, fmt.Errorf("kube-proxy's iptables backend did not record")
	}
	// The nfacct match only counts (it always matches), and the tracer
	// does not know it.
	out := nfacctMatch.ReplaceAll(b.first, nil)
	for _, table := range []utiliptables.Table{utiliptables.TableFilter, utiliptables.TableNAT} {
		out = append(out, "*"+string(table)+"\n"...)
		// Chains it ensured and never restored (kubelet's KUBE-FIREWALL);
		// declaring the others again would flush them.
		for _, c := range b.chains[table] {
			if !bytes.Contains(b.first, []byte("\n:"+string(c)+" ")) {
				out = append(out, ":"+string(c)+" - [0:0]\n"...)
			}
		}
		for _, j := range b.jumps[table] {
			out = append(out, j...)
		}
		out = append(out, "COMMIT\n"...)
	}
	return out, nil
}

func (b *iptBackend) RestoreAll(data []byte, flush utiliptables.FlushFlag, counters utiliptables.RestoreCountersFlag) error {
	b.err = nil
	if b.fail {
		b.fail = false
		b.err = errInjected
		return b.err
	}
	b.last = len(data)
	// Only a kernel run writes the first input out, and only the cross-
	// check reads it back: keeping it otherwise would count in the
	// proxier's peak RSS.
	if b.first == nil && (b.inner != nil || b.record) {
		b.first = data
		if b.record {
			b.first = slices.Clone(data)
		}
	}
	if b.inner != nil {
		b.err = b.inner.RestoreAll(data, flush, counters)
	}
	return b.err
}

func (b *iptBackend) EnsureChain(table utiliptables.Table, chain utiliptables.Chain) (bool, error) {
	if b.record {
		if b.chains == nil {
			b.chains = map[utiliptables.Table][]utiliptables.Chain{}
		}
		b.chains[table] = append(b.chains[table], chain)
	}
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
	if b.record {
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = a
			if strings.Contains(a, " ") {
				quoted[i] = `"` + a + `"`
			}
		}
		if b.jumps == nil {
			b.jumps = map[utiliptables.Table][]string{}
		}
		b.jumps[table] = append(b.jumps[table], fmt.Sprintf("-I %s 1 %s\n", chain, strings.Join(quoted, " ")))
	}
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

func (b *iptBackend) IsIPv6() bool { return b.protocol == utiliptables.ProtocolIPv6 }

func (b *iptBackend) Protocol() utiliptables.Protocol { return b.protocol }

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
	// syncs counts beginSync calls; written the bytes since the last.
	syncs, bytes int
	// first holds the transactions of the first sync, of a kernel run.
	first []*knftables.Transaction
	// names holds the chains ("chain") and sets and maps ("sets", "maps").
	names map[string]map[string]bool
	nft   knftables.Interface
}

func newNFTBackend(inner knftables.Interface, family v1.IPFamily) *nftBackend {
	return newNFTBackendFor(inner, family, "kube-proxy")
}

// newNFTBackendFor is newNFTBackend for the program whose table is table.
func newNFTBackendFor(inner knftables.Interface, family v1.IPFamily, table string) *nftBackend {
	return &nftBackend{
		inner: inner,
		names: map[string]map[string]bool{"chain": {}, "set": {}, "map": {}},
		nft:   knftables.NewFake(nftFamilyOf(family), table),
	}
}

// nftFamilyOf is the nftables family of an IP family.
func nftFamilyOf(family v1.IPFamily) knftables.Family {
	if family == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

func (b *nftBackend) failNext()         { b.fail = true }
func (b *nftBackend) beginSync()        { b.syncs, b.bytes = b.syncs+1, 0 }
func (b *nftBackend) written() int      { return b.bytes }
func (b *nftBackend) failedLast() error { return b.err }

func (b *nftBackend) firstInput() []byte {
	var out []byte
	for _, tx := range b.first {
		out = append(out, tx.String()...)
	}
	return out
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
	if b.syncs <= 1 && b.inner != nil {
		b.first = append(b.first, tx)
	}
	if b.inner != nil {
		b.err = b.inner.Run(ctx, tx)
		return b.err
	}
	text := tx.String()
	b.bytes += len(text)
	for line := range strings.Lines(text) {
		// "add chain ip kube-proxy NAME ...", "delete set ip kube-proxy
		// NAME"; most lines are elements, skipped without allocating.
		verb, rest, _ := strings.Cut(line, " ")
		kind, rest, _ := strings.Cut(rest, " ")
		names := b.names[kind]
		if names == nil {
			continue
		}
		_, rest, _ = strings.Cut(rest, " ") // family
		_, rest, _ = strings.Cut(rest, " ") // table
		name, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		switch verb {
		case "add", "create":
			names[name] = true
		case "delete":
			delete(names, name)
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
// kube-proxy's nftables proxier made for itself (its constructor takes no
// interface: it calls knftables.New). With discard, the backend keeps
// nothing; otherwise it wraps the proxier's own.
func swapNFTables(p *kubenftables.Proxier, family v1.IPFamily, discard bool) (*nftBackend, error) {
	var b *nftBackend
	err := swapField(p, "nftables", func(own knftables.Interface) knftables.Interface {
		if discard {
			own = nil
		}
		b = newNFTBackend(own, family)
		return b
	})
	return b, err
}

// swapField replaces the unexported field name, of type T, of the struct
// p points to with what swap makes of its value: the one way the
// benchmark reaches inside upstream, for the handles a proxier's
// constructor makes for itself instead of taking them (kube-proxy's own
// unit tests set the same fields).
func swapField[T any](p any, name string, swap func(T) T) error {
	f := reflect.ValueOf(p).Elem().FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeFor[T]() {
		return fmt.Errorf("%T has no %s field %q", p, reflect.TypeFor[T](), name)
	}
	field := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	old, _ := field.Interface().(T) // the zero T if the field is nil
	v := swap(old)
	field.Set(reflect.ValueOf(&v).Elem())
	return nil
}

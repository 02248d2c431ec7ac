package nftables

import (
	"context"
	"slices"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

type (
	verb = nftnl.Verb
	op   = nftnl.Op
)

const (
	verbAdd    = nftnl.Add
	verbFlush  = nftnl.Flush
	verbDelete = nftnl.Delete
)

// slab allocates the chains and rules of a plan a few hundred at a time:
// a full sync writes tens of thousands.
type slab struct {
	chains []knftables.Chain
	rules  []knftables.Rule
}

const slabSize = 256

func (s *slab) chain(name string) *knftables.Chain {
	if len(s.chains) == cap(s.chains) {
		s.chains = make([]knftables.Chain, 0, slabSize)
	}
	s.chains = append(s.chains, knftables.Chain{Name: name})
	return &s.chains[len(s.chains)-1]
}

func (s *slab) rule(chain, rule string) *knftables.Rule {
	if len(s.rules) == cap(s.rules) {
		s.rules = make([]knftables.Rule, 0, slabSize)
	}
	s.rules = append(s.rules, knftables.Rule{Chain: chain, Rule: rule})
	return &s.rules[len(s.rules)-1]
}

// plan is the operations of one sync, in an order where each refers only to
// objects created before it, so that it can be cut into several
// transactions.
type plan struct {
	ops []op
}

func (p *plan) add(o knftables.Object)    { p.ops = append(p.ops, op{Verb: verbAdd, Obj: o}) }
func (p *plan) flush(o knftables.Object)  { p.ops = append(p.ops, op{Verb: verbFlush, Obj: o}) }
func (p *plan) delete(o knftables.Object) { p.ops = append(p.ops, op{Verb: verbDelete, Obj: o}) }

// transaction returns ops as one transaction of nft: the text form of a
// plan, whatever kernel runs it.
func transaction(nft knftables.Interface, ops []op) *knftables.Transaction {
	tx := nft.NewTransaction()
	for _, o := range ops {
		o.AddTo(tx)
	}
	return tx
}

// count is the number of operations of the plan, each element of an
// nftnl.Elements counted.
func (p *plan) count() int {
	n := 0
	for _, o := range p.ops {
		n += o.Count()
	}
	return n
}

// run runs the plan as transactions of at most max operations (max <= 0:
// all in one), returning how many ran and the size of their nft input
// (inputSize).
func (d *Dataplane) run(ctx context.Context, p *plan, max int) (txs, bytes int, err error) {
	if len(p.ops) == 0 {
		return 0, 0, nil
	}
	unchanged := d.unchanged(ctx)
	size := d.inputSizeOf(p.ops)
	for start, rest := 0, []op(nil); start < len(p.ops) || rest != nil; txs++ {
		var ops []op
		ops, start, rest = p.next(start, rest, max)
		if err := d.kernel.Run(ctx, ops); err != nil {
			d.suspectMaps(ops)
			d.suspectMaps(rest)
			d.suspectMaps(p.ops[start:])
			return txs, 0, &TransactionError{Operations: (&plan{ops: ops}).count(), Err: err}
		}
	}
	d.noteGeneration(ctx, unchanged)
	return txs, size(), nil
}

// inputSizeOf returns a function that returns inputSize of ops. Formatting
// the sample of a big plan's text takes milliseconds, which the
// transactions need not wait for: it runs beside them when it may. Over
// netlink the text's knftables.Interface is the Dataplane's own, which
// nothing else uses meanwhile.
func (d *Dataplane) inputSizeOf(ops []op) func() int {
	if d.workers <= 1 || d.cfg.NFT != nil || (&plan{ops: ops}).count() <= sampledOps {
		return func() int { return inputSize(d.text, ops) }
	}
	size := make(chan int, 1)
	go func() { size <- inputSize(d.text, ops) }()
	return func() int { return <-size }
}

// next is the transaction of at most max operations (max <= 0: all) that
// starts with rest, the part of an nftnl.Elements the last one left, then
// p.ops[start:]; it returns where the following one starts. It cuts an
// nftnl.Elements that does not fit whole, so that every transaction but
// the last has max operations.
func (p *plan) next(start int, rest []op, max int) (ops []op, next int, left []op) {
	if max <= 0 && rest == nil {
		return p.ops[start:], len(p.ops), nil
	}
	n, end := 0, start
	cut := func(o op) (head, tail op) {
		k, e := max-n, o.Elems
		return op{Verb: o.Verb, Elems: e.Slice(0, k)}, op{Verb: o.Verb, Elems: e.Slice(k, e.Len())}
	}
	if rest != nil {
		if c := rest[0].Count(); c > max {
			head, tail := cut(rest[0])
			return []op{head}, start, []op{tail}
		}
		n = rest[0].Count()
	}
	for end < len(p.ops) && n+p.ops[end].Count() <= max {
		n += p.ops[end].Count()
		end++
	}
	ops = p.ops[start:end]
	if rest != nil {
		ops = append(rest, ops...)
	}
	if end < len(p.ops) && n < max && p.ops[end].Elems != nil {
		head, tail := cut(p.ops[end])
		return append(slices.Clip(ops), head), end + 1, []op{tail}
	}
	return ops, end, nil
}

// suspectMaps marks the endpoint maps ops write to as suspect: shared
// map i is at mapCount+i.
func (d *Dataplane) suspectMaps(ops []op) {
	for _, o := range ops {
		var name string
		if o.Elems != nil {
			name = o.Elems.Set
		}
		switch obj := o.Obj.(type) {
		case *knftables.Element:
			name = obj.Map
		case *knftables.Map:
			name = obj.Name
		}
		if i, ok := shardIndex(name); ok {
			d.suspect[i] = true
		}
		if i, ok := sharedIndex(name); ok {
			d.suspect[mapCount+i] = true
		}
	}
}

// sampledOps is how many operations inputSize formats at most.
const sampledOps = 1000

// inputSize is the size of the nft input of ops: exact up to sampledOps
// operations; beyond, estimated from sampledOps of them spread evenly
// over the plan (the static part, chains, rules and elements alike, each
// element of an nftnl.Elements one).
func inputSize(nft knftables.Interface, ops []op) int {
	total := (&plan{ops: ops}).count()
	if total <= sampledOps {
		return len(transaction(nft, ops).String())
	}
	sample := make([]op, 0, sampledOps)
	k, at := 0, 0 // ops[k] holds the operations from at on
	for i := range sampledOps {
		pos := i * total / sampledOps
		for at+ops[k].Count() <= pos {
			at += ops[k].Count()
			k++
		}
		o := ops[k]
		if o.Obj == nil && o.Elems != nil {
			o = op{Verb: o.Verb, Obj: o.Elems.Element(pos - at)}
		}
		sample = append(sample, o)
	}
	return int(int64(len(transaction(nft, sample).String())) * int64(total) / sampledOps)
}

// TransactionError is a transaction nftables rejected: nothing of it was
// applied.
type TransactionError struct {
	Operations int
	Err        error
}

func (e *TransactionError) Error() string {
	return "nftables: transaction of " + itoa(e.Operations) + " operations failed: " + e.Err.Error()
}

func (e *TransactionError) Unwrap() error { return e.Err }

// Render returns the nft -f script that the first full sync of s into an
// empty table would run: deterministic, byte-identical for equal States.
// It needs no privileges and changes nothing.
func (d *Dataplane) Render(s *dataplane.State) ([]byte, error) {
	if err := d.checkState(s); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// The plan is diffed as for a Dataplane that programmed nothing yet:
	// what the table holds and which chains wait to be deleted stay as
	// they are for the next Sync.
	prog, stale := d.prog, d.stale
	d.prog, d.stale = nil, map[string]time.Time{}
	defer func() { d.prog, d.stale = prog, stale }()
	st := d.static(s)
	next, _ := d.renderAll(s, st, &kernelTable{}, nil)
	p := d.fullPlan(next, st, &kernelTable{}, false)
	return []byte(transaction(d.text, p.ops).String()), nil
}

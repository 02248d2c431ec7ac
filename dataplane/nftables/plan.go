package nftables

import (
	"context"

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

// run runs the plan as transactions of at most max operations (max <= 0:
// one), returning how many ran and the size of their nft input
// (inputSize).
func (d *Dataplane) run(ctx context.Context, p *plan, max int) (txs, bytes int, err error) {
	if len(p.ops) == 0 {
		return 0, 0, nil
	}
	if max <= 0 {
		max = len(p.ops)
	}
	unchanged := d.unchanged(ctx)
	for start := 0; start < len(p.ops); start += max {
		ops := p.ops[start:min(start+max, len(p.ops))]
		if err := d.kernel.Run(ctx, ops); err != nil {
			d.suspectMaps(p.ops[start:])
			return txs, 0, &TransactionError{Operations: len(ops), Err: err}
		}
		txs++
	}
	d.noteGeneration(ctx, unchanged)
	return txs, inputSize(d.text, p.ops), nil
}

// suspectMaps marks the endpoint maps ops write to as suspect.
func (d *Dataplane) suspectMaps(ops []op) {
	for _, o := range ops {
		var name string
		switch obj := o.Obj.(type) {
		case *knftables.Element:
			name = obj.Map
		case *knftables.Map:
			name = obj.Name
		}
		if i, ok := shardIndex(name); ok {
			d.suspect[i] = true
		}
	}
}

// sampledOps is how many operations inputSize formats at most.
const sampledOps = 1000

// inputSize is the size of the nft input of ops: exact up to sampledOps
// operations; beyond, estimated from sampledOps of them spread evenly
// over the plan (the static part, chains, rules and elements alike).
func inputSize(nft knftables.Interface, ops []op) int {
	if len(ops) <= sampledOps {
		return len(transaction(nft, ops).String())
	}
	sample := make([]op, sampledOps)
	for i := range sample {
		sample[i] = ops[i*len(ops)/sampledOps]
	}
	return int(int64(len(transaction(nft, sample).String())) * int64(len(ops)) / sampledOps)
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

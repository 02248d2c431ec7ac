package nftnl

import (
	"context"
	"encoding/binary"
	"sync"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// parallelElems is the fewest elements ending a transaction that are
// encoded on two goroutines. A cold sync of thousands of services ends in
// hundreds of thousands of elements, whose encoding is otherwise the
// longest serial step of the sync.
const parallelElems = 1 << 14

// encodeOps encodes ops in the encoding order. When they end in many
// element operations, the second half of those is encoded beside the
// rest into a part of its own, then joined: elements only read the set
// types and IDs that the operations before them define, and every set
// they name is looked up before the part starts. The part starts a
// message of its own where a serial encoding might have gone on filling
// one; that is the only difference in the batch.
func (b *batch) encodeOps(ctx context.Context, ops []Op) error {
	tail, split := b.elementSplit(ops)
	if split == len(ops) {
		return b.encodeRange(ctx, ops, 0, len(ops))
	}
	if err := b.encodeRange(ctx, ops, 0, tail); err != nil {
		return err
	}
	for k := tail; k < len(ops); k++ {
		if _, err := b.typeOf(ctx, setOf(ops[b.index(k)])); err != nil {
			// Serially, the operation reports its error as usual.
			return b.encodeRange(ctx, ops, tail, len(ops))
		}
	}
	// The part is encoded into the batch's buffer, which encode sized
	// from above for the whole batch, after room for the rest: no second
	// buffer, and joining it moves it down. The rest is capped at that
	// room, so that should it outgrow it, it moves to a buffer of its own
	// rather than write over the part.
	part := &batch{c: b.c, types: b.types, ids: b.ids, order: b.order, tableDeleted: b.tableDeleted, detached: true}
	partSize := 0
	for k := split; k < len(ops); k++ {
		n, _, _ := opSize(ops[b.index(k)], b.c.fam == unix.NFPROTO_IPV6)
		partSize += n
	}
	full := b.w.b[:cap(b.w.b)]
	if room := len(full) - partSize; room > len(b.w.b) && room < len(full) {
		part.w.b = full[room:room]
		b.w.b = b.w.b[:len(b.w.b):room]
	}
	var partErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		partErr = part.encodeRange(ctx, ops, split, len(ops))
		part.closeElems()
	})
	err := b.encodeRange(ctx, ops, tail, split)
	wg.Wait()
	if err != nil {
		return err
	}
	if partErr != nil {
		return partErr
	}
	b.join(part, full)
	return nil
}

// elementSplit returns where, in the encoding order, the element
// operations that end ops start, and where their second half starts:
// len(ops) when there are too few to split.
func (b *batch) elementSplit(ops []Op) (tail, split int) {
	elems := 0
	tail = len(ops)
	for ; tail > 0; tail-- {
		op := ops[b.index(tail-1)]
		if !isElements(op) {
			break
		}
		elems += op.Count()
	}
	if elems < parallelElems {
		return tail, len(ops)
	}
	split, half := tail, 0
	for ; split < len(ops) && half < elems/2; split++ {
		half += ops[b.index(split)].Count()
	}
	return tail, split
}

// isElements reports whether op adds or deletes elements.
func isElements(op Op) bool {
	if op.Verb == Flush {
		return false
	}
	_, ok := op.Obj.(*knftables.Element)
	return ok || op.Obj == nil && op.Elems != nil
}

// join appends part, encoded detached, to b, numbering its messages; full
// is b's buffer as it was before the part.
func (b *batch) join(part *batch, full []byte) {
	b.closeElems()
	off := len(b.w.b)
	if off > 0 && &b.w.b[0] == &full[0] && off+len(part.w.b) <= len(full) {
		// Still in one buffer: the part moves down to the rest's end.
		b.w.b = full[:off+copy(full[off:], part.w.b)]
	} else {
		b.w.b = append(b.w.b, part.w.b...)
	}
	for _, m := range part.msgs {
		seq := b.c.nextSeq()
		if b.firstSeq == 0 {
			b.firstSeq = seq
		}
		m.start += int32(off)
		// The sequence number follows the header's length, type and
		// flags.
		binary.NativeEndian.PutUint32(b.w.b[int(m.start)+8:], seq)
		b.msgs = append(b.msgs, m)
	}
}

package nftnl

import (
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// OpError is a refused transaction: the kernel's errno (errors.Is works
// with syscall.ENOENT, EEXIST, ...) and the operation it refused, as nft
// text.
type OpError struct {
	// Op is the refused operation as an nft command; "" when the kernel
	// did not say which.
	Op string
	// Msg is the kernel's extended-ack message, often "".
	Msg string
	// Others counts further refused operations.
	Others int
	Err    error
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("nftnl: transaction refused")
	if e.Op != "" {
		b.WriteString(" at " + strings.TrimSpace(e.Op))
	}
	if e.Msg != "" {
		b.WriteString(" (" + e.Msg + ")")
	}
	if e.Others > 0 {
		fmt.Fprintf(&b, " and %d more", e.Others)
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// describe names the first refused operation.
func (b *batch) describe(ops []Op, refused []reply) *OpError {
	ke := parseError(refused[0])
	oe := &OpError{Msg: ke.msg, Others: len(refused) - 1, Err: ke.errno}
	i := int(refused[0].seq) - int(b.firstSeq)
	if i < 0 || i >= len(b.msgs) {
		return oe
	}
	m := b.msgs[i]
	op, count := ops[m.first], m.count
	if m.elems {
		j := -1
		if ke.offset >= 0 {
			j = b.elementOf(m, ke.offset)
		}
		if j >= 0 {
			count = 1
		}
		op = b.elementAt(ops, m, max(j, 0))
	}
	if op.Obj == nil && op.Elems == nil {
		// The message records name no operation: say only what the
		// kernel said.
		return oe
	}
	oe.Op = opText(b.c.family, b.c.table, op)
	if count > 1 {
		oe.Op += fmt.Sprintf(" (one of %d elements from there)", count)
	}
	return oe
}

// elementOf is the index in element message m of the element at offset
// off of the message, -1 if none is there.
func (b *batch) elementOf(m msgInfo, off int) int {
	msg := b.w.b[m.start:]
	if len(msg) < nlmsgHdrLen {
		return -1
	}
	msg = msg[:min(int(binary.NativeEndian.Uint32(msg)), len(msg))]
	for pos := nlmsgHdrLen + nfgenLen; pos+4 <= len(msg); {
		n := int(binary.NativeEndian.Uint16(msg[pos:]))
		if n < 4 || pos+n > len(msg) {
			return -1
		}
		if binary.NativeEndian.Uint16(msg[pos+2:])&^nlaFNested == unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			// The last entry starting at or before off.
			j := -1
			for at := pos + 4; at+4 <= pos+n && at <= off; j++ {
				l := int(binary.NativeEndian.Uint16(msg[at:]))
				if l < 4 {
					return -1
				}
				at += nlaAlign(l)
			}
			return j
		}
		pos += nlaAlign(n)
	}
	return -1
}

// elementAt is element j of element message m, as an Op of its own.
func (b *batch) elementAt(ops []Op, m msgInfo, j int) Op {
	for pos, from := int(m.pos), int(m.from); pos < len(ops); pos, from = pos+1, 0 {
		op := ops[pos]
		if b.order != nil {
			op = ops[b.order[pos]]
		}
		if op.Obj != nil || op.Elems == nil {
			if j == 0 {
				return op
			}
			j--
			continue
		}
		if from+j < op.Elems.Len() {
			return Op{Verb: op.Verb, Obj: op.Elems.Element(from + j)}
		}
		j -= op.Elems.Len() - from
	}
	return Op{}
}

// opText is op as nft text.
func opText(family knftables.Family, table string, op Op) string {
	tx := knftables.NewFake(family, table).NewTransaction()
	op.AddTo(tx)
	return strings.TrimSpace(tx.String())
}

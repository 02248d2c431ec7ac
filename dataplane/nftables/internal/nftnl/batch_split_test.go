package nftnl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// splitOps is a transaction that ends in enough elements to be encoded in
// two parts: the endpoints of services in a shared map, one by one in a
// numbered map, and a set's, interleaved so that they are grouped by set.
func splitOps(bad int) []Op {
	ops := []Op{
		{Verb: Add, Obj: &knftables.Table{}},
		{Verb: Add, Obj: &knftables.Map{Name: "shared", TypeOf: "ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: Add, Obj: &knftables.Map{Name: "numbered", TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: Add, Obj: &knftables.Set{Name: "ips", Type: "ipv4_addr"}},
		{Verb: Add, Obj: &knftables.Chain{Name: "c"}},
		{Verb: Add, Obj: &knftables.Rule{Chain: "c", Rule: "ip daddr @ips drop"}},
	}
	for i := range parallelElems / 8 {
		vals := make([]string, 10)
		for j := range vals {
			vals[j] = fmt.Sprintf("10.%d.%d.%d . 8080", i>>8, i&255, j)
		}
		if i == bad {
			vals[3] = "10.0.0.256 . 8080"
		}
		ops = append(ops,
			Op{Verb: Add, Elems: &Elements{Set: "shared", Prefix: fmt.Sprintf("172.30.%d.%d . 80", i>>8, i&255), Values: vals}},
			Op{Verb: Add, Obj: &knftables.Element{Map: "numbered", Key: []string{fmt.Sprint(i)}, Value: []string{vals[0]}}},
			Op{Verb: Add, Obj: &knftables.Element{Set: "ips", Key: []string{fmt.Sprintf("172.30.%d.%d", i>>8, i&255)}}})
	}
	return ops
}

// encodeSerial is encode without the second part.
func encodeSerial(b *batch, ops []Op) error {
	var at int
	b.w.b, at = msgHeader(b.w.b, unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, b.c.nextSeq(), unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	finish(b.w.b, at)
	b.order = elementOrder(ops)
	if err := b.encodeRange(context.Background(), ops, 0, len(ops)); err != nil {
		return err
	}
	b.closeElems()
	b.w.b, at = msgHeader(b.w.b, unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, b.c.nextSeq(), unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	finish(b.w.b, at)
	return nil
}

// batchContent is what the kernel reads of b: every message but the
// element ones as it is, and the elements in order, one by one.
func batchContent(t *testing.T, c *Conn, b *batch, ops []Op) (msgs, elems []string) {
	t.Helper()
	for i, m := range b.msgs {
		n := int(binary.NativeEndian.Uint32(b.w.b[m.start:]))
		hdr := b.w.b[m.start : int(m.start)+n]
		if seq := binary.NativeEndian.Uint32(hdr[8:]); seq != b.firstSeq+uint32(i) {
			t.Fatalf("message %d has sequence number %d, want %d", i, seq, b.firstSeq+uint32(i))
		}
		if i+1 < len(b.msgs) && int(b.msgs[i+1].start) != int(m.start)+n {
			t.Fatalf("message %d ends at %d, the next starts at %d", i, int(m.start)+n, b.msgs[i+1].start)
		}
		if !m.elems {
			msgs = append(msgs, fmt.Sprintf("%x", hdr[16:]))
			continue
		}
		for j := range m.count {
			elems = append(elems, opText(c.family, c.table, b.elementAt(ops, m, int(j))))
		}
	}
	return msgs, elems
}

// TestSplitEncoding: a transaction ending in many elements encodes, in
// two parts, the messages and elements a serial encoding has, numbered in
// order, and an element refused in either part is named.
func TestSplitEncoding(t *testing.T) {
	ops := splitOps(-1)
	newConn := func() *Conn {
		return &Conn{family: knftables.IPv4Family, fam: 2, table: "t", types: map[string]*setType{}}
	}
	c := newConn()
	split := c.newBatch()
	if _, at := split.elementSplit(ops); at == len(ops) {
		t.Fatalf("the transaction of %d operations is not split", len(ops))
	}
	if err := split.encode(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	sc := newConn()
	serial := sc.newBatch()
	if err := encodeSerial(serial, ops); err != nil {
		t.Fatal(err)
	}
	gotMsgs, gotElems := batchContent(t, c, split, ops)
	wantMsgs, wantElems := batchContent(t, sc, serial, ops)
	if d := cmp.Diff(wantMsgs, gotMsgs); d != "" {
		t.Errorf("messages other than elements (-serial +split):\n%s", d)
	}
	if d := cmp.Diff(wantElems, gotElems); d != "" {
		t.Errorf("elements (-serial +split):\n%s", d)
	}
	if len(split.w.b) < len(serial.w.b) || len(split.w.b) > len(serial.w.b)+1024 {
		t.Errorf("the split batch has %d bytes, the serial one %d", len(split.w.b), len(serial.w.b))
	}

	for _, bad := range []int{10, parallelElems/8 - 10} {
		err := newConn().newBatch().encode(context.Background(), splitOps(bad))
		var ee *ElementError
		if !errors.As(err, &ee) || ee.Text != "10.0.0.256 . 8080" {
			t.Errorf("bad element in service %d: %v, want an ElementError naming it", bad, err)
		}
	}
}

// TestJoin: a part joins the batch the same whether both are still in
// one buffer, the rest outgrew its room, or the part outgrew the buffer.
func TestJoin(t *testing.T) {
	msg := func(b []byte, fill byte) []byte {
		b, at := msgHeader(b, nftType(unix.NFT_MSG_NEWSETELEM), unix.NLM_F_REQUEST, 0, 2, 0)
		b = append(b, fill, fill, fill, fill)
		finish(b, at)
		return b
	}
	want := msg(msg(msg(nil, 1), 2), 3)
	for _, seqs := range []int{0, 1, 2} {
		binary.NativeEndian.PutUint32(want[seqs*24+8:], uint32(seqs+1))
	}
	for _, tc := range []struct {
		name             string
		room, full       int
		restMoves, large bool
	}{
		{name: "one buffer", room: 32, full: 128},
		{name: "rest moved", room: 32, full: 128, restMoves: true},
		{name: "part moved", room: 32, full: 40, large: true},
	} {
		full := make([]byte, tc.full)
		b := &batch{c: &Conn{seq: 1}, firstSeq: 1, msgs: []msgInfo{{start: 0}}}
		b.w.b = msg(full[:0:tc.room], 1)
		binary.NativeEndian.PutUint32(b.w.b[8:], 1)
		if tc.restMoves {
			b.w.b = append(make([]byte, 0, 64), b.w.b...)
		}
		part := &batch{w: buf{b: full[tc.room:tc.room]}, detached: true}
		if tc.large {
			part.w.b = nil
		}
		part.w.b = msg(msg(part.w.b, 2), 3)
		part.msgs = []msgInfo{{start: 0}, {start: 24}}
		b.join(part, full)
		if d := cmp.Diff(want, b.w.b); d != "" {
			t.Errorf("%s: batch (-want +got):\n%s", tc.name, d)
		}
		if got := []int32{b.msgs[0].start, b.msgs[1].start, b.msgs[2].start}; !cmp.Equal(got, []int32{0, 24, 48}) {
			t.Errorf("%s: messages start at %v", tc.name, got)
		}
	}
}

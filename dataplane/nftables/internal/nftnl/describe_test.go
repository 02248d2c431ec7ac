package nftnl

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// TestElementAt: a refused element of a message is named alone, whether
// its op is an Elements or a knftables.Element, and whatever the order
// the elements were grouped in.
func TestElementAt(t *testing.T) {
	ops := []Op{
		{Verb: Add, Obj: &knftables.Table{}},
		{Verb: Add, Obj: &knftables.Map{Name: "m1", TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: Add, Obj: &knftables.Map{Name: "m2", TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: Add, Elems: &Elements{Set: "m1", First: 10, Values: []string{"10.0.0.1 . 80", "10.0.0.2 . 80"}}},
		{Verb: Add, Obj: &knftables.Element{Map: "m2", Key: []string{"5"}, Value: []string{"10.0.0.5 . 80"}}},
		{Verb: Add, Elems: &Elements{Set: "m1", First: 20, Values: []string{"10.0.0.3 . 80"}}},
	}
	c := &Conn{family: knftables.IPv4Family, fam: 2, table: "t", types: map[string]*setType{}}
	b := c.newBatch()
	if err := b.encode(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range b.msgs {
		for j := range m.count {
			if m.elems {
				got = append(got, opText(c.family, c.table, b.elementAt(ops, m, int(j))))
			}
		}
	}
	want := []string{
		"add element ip t m1 { 10 : 10.0.0.1 . 80 }",
		"add element ip t m1 { 11 : 10.0.0.2 . 80 }",
		"add element ip t m1 { 20 : 10.0.0.3 . 80 }",
		"add element ip t m2 { 5 : 10.0.0.5 . 80 }",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("elements named (-want +got):\n%s", d)
	}
}

// TestElementOf: the kernel's offset of a refused element, anywhere in
// it, names that element.
func TestElementOf(t *testing.T) {
	ops := []Op{
		{Verb: Add, Obj: &knftables.Table{}},
		{Verb: Add, Obj: &knftables.Map{Name: "m1", TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: Add, Elems: &Elements{Set: "m1", First: 10, Values: []string{"10.0.0.1 . 80", "10.0.0.2 . 80", "10.0.0.3 . 80"}}},
	}
	c := &Conn{family: knftables.IPv4Family, fam: 2, table: "t", types: map[string]*setType{}}
	b := c.newBatch()
	if err := b.encode(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	m := b.msgs[len(b.msgs)-1]
	msgLen := int(binary.NativeEndian.Uint32(b.w.b[m.start:]))
	// Header, table and set names and the list's header, then three
	// elements of 32 bytes each.
	var got, want []int
	for off := 0; off < msgLen; off += 4 {
		got = append(got, b.elementOf(m, off))
		j := -1
		if first := msgLen - 3*32; off >= first {
			j = (off - first) / 32
		}
		want = append(want, j)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("elements by offset (-want +got):\n%s", d)
	}
}

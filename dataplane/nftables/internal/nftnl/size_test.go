package nftnl

import (
	"context"
	"testing"

	"sigs.k8s.io/knftables"
)

// TestBatchSize: the estimate of a dataplane-shaped batch holds it, so
// that its buffer is allocated once, and is not far above it.
func TestBatchSize(t *testing.T) {
	ops := ServiceOps(3000, 10)
	var runs []Op
	for _, o := range ops {
		if e, ok := o.Obj.(*knftables.Element); ok && len(e.Map) > 4 && e.Map[:5] == "dnat-" {
			runs = append(runs, Op{Verb: Add, Elems: &Elements{Set: e.Map, First: 7, Values: e.Value}})
			continue
		}
		runs = append(runs, o)
	}
	for name, ops := range map[string][]Op{"elements": ops, "runs": runs} {
		c := &Conn{family: knftables.IPv4Family, fam: 2, table: "t", types: map[string]*setType{}}
		b := c.newBatch()
		if err := b.encode(context.Background(), ops); err != nil {
			t.Fatal(err)
		}
		size, _ := batchSize(ops, false)
		t.Logf("%s: %d bytes encoded, %d estimated", name, len(b.w.b), size)
		if got := len(b.w.b); got > size || float64(size) > 1.6*float64(got) {
			t.Errorf("%s: %d bytes encoded, %d estimated", name, got, size)
		}
	}
}

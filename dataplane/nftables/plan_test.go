package nftables

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// TestInputSizeEstimate: a sync of many operations reports its input's
// size within a few percent, from a sample; a small one exactly.
func TestInputSizeEstimate(t *testing.T) {
	for _, services := range []int{20, 3000} {
		_, st := benchBuilder(services, benchEndpoints)
		d, err := New(Config{NFT: newDiscard()})
		if err != nil {
			t.Fatal(err)
		}
		s := d.static(st)
		prog, _ := d.renderAll(st, s, &kernelTable{}, nil)
		p := d.fullPlan(prog, s, &kernelTable{}, false)
		exact := len(transaction(d.text, p.ops).String())
		got := inputSize(d.text, p.ops)
		if len(p.ops) <= sampledOps && got != exact {
			t.Errorf("%d services, %d operations: %d bytes, want exactly %d", services, len(p.ops), got, exact)
		}
		if off := math.Abs(float64(got-exact)) / float64(exact); off > 0.05 {
			t.Errorf("%d services, %d operations: %d bytes estimated, %d exact (%.1f%% off)", services, len(p.ops), got, exact, 100*off)
		}
	}
}

// TestPlanNext: transactions of at most max operations, an nftnl.Elements
// cut where it does not fit, hold the plan's operations in its order.
func TestPlanNext(t *testing.T) {
	run := func(first uint32, n int) op {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = fmt.Sprintf("10.0.0.%d . 80", int(first)+i)
		}
		return op{Verb: verbAdd, Elems: &nftnl.Elements{Set: "m", First: first, Values: vals}}
	}
	single := func(name string) op { return op{Verb: verbAdd, Obj: &knftables.Chain{Name: name}} }
	p := &plan{ops: []op{single("a"), run(10, 5), single("b"), run(20, 3), run(30, 1)}}
	var want []string
	for _, o := range p.ops {
		want = append(want, opLines(o)...)
	}
	for _, max := range []int{-1, 1, 2, 3, 4, 7, 11, 100} {
		var got []string
		var counts []int
		for start, rest := 0, []op(nil); start < len(p.ops) || rest != nil; {
			var ops []op
			ops, start, rest = p.next(start, rest, max)
			counts = append(counts, (&plan{ops: ops}).count())
			for _, o := range ops {
				got = append(got, opLines(o)...)
			}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("max %d: operations (-plan +transactions):\n%s", max, d)
		}
		for i, n := range counts {
			if max > 0 && (n > max || n < max && i < len(counts)-1) {
				t.Errorf("max %d: transactions of %v operations", max, counts)
				break
			}
		}
	}
}

// opLines is o as nft text, a line per operation.
func opLines(o op) []string {
	tx := knftables.NewFake(knftables.IPv4Family, DefaultTable).NewTransaction()
	o.AddTo(tx)
	return strings.Split(strings.TrimSpace(tx.String()), "\n")
}

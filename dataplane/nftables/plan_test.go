package nftables

import (
	"math"
	"testing"
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
		p := d.fullPlan(d.renderAll(st, s, &kernelTable{}), s, &kernelTable{}, false)
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

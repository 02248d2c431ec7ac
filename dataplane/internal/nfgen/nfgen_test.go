package nfgen

import (
	"context"
	"testing"

	"github.com/proxykit/proxykit/internal/netns"
)

// TestKernelRead: the generation moves with every nftables transaction
// in the namespace, iptables-nft's included, and only with those.
func TestKernelRead(t *testing.T) {
	netns.Require(t, "nft", "iptables-nft")
	ns := netns.New(t, "nfgen")
	read := func() uint32 {
		t.Helper()
		var g uint32
		if err := ns.Do(func() (err error) {
			g, err = Read(context.Background())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g0 := read()
	if g := read(); g != g0 {
		t.Errorf("the generation moved from %d to %d with nothing committed", g0, g)
	}
	ns.MustRun("nft", "add", "table", "ip", "nfgentest")
	g1 := read()
	if g1 == g0 {
		t.Errorf("nft add table left the generation at %d", g0)
	}
	ns.MustRun("iptables-nft-save")
	if g := read(); g != g1 {
		t.Errorf("iptables-nft-save moved the generation from %d to %d", g1, g)
	}
	ns.MustRun("iptables-nft", "-t", "nat", "-N", "NFGEN")
	if g := read(); g == g1 {
		t.Errorf("iptables-nft -N left the generation at %d", g1)
	}
}

// BenchmarkKernelRead is one read of the generation: what a canary that
// finds nothing changed costs.
func BenchmarkKernelRead(b *testing.B) {
	netns.Require(b, "nft")
	ns := netns.New(b, "nfgen")
	if err := ns.Do(func() error {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Read(context.Background()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

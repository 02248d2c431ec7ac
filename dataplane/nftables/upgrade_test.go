package nftables

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// TestUpgradeConverges: a table the previous version wrote, a chain per
// ClusterIP port choosing through a slot of a numgen-keyed endpoint map
// (testdata/earlier-shape.dump, six services with one to three endpoints),
// becomes the table this version writes: the ports move to shared chains
// and maps, and the old chains and maps go.
func TestUpgradeConverges(t *testing.T) {
	dump, err := os.ReadFile("testdata/earlier-shape.dump")
	if err != nil {
		t.Fatal(err)
	}
	b := newBuilder()
	for n := range 6 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, n%3, 1))
	}
	s := b.Build().States[0]
	fake := newFake(false)
	if err := fake.ParseDump(string(dump)); err != nil {
		t.Fatal(err)
	}
	joinKeys(fake)
	d, clk := testDataplane(t, fake)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fake.Dump(), "add map ip proxykit dnat-") {
		t.Errorf("the numgen-keyed endpoint maps are still there:\n%s", fake.Dump())
	}
	// The old chains, flushed, go once nothing can refer to them.
	clk.Step(2 * time.Second)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if n := d.Stats().Operations; n != 0 {
		t.Errorf("a resync after the upgrade sent %d operations:\n%s", n, fake.LastTransaction)
	}
}

// joinKeys gives the elements of fake, which ParseDump splits at " . ",
// the one-string keys and values the dataplane writes, so that it finds
// the elements it deletes.
func joinKeys(fake *knftables.Fake) {
	for _, m := range fake.Table.Maps {
		for _, e := range m.Elements {
			e.Key, e.Value = []string{strings.Join(e.Key, " . ")}, []string{strings.Join(e.Value, " . ")}
		}
	}
	for _, s := range fake.Table.Sets {
		for _, e := range s.Elements {
			e.Key = []string{strings.Join(e.Key, " . ")}
		}
	}
}

package nftables

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"sigs.k8s.io/knftables"
)

// TestEncodeOnly: NewEncodeOnly plans as a Dataplane on a kernel does, a
// refused batch makes the next sync a full one, and that full sync, on a
// table that reads back without rules or elements, encodes.
func TestEncodeOnly(t *testing.T) {
	b := newBuilder()
	for i := range 20 {
		b.UpdateService(nil, clusterIPService(i))
		b.UpdateEndpointSlice(nil, slice(i, 3, 1))
	}
	st := b.Build().States[0]
	ref, _ := testDataplane(t, knftables.NewFake(knftables.IPv4Family, DefaultTable))
	if err := ref.Sync(context.Background(), st); err != nil {
		t.Fatal(err)
	}

	refuse := errors.New("refused")
	var batches []int
	fail := false
	d, err := NewEncodeOnly(Config{}, func(batch []byte) error {
		if fail {
			return refuse
		}
		batches = append(batches, len(batch))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		Full       bool
		Operations int
		Batches    int
	}
	var got []step
	sync := func(s *dataplane.State) {
		t.Helper()
		batches = nil
		if err := d.Sync(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		got = append(got, step{d.Stats().Full, d.Stats().Operations, len(batches)})
	}
	sync(st)
	b.UpdateEndpointSlice(slice(3, 3, 1), slice(3, 2, 1))
	sync(b.Build().States[0])
	fail = true
	b.UpdateEndpointSlice(slice(3, 2, 1), slice(3, 3, 1))
	if err := d.Sync(context.Background(), b.Build().States[0]); !errors.Is(err, refuse) {
		t.Fatalf("Sync with the batch refused: %v, want %v", err, refuse)
	}
	fail = false
	sync(b.Build().States[0])

	want := []step{
		{Full: true, Operations: ref.Stats().Operations, Batches: 1},
		{Full: false, Operations: got[1].Operations, Batches: 1},
		{Full: true, Operations: got[2].Operations, Batches: 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("syncs (-want +got):\n%s", d)
	}
	if got[1].Operations == 0 || got[2].Operations == 0 {
		t.Errorf("an endpoint change wrote %d operations and the full sync after a failure %d, want some", got[1].Operations, got[2].Operations)
	}
}

func TestNewEncodeOnlyRefuses(t *testing.T) {
	send := func([]byte) error { return nil }
	for name, c := range map[string]struct {
		cfg  Config
		send func([]byte) error
	}{
		"NFT set":    {Config{NFT: knftables.NewFake(knftables.IPv4Family, DefaultTable)}, send},
		"no send":    {Config{}, nil},
		"bad config": {Config{Table: "kube-proxy"}, send},
	} {
		if _, err := NewEncodeOnly(c.cfg, c.send); err == nil {
			t.Errorf("%s: NewEncodeOnly succeeded", name)
		}
	}
}

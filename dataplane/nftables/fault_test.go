package nftables

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/knftables"
)

// failingNFT is a knftables.Fake whose Run fails while fail is set, as a
// kernel rejecting a transaction does: nothing of it applied.
type failingNFT struct {
	*knftables.Fake
	fail bool
}

var errInjected = errors.New("injected: Error: Could not process rule: No such file or directory")

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		return errInjected
	}
	return f.Fake.Run(ctx, tx)
}

// TestRejectedTransaction checks that a transaction nftables rejects
// leaves the table as it was, is counted, and makes the next sync a full
// one that converges.
func TestRejectedTransaction(t *testing.T) {
	fake := &failingNFT{Fake: newFake(false)}
	reg := prometheus.NewRegistry()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d, err := New(Config{NFT: fake, Registerer: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	b := newBuilder()
	for n := range 5 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 2, 1))
	}
	if err := d.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	before := dumpLines(fake.Fake)

	b.UpdateEndpointSlice(slice(1, 2, 1), slice(1, 1, 1))
	s := b.Build().States[0]
	fake.fail = true
	err = d.Sync(t.Context(), s)
	var txErr *TransactionError
	if !errors.As(err, &txErr) || !errors.Is(err, errInjected) {
		t.Fatalf("Sync with a rejected transaction: %v, want a TransactionError", err)
	}
	if diff := cmp.Diff(before, dumpLines(fake.Fake)); diff != "" {
		t.Errorf("a rejected transaction changed the table (-before +after):\n%s", diff)
	}
	failures := testutil.ToFloat64(d.metrics.partialFailures)
	if failures != 1 {
		t.Errorf("partial sync failures = %v, want 1", failures)
	}

	fake.fail = false
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); !st.Full {
		t.Errorf("the sync after a failure was not full: %+v", st)
	}
	// The shared chain of three endpoints, which the port left, goes.
	clk.Step(2 * time.Second)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake.Fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
}

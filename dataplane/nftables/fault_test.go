package nftables

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
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

// TestFailedSyncRenamesElements: a service replaced by another at the same
// cluster IP and port while a sync fails keeps its elements' values (a
// no-endpoint verdict, a shared chain of the same endpoint count), and
// the full sync after it must still rewrite their comments, which name
// the service: nothing else on those elements does.
func TestFailedSyncRenamesElements(t *testing.T) {
	fake := &failingNFT{Fake: newFake(false)}
	d, err := New(Config{NFT: fake})
	if err != nil {
		t.Fatal(err)
	}
	renamed := func(n int) *v1.Service {
		s := clusterIPService(n)
		s.Name = fmt.Sprintf("renamed%d", n)
		return s
	}
	renamedSlice := func(n, eps int) *discovery.EndpointSlice {
		s := slice(n, eps, 0)
		s.Name, s.Labels[discovery.LabelServiceName] = fmt.Sprintf("renamed%d-1", n), fmt.Sprintf("renamed%d", n)
		return s
	}
	b := newBuilder()
	b.UpdateService(nil, clusterIPService(0))
	b.UpdateService(nil, clusterIPService(1))
	b.UpdateEndpointSlice(nil, slice(1, 2, 0))
	if err := d.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	b.UpdateService(clusterIPService(0), nil)
	b.UpdateService(nil, renamed(0))
	b.UpdateService(clusterIPService(1), nil)
	b.UpdateEndpointSlice(slice(1, 2, 0), nil)
	b.UpdateService(nil, renamed(1))
	b.UpdateEndpointSlice(nil, renamedSlice(1, 2))
	s := b.Build().States[0]
	fake.fail = true
	if err := d.Sync(t.Context(), s); err == nil {
		t.Fatal("Sync with a rejected transaction succeeded")
	}
	fake.fail = false
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake.Fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
}

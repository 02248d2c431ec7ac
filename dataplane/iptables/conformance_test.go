package iptables

import (
	"context"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// fakeHarness runs the dataplane against a FakeRunner and traces packets
// through the simulated tables.
type fakeHarness struct {
	// dp is created by the first Sync, for the State's family.
	dp      *Dataplane
	fake    *xtables.FakeRunner
	nodeIPs []netip.Addr
}

func newFakeHarness(testing.TB) *fakeHarness {
	return &fakeHarness{fake: xtables.NewFakeRunner()}
}

func (h *fakeHarness) Name() string { return "iptables" }

func (h *fakeHarness) Sync(ctx context.Context, s *dataplane.State) error {
	if h.dp == nil {
		d, err := New(Config{Family: s.Family, Runner: h.fake, Logger: logr.Discard()})
		if err != nil {
			return err
		}
		h.dp = d
	}
	h.nodeIPs = s.Node.IPs
	return h.dp.Sync(ctx, s)
}

func (h *fakeHarness) Cleanup(ctx context.Context) error {
	if h.dp == nil {
		return nil
	}
	return h.dp.Cleanup(ctx)
}

func (h *fakeHarness) Disturb(ctx context.Context, d dataplanetest.Disturbance) error {
	return disturb(ctx, h.fake, d)
}

func (h *fakeHarness) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	return h.dp.Reconcile(ctx)
}

func (h *fakeHarness) KernelChanged(ctx context.Context) (bool, error) {
	return h.dp.KernelChanged(ctx)
}

func (h *fakeHarness) Trace(_ context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	return h.fake.Trace(p, h.nodeIPs), nil
}

func TestConformanceTracer(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness { return newFakeHarness(t) })
}

package nftables

import (
	"context"
	"net/netip"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// fakeHarness runs the dataplane against a knftables.Fake and traces
// packets through the fake's table.
type fakeHarness struct {
	// dp is created by the first Sync, for the State's family.
	dp      *Dataplane
	fake    *knftables.Fake
	ipv6    bool
	nodeIPs []netip.Addr
}

func (h *fakeHarness) Name() string         { return "nftables" }
func (h *fakeHarness) Mode() dataplane.Mode { return dataplane.ModeNFTables }

func (h *fakeHarness) Sync(ctx context.Context, s *dataplane.State) error {
	if h.dp == nil {
		h.ipv6 = s.Family == v1.IPv6Protocol
		h.fake = newFake(h.ipv6)
		d, err := New(Config{Family: s.Family, NFT: h.fake})
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
	if h.fake == nil {
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	return traceFake(h.fake, h.ipv6, h.nodeIPs, p)
}

func newFake(ipv6 bool) *knftables.Fake {
	if ipv6 {
		return knftables.NewFake(knftables.IPv6Family, DefaultTable)
	}
	return knftables.NewFake(knftables.IPv4Family, DefaultTable)
}

func TestConformanceTracer(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness { return &fakeHarness{} })
}

package nftables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// listingHarness programs the real nft in a namespace and traces packets
// through what "nft list table" prints back, read with ParseListing.
type listingHarness struct {
	ns      *netns.NS
	dp      *Dataplane
	family  v1.IPFamily
	nodeIPs []netip.Addr
	// read is the table as read back after the last Sync, nil until a
	// Trace reads it.
	read *Ruleset
}

func (h *listingHarness) Name() string         { return "nftables (read back)" }
func (h *listingHarness) Mode() dataplane.Mode { return dataplane.ModeNFTables }

func (h *listingHarness) Sync(ctx context.Context, s *dataplane.State) error {
	return h.ns.Do(func() error {
		if h.dp == nil {
			d, err := New(Config{Family: s.Family})
			if err != nil {
				return err
			}
			h.dp, h.family = d, s.Family
		}
		h.nodeIPs, h.read = s.Node.IPs, nil
		return h.dp.Sync(ctx, s)
	})
}

func (h *listingHarness) Cleanup(ctx context.Context) error {
	if h.dp == nil {
		return nil
	}
	h.read = nil
	return h.ns.Do(func() error { return h.dp.Cleanup(ctx) })
}

func (h *listingHarness) Trace(_ context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	if h.dp == nil {
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	if h.read == nil {
		rs, err := h.readBack()
		if err != nil || rs == nil {
			return dataplane.Verdict{Action: dataplane.NotAService}, err
		}
		h.read = rs
	}
	v, _, err := h.read.Trace(p, h.nodeIPs)
	return v, err
}

// readBack reads the table from the kernel; nil when there is none.
func (h *listingHarness) readBack() (*Ruleset, error) {
	family := "ip"
	if h.family == v1.IPv6Protocol {
		family = "ip6"
	}
	out, err := h.ns.Run("nft", "list", "table", family, DefaultTable)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, nil
		}
		return nil, err
	}
	return ParseListing([]byte(out), h.family)
}

// TestKernelRulesetTracesAsLookup: every scenario, programmed into a real
// kernel and read back from nft's listing, traces as the model says.
func TestKernelRulesetTracesAsLookup(t *testing.T) {
	netns.Require(t, "nft")
	dataplanetest.RunScenarios(t, dataplanetest.Scenarios(), func(t *testing.T) dataplanetest.Harness {
		return &listingHarness{ns: netns.New(t, "nftls")}
	})
}

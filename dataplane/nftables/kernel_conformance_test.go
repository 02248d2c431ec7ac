package nftables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// kernelHarness is a kerneltest.Harness over the nftables dataplane, in
// the nftables mode.
type kernelHarness struct {
	*kerneltest.Harness
}

func (kernelHarness) Mode() dataplane.Mode { return dataplane.ModeNFTables }

// newKernelHarness returns a harness whose dataplane runs the real nft
// in the lab's node namespace.
func newKernelHarness(t *testing.T) dataplanetest.Harness {
	var nft knftables.Interface
	return kernelHarness{kerneltest.New(t, kerneltest.Config{
		New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
			d, err := New(Config{Family: family})
			if err != nil {
				return nil, err
			}
			nft = d.nft
			return d, nil
		},
		ForgetAffinity: func() error { return forgetAffinity(context.Background(), nft) },
		Disturb: func(d dataplanetest.Disturbance) error {
			return disturb(context.Background(), nft, d)
		},
	})}
}

// forgetAffinity flushes every affinity set: the memory of ClientIP
// affinity.
func forgetAffinity(ctx context.Context, nft knftables.Interface) error {
	sets, err := nft.List(ctx, "sets")
	if err != nil {
		return err
	}
	tx := nft.NewTransaction()
	for _, s := range sets {
		if strings.HasPrefix(s, prefixAffinity) {
			tx.Flush(&knftables.Set{Name: s})
		}
	}
	if tx.NumOperations() == 0 {
		return nil
	}
	return nft.Run(ctx, tx)
}

// kernelReproducible is kerneltest.Reproducible minus the cases sent from
// the address of an endpoint on another node: in the lab every endpoint
// is behind the node, where in a cluster that endpoint's traffic would
// never reach it, and nftables masquerades hairpins of local endpoints
// only.
func kernelReproducible(s dataplanetest.Scenario, c dataplanetest.PacketCase) bool {
	if !kerneltest.Reproducible(s, c) {
		return false
	}
	for _, sl := range s.Slices {
		for _, ep := range sl.Endpoints {
			remote := ep.NodeName == nil || *ep.NodeName != dataplanetest.NodeName
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && remote && ip == c.Packet.Src {
					return false
				}
			}
		}
	}
	return true
}

// TestKernelConformance runs every scenario case a real kernel can
// reproduce through nft into a node namespace, with real TCP and UDP
// connections deciding each verdict.
func TestKernelConformance(t *testing.T) {
	netns.Require(t, "nft")
	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), kernelReproducible)
	dataplanetest.RunScenarios(t, scenarios, func(t *testing.T) dataplanetest.Harness {
		t.Parallel()
		return newKernelHarness(t)
	})
}

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
// in the node namespace of a lab with pod network n.
func newKernelHarness(t *testing.T, n kerneltest.PodNetwork) dataplanetest.Harness {
	var nft knftables.Interface
	return kernelHarness{kerneltest.New(t, kerneltest.Config{
		PodNetwork: n,
		New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
			d, err := New(Config{Family: family})
			if err != nil {
				return nil, err
			}
			// The lab's own door to the table, whatever the dataplane's
			// is: disturbances come from another program.
			kf := knftables.IPv4Family
			if family == v1.IPv6Protocol {
				kf = knftables.IPv6Family
			}
			nft, err = knftables.New(kf, DefaultTable)
			return d, err
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

// kernelReproducible is the pod network's Reproducible minus the cases
// sent from the address of an endpoint on another node: in the lab every
// endpoint is behind the node, where in a cluster that endpoint's traffic
// would never reach it, and nftables masquerades hairpins of local
// endpoints only.
func kernelReproducible(n kerneltest.PodNetwork) func(dataplanetest.Scenario, dataplanetest.PacketCase) bool {
	return func(s dataplanetest.Scenario, c dataplanetest.PacketCase) bool {
		if !n.Reproducible(s, c) {
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
}

// TestKernelConformance runs every scenario case a real kernel can
// reproduce through nft into a node namespace, with real TCP and UDP
// connections deciding each verdict, on a routed pod network (Calico's:
// pods behind veths without an address).
func TestKernelConformance(t *testing.T) {
	kernelConformance(t, kerneltest.PodNetworkRouted)
}

// TestKernelConformanceBridge is TestKernelConformance with every pod a
// port of a bridge that holds the pods' gateway (kubenet's cbr0).
func TestKernelConformanceBridge(t *testing.T) {
	kernelConformance(t, kerneltest.PodNetworkBridge)
}

func kernelConformance(t *testing.T, n kerneltest.PodNetwork) {
	netns.Require(t, "nft")
	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), kernelReproducible(n))
	dataplanetest.RunScenarios(t, scenarios, func(t *testing.T) dataplanetest.Harness {
		t.Parallel()
		return newKernelHarness(t, n)
	})
}

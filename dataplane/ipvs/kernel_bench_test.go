package ipvs

import (
	"context"
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// BenchmarkKernelSync is a first full sync and a one-endpoint change
// through a real IPVS kernel (TestKernelBenchmarksInVM runs it in the
// VM), beside the iptables dataplane on the same States in a namespace of
// its own at 1k (at 10k the VM's iptables-nft restore outlasts its
// deadline under emulation). The netlink calls of the same operations
// are counted on the fakes by TestCallsPerChange.
func BenchmarkKernelSync(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, mode := range []string{"ipvs", "iptables"} {
			if mode == "iptables" && n > 1000 {
				continue
			}
			b.Run(fmt.Sprintf("%dk/%s/full", n/1000, mode), func(b *testing.B) {
				_, st := newCluster(n, 10, v1.ProtocolTCP)
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					ns := kernelNS(b)
					b.StartTimer()
					ns.sync(b, mode, st)
				}
			})
			b.Run(fmt.Sprintf("%dk/%s/one-endpoint", n/1000, mode), func(b *testing.B) {
				c, st := newCluster(n, 10, v1.ProtocolTCP)
				ns := kernelNS(b)
				ns.sync(b, mode, st)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					b.StopTimer()
					i++
					next := c.toggleEndpoint(n/2, i)
					b.StartTimer()
					ns.sync(b, mode, next)
				}
			})
		}
	}
}

// benchNS is a network namespace with at most one dataplane of each mode,
// created on its first sync.
type benchNS struct {
	ns  *netns.NS
	dps map[string]dataplane.Dataplane
}

func kernelNS(b *testing.B) *benchNS {
	b.Helper()
	requireIPVS(b)
	return &benchNS{ns: netns.New(b, "bench"), dps: map[string]dataplane.Dataplane{}}
}

func (n *benchNS) sync(b *testing.B, mode string, st *dataplane.State) {
	if err := n.ns.Do(func() (err error) {
		d, ok := n.dps[mode]
		if !ok {
			if mode == "ipvs" {
				d, err = New(Config{})
			} else {
				d, err = iptables.New(iptables.Config{})
			}
			if err != nil {
				return err
			}
			n.dps[mode] = d
		}
		return d.Sync(context.Background(), st)
	}); err != nil {
		b.Fatal(err)
	}
}

// toggleEndpoint moves endpoint 0 of service i between two addresses, a
// new State each call.
func (c *cluster) toggleEndpoint(i, round int) *dataplane.State {
	return c.setEndpoint(i, 0, fmt.Sprintf("10.%d.%d.%d", 98+round%2, i/250, i%250+1), fmt.Sprint(round+10))
}

package ipvs

import (
	"context"
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// BenchmarkKernelSync is a first full sync and a one-endpoint change
// through a real IPVS kernel (TestKernelBenchmarksInVM runs it in the
// VM). The netlink calls of the same operations are counted on the fakes
// by TestCallsPerChange; the comparison with the other dataplanes and
// with kube-proxy's IPVS proxier is bench/'s.
func BenchmarkKernelSync(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%dk/full", n/1000), func(b *testing.B) {
			_, st := newCluster(n, 10, v1.ProtocolTCP)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				ns := kernelNS(b)
				b.StartTimer()
				ns.sync(b, st)
			}
		})
		b.Run(fmt.Sprintf("%dk/one-endpoint", n/1000), func(b *testing.B) {
			c, st := newCluster(n, 10, v1.ProtocolTCP)
			ns := kernelNS(b)
			ns.sync(b, st)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				next := c.toggleEndpoint(n/2, i)
				b.StartTimer()
				ns.sync(b, next)
			}
		})
	}
}

// benchNS is a network namespace and the dataplane its first sync
// creates there.
type benchNS struct {
	ns *netns.NS
	dp *Dataplane
}

func kernelNS(b *testing.B) *benchNS {
	b.Helper()
	requireIPVS(b)
	return &benchNS{ns: netns.New(b, "bench")}
}

func (n *benchNS) sync(b *testing.B, st *dataplane.State) {
	if err := n.ns.Do(func() (err error) {
		if n.dp == nil {
			if n.dp, err = New(Config{}); err != nil {
				return err
			}
		}
		return n.dp.Sync(context.Background(), st)
	}); err != nil {
		b.Fatal(err)
	}
}

// toggleEndpoint moves endpoint 0 of service i between two addresses, a
// new State each call.
func (c *cluster) toggleEndpoint(i, round int) *dataplane.State {
	return c.setEndpoint(i, 0, fmt.Sprintf("10.%d.%d.%d", 98+round%2, i/250, i%250+1), fmt.Sprint(round+10))
}

// BenchmarkKernelChanged is one poll of the canary on an untouched real
// kernel (TestKernelBenchmarksInVM runs it in the VM): a dump of the
// addresses, a read of /proc/net/ip_vs, a listing of each ipset and a
// read of the rules' generation.
func BenchmarkKernelChanged(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			_, st := newCluster(n, 10, v1.ProtocolTCP)
			ns := kernelNS(b)
			ns.sync(b, st)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := ns.ns.Do(func() error {
					changed, err := ns.dp.KernelChanged(ctx)
					if changed {
						return fmt.Errorf("changed")
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

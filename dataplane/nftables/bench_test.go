package nftables

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"
)

// benchCluster is a Builder and the slices it was given, to change them.
type benchCluster struct {
	b      *dataplane.Builder
	slices []*discovery.EndpointSlice
}

// benchBuilder returns a Builder holding n ClusterIP services of eps
// endpoints each (a quarter of them NodePort, one endpoint in ten on
// this node), and its State.
func benchBuilder(n, eps int) (*benchCluster, *dataplane.State) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName})
	b.UpdateNode(dataplanetest.TestNode(nil))
	c := &benchCluster{b: b}
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%10), fmt.Sprintf("svc%d", i)
		b.UpdateService(nil, dataplanetest.MakeService(ns, name, func(s *v1.Service) {
			s.Spec.ClusterIP = fmt.Sprintf("172.%d.%d.%d", 16+i/62500, i/250%250, i%250+1)
			s.Spec.Type = v1.ServiceTypeClusterIP
			var np int32
			if i%4 == 1 && i < 4*2767 {
				s.Spec.Type = v1.ServiceTypeNodePort
				np = int32(30000 + i/4)
			}
			s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, np, 8080)}
		}))
		sl := dataplanetest.MakeSlice(ns, name, 0, func(sl *discovery.EndpointSlice) {
			sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
			for k := range eps {
				node := "node2"
				if (i+k)%10 == 0 {
					node = dataplanetest.NodeName
				}
				sl.Endpoints = append(sl.Endpoints, dataplanetest.ReadyEndpoint(fmt.Sprintf("10.%d.%d.%d", 1+k, i/250%250, i%250+1), node))
			}
		})
		c.slices = append(c.slices, sl)
		b.UpdateEndpointSlice(nil, sl)
	}
	return c, b.Build().States[0]
}

// changeOneEndpoint replaces endpoint k of service i with a new address
// and returns the next State.
func changeOneEndpoint(c *benchCluster, i, k int) *dataplane.State {
	old := c.slices[i]
	upd := old.DeepCopy()
	a := upd.Endpoints[k].Addresses[0]
	if a[len(a)-1] == '0' {
		a = a[:len(a)-1] + "1"
	} else {
		a = a[:len(a)-1] + "0"
	}
	upd.Endpoints[k].Addresses = []string{a}
	c.slices[i] = upd
	c.b.UpdateEndpointSlice(old, upd)
	return c.b.Build().States[0]
}

// cpuTime is the CPU time the process used so far, all threads (the
// garbage collector's included): on a shared machine a steadier figure
// than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU seconds per iteration since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric((cpuTime()-start).Seconds()/float64(b.N), "cpu-s/op")
}

// discardNFT accepts every transaction and forgets it: the dataplane's own
// cost, without the fake's copy of the table per transaction.
type discardNFT struct {
	*knftables.Fake
}

func (discardNFT) Run(context.Context, *knftables.Transaction) error { return nil }

func newDiscard() discardNFT {
	return discardNFT{knftables.NewFake(knftables.IPv4Family, DefaultTable)}
}

type benchSize struct {
	name     string
	services int
}

var benchSizes = []benchSize{{"1k", 1000}, {"10k", 10000}, {"100k", 100000}}

const benchEndpoints = 10

// BenchmarkRender is the CPU cost of rendering the full nft -f script.
func BenchmarkRender(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, benchEndpoints)
			d, err := New(Config{NFT: newDiscard()})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var n int
			cpu := cpuTime()
			for b.Loop() {
				out, err := d.Render(st)
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(n), "bytes/op")
		})
	}
}

// BenchmarkFullSync is the CPU cost of a cold-start full sync: render,
// plan and the transaction text, without a kernel.
func BenchmarkFullSync(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, benchEndpoints)
			b.ReportAllocs()
			ops := 0
			cpu := cpuTime()
			for b.Loop() {
				d, err := New(Config{NFT: newDiscard(), MaxOperations: -1})
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Sync(context.Background(), st); err != nil {
					b.Fatal(err)
				}
				ops = d.Stats().Operations
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(ops), "nftops/op")
		})
	}
}

// BenchmarkEncodeOnly is the CPU cost of the default (netlink) path
// without a kernel (NewEncodeOnly): a cold-start full sync, and the full
// sync after a refused transaction, which rewrites every rule and element
// (the table reads back without them).
func BenchmarkEncodeOnly(b *testing.B) {
	for _, size := range benchSizes[:2] {
		b.Run("first/"+size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, benchEndpoints)
			b.ReportAllocs()
			var bytes int
			cpu := cpuTime()
			for b.Loop() {
				bytes = 0
				d, err := NewEncodeOnly(Config{}, func(batch []byte) error { bytes += len(batch); return nil })
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Sync(context.Background(), st); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(bytes), "bytes/op")
		})
		b.Run("resync/"+size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, benchEndpoints)
			refuse := errors.New("refused")
			fail := false
			d, err := NewEncodeOnly(Config{}, func([]byte) error {
				if fail {
					return refuse
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := d.Sync(ctx, st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			cpu := cpuTime()
			for b.Loop() {
				b.StopTimer()
				i++
				fail = true
				if err := d.Sync(ctx, changeOneEndpoint(c, i*7919%size.services, i%benchEndpoints)); !errors.Is(err, refuse) {
					b.Fatalf("the sync meant to fail: %v", err)
				}
				fail = false
				b.StartTimer()
				if err := d.Sync(ctx, c.b.Build().States[0]); err != nil {
					b.Fatal(err)
				}
				if !d.Stats().Full {
					b.Fatal("not a full sync")
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkOneEndpointChange is a sync after one endpoint of one service
// changed.
func BenchmarkOneEndpointChange(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, benchEndpoints)
			d, err := New(Config{NFT: newDiscard()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := d.Sync(ctx, st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			ops, i := 0, 0
			cpu := cpuTime()
			for b.Loop() {
				i++
				s := changeOneEndpoint(c, i*7919%size.services, i%benchEndpoints)
				if err := d.Sync(ctx, s); err != nil {
					b.Fatal(err)
				}
				if d.Stats().Full {
					b.Fatal("a full sync")
				}
				ops += d.Stats().Operations
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(ops)/float64(i), "nftops/op")
		})
	}
}

// BenchmarkIdleResync is a sync of a new State in which nothing changed.
func BenchmarkIdleResync(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, benchEndpoints)
			d, err := New(Config{NFT: newDiscard()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := d.Sync(ctx, st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			defer reportCPU(b, cpu)
			for b.Loop() {
				if err := d.Sync(ctx, c.b.Build().States[0]); err != nil {
					b.Fatal(err)
				}
				if n := d.Stats().Operations; n != 0 {
					b.Fatalf("%d operations", n)
				}
			}
		})
	}
}

// BenchmarkKernelFullSync is a cold-start full sync into a real kernel
// (in a namespace), against a bare nft -f of the same script
// (PROXYKIT_BENCH_KERNEL=1 for 1k and 10k services, =all for 100k too; it
// needs root and nft, and at 100k a few GB of memory).
func BenchmarkKernelFullSync(b *testing.B) {
	sizes := kernelBenchSizes(b)
	for _, size := range sizes {
		_, st := benchBuilder(size.services, benchEndpoints)
		ns := netns.New(b, "bench")
		b.Run(size.name+"/dataplane", func(b *testing.B) {
			ctx := context.Background()
			var sync, cleanup time.Duration
			for b.Loop() {
				err := ns.Do(func() error {
					d, err := New(Config{})
					if err != nil {
						return err
					}
					start := time.Now()
					if err := d.Sync(ctx, st); err != nil {
						return err
					}
					sync += time.Since(start)
					start = time.Now()
					err = d.Cleanup(ctx)
					cleanup += time.Since(start)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(sync.Seconds()/float64(b.N), "sync-s/op")
		})
		b.Run(size.name+"/nft-f", func(b *testing.B) {
			d, err := New(Config{NFT: newDiscard()})
			if err != nil {
				b.Fatal(err)
			}
			script, err := d.Render(st)
			if err != nil {
				b.Fatal(err)
			}
			path := b.TempDir() + "/ruleset.nft"
			if err := os.WriteFile(path, script, 0o644); err != nil {
				b.Fatal(err)
			}
			var load time.Duration
			for b.Loop() {
				start := time.Now()
				ns.MustRun("nft", "-f", path)
				load += time.Since(start)
				ns.MustRun("nft", "delete", "table", "ip", DefaultTable)
			}
			b.ReportMetric(load.Seconds()/float64(b.N), "sync-s/op")
		})
	}
}

// BenchmarkKernelOneEndpointChange is a sync after one endpoint of one
// service changed, into a real kernel (in a namespace,
// PROXYKIT_BENCH_KERNEL=1 for 1k and 10k services, =all for 100k too),
// after a few such syncs that let the kernel finish its work of the first
// sync. Its floor is the kernel's commit, which visits every chain of the
// table (nftnl's BenchmarkKernelCommit); it reports the table's chains.
func BenchmarkKernelOneEndpointChange(b *testing.B) {
	benchKernelChanges(b, func(c *benchCluster, services, i int) *dataplane.State {
		return changeOneEndpoint(c, i*7919%services, i%benchEndpoints)
	})
}

// BenchmarkKernelEndpointCountChange is a sync after one service gained
// an endpoint or lost the one it gained (a scale event), into a real
// kernel (PROXYKIT_BENCH_KERNEL as for BenchmarkKernelOneEndpointChange).
// Its port's service-ips element then goes to another shared chain: a
// verdict element, which makes the kernel validate the whole table (every
// element of every verdict map), where an endpoint that changes in place
// is a data element only.
func BenchmarkKernelEndpointCountChange(b *testing.B) {
	benchKernelChanges(b, func(c *benchCluster, services, i int) *dataplane.State {
		svc := i / 2 * 7919 % services
		old := c.slices[svc]
		upd := old.DeepCopy()
		if i%2 == 1 {
			upd.Endpoints = append(upd.Endpoints, dataplanetest.ReadyEndpoint("10.250.250.250", "node2"))
		} else {
			upd.Endpoints = upd.Endpoints[:len(upd.Endpoints)-1]
		}
		c.slices[svc] = upd
		c.b.UpdateEndpointSlice(old, upd)
		return c.b.Build().States[0]
	})
}

// benchKernelChanges measures the partial syncs of the States change
// makes, the i-th of services, into a real kernel, after a few that let
// the kernel finish its work of the first sync.
func benchKernelChanges(b *testing.B, change func(c *benchCluster, services, i int) *dataplane.State) {
	sizes := kernelBenchSizes(b)
	const warmup = 20
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, benchEndpoints)
			ctx := context.Background()
			_, d := syncedInNamespace(b, st)
			i := 0
			sync := func() {
				i++
				if err := d.Sync(ctx, change(c, size.services, i)); err != nil {
					b.Fatal(err)
				}
				if d.Stats().Full {
					b.Fatal("a full sync")
				}
			}
			for range warmup {
				sync()
			}
			b.ReportAllocs()
			for b.Loop() {
				sync()
			}
			b.ReportMetric(float64(d.prog.chains+len(d.prog.sharedLive)+len(baseChains)+len(staticChains)), "chains")
		})
	}
}

// BenchmarkKernelChanged is one poll of the canary on a real kernel (in a
// namespace, PROXYKIT_BENCH_KERNEL=1): "untouched" when nothing committed
// since the last poll (one read of the ruleset generation), "moved" when
// someone else added an unrelated table before each poll (the table is
// then read back and compared).
func BenchmarkKernelChanged(b *testing.B) {
	if os.Getenv("PROXYKIT_BENCH_KERNEL") == "" {
		b.Skip("set PROXYKIT_BENCH_KERNEL=1 to run kernel benchmarks")
	}
	netns.Require(b, "nft")
	for _, size := range benchSizes[:2] {
		for _, moved := range []bool{false, true} {
			name := size.name + "/untouched"
			if moved {
				name = size.name + "/moved"
			}
			b.Run(name, func(b *testing.B) {
				_, st := benchBuilder(size.services, benchEndpoints)
				ctx := context.Background()
				ns, d := syncedInNamespace(b, st)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if moved {
						b.StopTimer()
						i++
						ns.MustRun("nft", "add", "table", "ip", fmt.Sprintf("bench%d", i))
						b.StartTimer()
					}
					if err := ns.Do(func() error {
						changed, err := d.KernelChanged(ctx)
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
}

// kernelBenchSizes are the sizes a kernel benchmark runs at: 1k and 10k
// with PROXYKIT_BENCH_KERNEL=1, 100k too with =all; it skips b when the
// variable is unset or nft is missing.
func kernelBenchSizes(b *testing.B) []benchSize {
	b.Helper()
	sizes := benchSizes[:2]
	switch os.Getenv("PROXYKIT_BENCH_KERNEL") {
	case "":
		b.Skip("set PROXYKIT_BENCH_KERNEL=1 (or all) to run kernel benchmarks")
	case "all":
		sizes = benchSizes
	}
	netns.Require(b, "nft")
	return sizes
}

package iptables

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// benchCluster is a Builder and the slices it was given, to change them.
type benchCluster struct {
	b      *dataplane.Builder
	slices []*discovery.EndpointSlice
}

// benchBuilder returns a Builder holding n ClusterIP services of eps
// endpoints each (a quarter of them NodePort), and its State.
func benchBuilder(n, eps int) (*benchCluster, *dataplane.State) {
	svcs, slices := benchObjects(n, eps)
	c := &benchCluster{b: feedBuilder(svcs, slices), slices: slices}
	return c, c.b.Build().States[0]
}

// feedBuilder returns a new Builder given the test node and the objects.
func feedBuilder(svcs []*v1.Service, slices []*discovery.EndpointSlice) *dataplane.Builder {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName})
	b.UpdateNode(dataplanetest.TestNode(nil))
	for i := range svcs {
		b.UpdateService(nil, svcs[i])
		b.UpdateEndpointSlice(nil, slices[i])
	}
	return b
}

// benchObjects returns benchBuilder's Services and their EndpointSlices.
func benchObjects(n, eps int) ([]*v1.Service, []*discovery.EndpointSlice) {
	var svcs []*v1.Service
	var slices []*discovery.EndpointSlice
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%10), fmt.Sprintf("svc%d", i)
		svcs = append(svcs, dataplanetest.MakeService(ns, name, func(s *v1.Service) {
			s.Spec.ClusterIP = fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)
			s.Spec.Type = v1.ServiceTypeClusterIP
			var np int32
			if i%4 == 1 {
				s.Spec.Type = v1.ServiceTypeNodePort
				np = int32(30000 + i/4)
			}
			s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, np, 8080)}
		}))
		sl := dataplanetest.MakeSlice(ns, name, 0, func(sl *discovery.EndpointSlice) {
			sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
			for k := range eps {
				sl.Endpoints = append(sl.Endpoints, dataplanetest.ReadyEndpoint(fmt.Sprintf("10.%d.%d.%d", 1+k, i/250, i%250+1), ""))
			}
		})
		slices = append(slices, sl)
	}
	return svcs, slices
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
	upd.ResourceVersion = fmt.Sprint(len(a))
	c.slices[i] = upd
	c.b.UpdateEndpointSlice(old, upd)
	return c.b.Build().States[0]
}

// benchSize is a workload: services of endpoints each.
type benchSize struct {
	name                string
	services, endpoints int
}

// benchSizes are the workloads of the kernel benchmarks; modelSizes, of
// the compute-only ones, add a few services with many endpoints.
var (
	benchSizes = []benchSize{{"1k", 1000, benchEndpoints}, {"10k", 10000, benchEndpoints}}
	modelSizes = append(benchSizes, benchSize{"1kx100", 1000, 100})
)

const benchEndpoints = 10

// BenchmarkRender is the CPU cost of rendering a full ruleset, no kernel.
func BenchmarkRender(b *testing.B) {
	for _, size := range modelSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, size.endpoints)
			d := modelDataplane(b, nil)
			b.ReportAllocs()
			var n int
			for b.Loop() {
				out, err := d.Render(st)
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			b.ReportMetric(float64(n), "bytes/op")
		})
	}
}

// BenchmarkPartialSyncModel is the CPU cost of a one-endpoint-change sync
// against the dry-run runner, no kernel.
func BenchmarkPartialSyncModel(b *testing.B) {
	for _, size := range modelSizes {
		b.Run(size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, size.endpoints)
			d, ctx := modelDataplane(b, st), context.Background()
			b.ReportAllocs()
			bytes, i := 0, 0
			for b.Loop() {
				i++
				if err := d.Sync(ctx, changeOneEndpoint(c, i%size.services, i%size.endpoints)); err != nil {
					b.Fatal(err)
				}
				bytes += d.LastSync().Bytes
			}
			b.ReportMetric(float64(bytes)/float64(i), "bytes/op")
		})
	}
}

// benchVariant is the iptables backend of the kernel benchmarks:
// PROXYKIT_IPTABLES_VARIANT=legacy or nft, default the binaries on PATH.
func benchVariant() string { return os.Getenv("PROXYKIT_IPTABLES_VARIANT") }

// kernelBench returns a Dataplane inside a fresh namespace.
func kernelBench(b *testing.B) *nsDataplane {
	netns.Require(b, "iptables-restore", "iptables-save", "iptables")
	node := netns.New(b, "bench")
	var d *Dataplane
	if err := node.Do(func() error {
		r, err := xtables.NewExecRunner(xtables.ExecConfig{Variant: benchVariant()})
		if err != nil {
			return err
		}
		d, err = New(Config{Logger: logr.Discard(), Runner: r})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return &nsDataplane{Dataplane: d, ns: node}
}

// BenchmarkFullSync renders and restores the whole ruleset into a
// namespace, stale-chain listing and jump checks included.
func BenchmarkFullSync(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, size.endpoints)
			d := kernelBench(b)
			ctx := context.Background()
			b.ReportAllocs()
			bytes, n := 0, 0
			for b.Loop() {
				forceFull(d.Dataplane)
				if err := d.Sync(ctx, st); err != nil {
					b.Fatal(err)
				}
				bytes += d.LastSync().Bytes
				n++
			}
			b.ReportMetric(float64(bytes)/float64(n), "bytes/op")
		})
	}
}

// BenchmarkPartialSync changes one endpoint of one service per iteration
// and syncs it into the kernel.
func BenchmarkPartialSync(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, size.endpoints)
			d := kernelBench(b)
			ctx := context.Background()
			if err := d.Sync(ctx, st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			bytes, i := 0, 0
			for b.Loop() {
				i++
				if err := d.Sync(ctx, changeOneEndpoint(c, i%size.services, i%size.endpoints)); err != nil {
					b.Fatal(err)
				}
				if d.LastSync().Full {
					b.Fatal("sync was full")
				}
				bytes += d.LastSync().Bytes
			}
			b.ReportMetric(float64(bytes)/float64(i), "bytes/op")
		})
	}
}

// BenchmarkRestoreFloor is a bare iptables-restore of the same full
// ruleset: the kernel's floor under BenchmarkFullSync.
func BenchmarkRestoreFloor(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, size.endpoints)
			d := kernelBench(b)
			data, err := d.Render(st)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				bin := "iptables-restore"
				if v := benchVariant(); v != "" {
					bin = "iptables-" + v + "-restore"
				}
				cmd := d.ns.Command(bin, "-w", "5", "--noflush")
				cmd.Stdin = bytesReader(data)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
			b.ReportMetric(float64(len(data)), "bytes/op")
		})
	}
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// BenchmarkReconcileUntouched is the cost of the periodic read-back when
// nothing drifted: listing both tables from a real kernel (in a namespace)
// and comparing every owned rule. BenchmarkFullSync, the blind rewrite it
// replaces, is the figure to compare it with.
func BenchmarkReconcileUntouched(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, size.endpoints)
			d := kernelBench(b)
			ctx := context.Background()
			if err := d.Sync(ctx, st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				drift, err := d.Reconcile(ctx)
				if err != nil || !drift.Empty() {
					b.Fatal(err, drift)
				}
			}
		})
	}
}

// BenchmarkFirstSync is the first sync of a node (fresh tables, jumps
// included) through the real kernel, beside the floor: one bare restore of
// the same input (Render's) into fresh tables.
func BenchmarkFirstSync(b *testing.B) {
	netns.Require(b, "iptables-restore", "iptables-save", "iptables")
	variant := benchVariant()
	restore := "iptables-restore"
	if variant != "" {
		restore = "iptables-" + variant + "-restore"
	}
	for _, size := range benchSizes {
		_, st := benchBuilder(size.services, size.endpoints)
		b.Run(size.name+"/proxykit", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				d := kernelBench(b)
				b.StartTimer()
				if err := d.Sync(ctx, st); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/bare-restore", func(b *testing.B) {
			d := modelDataplane(b, nil)
			input, err := d.Render(st)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				ns := netns.New(b, "floor")
				b.StartTimer()
				if err := ns.Do(func() error {
					cmd := exec.Command(restore, "-w", "5", "--noflush")
					cmd.Stdin = bytes.NewReader(input)
					out, err := cmd.CombinedOutput()
					if err != nil {
						return fmt.Errorf("%v: %s", err, out)
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReconcileModel is a Reconcile of an untouched kernel, against
// a FakeRunner (whose listing costs are its own), no kernel.
func BenchmarkReconcileModel(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, size.endpoints)
			fake := xtables.NewFakeRunner()
			d, err := New(Config{Runner: fake, Logger: logr.Discard()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := d.Sync(ctx, st); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
					b.Fatal(drift, err)
				}
			}
		})
	}
}

// BenchmarkFirstSyncModel is the CPU cost of a dataplane's first sync:
// rendering everything and writing the restore input (discarded), no
// kernel.
func BenchmarkFirstSyncModel(b *testing.B) {
	for _, size := range modelSizes {
		b.Run(size.name, func(b *testing.B) {
			_, st := benchBuilder(size.services, size.endpoints)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				modelDataplane(b, st)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkFirstSyncObjects is a node's whole first sync from the
// objects, no kernel: a new Builder given every Service and EndpointSlice,
// one Build, and a first Sync into a dataplane that renders and discards.
// It is what bench/ times as the compute-only first sync.
func BenchmarkFirstSyncObjects(b *testing.B) {
	for _, size := range modelSizes {
		b.Run(size.name, func(b *testing.B) {
			svcs, slices := benchObjects(size.services, size.endpoints)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				modelDataplane(b, feedBuilder(svcs, slices).Build().States[0])
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkForcedFullModel is a full sync of a State that is mostly what
// was programmed before (a failure or a changed setting forced it), no
// kernel: the States alternate between two that differ in one endpoint.
// cpu-ms/op is the process's CPU time, which other programs on a shared
// machine do not inflate as they do wall time.
func BenchmarkForcedFullModel(b *testing.B) {
	for _, size := range modelSizes {
		b.Run(size.name, func(b *testing.B) {
			c, st := benchBuilder(size.services, size.endpoints)
			states := [2]*dataplane.State{st, changeOneEndpoint(c, size.services/2, 0)}
			d, ctx := modelDataplane(b, st), context.Background()
			b.ReportAllocs()
			cpu := cpuTime()
			i := 0
			for b.Loop() {
				i++
				forceFull(d)
				if err := d.Sync(ctx, states[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPeakRSS10k reports the process's peak resident memory after
// building 10k services × 10 endpoints and syncing them in full twice (the
// second reusing the first's renderings), compute only. Run it alone
// (-bench PeakRSS10k) so that nothing else raised the peak.
func BenchmarkPeakRSS10k(b *testing.B) {
	for b.Loop() {
		_, st := benchBuilder(10000, benchEndpoints)
		d := modelDataplane(b, nil)
		for range 2 {
			forceFull(d)
			if err := d.Sync(context.Background(), st); err != nil {
				b.Fatal(err)
			}
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.Atoi(f[1])
			b.ReportMetric(float64(kb)/1024, "peak-RSS-MB")
		}
	}
}

// modelDataplane returns a Dataplane that renders but touches nothing,
// having synced st when st is not nil.
func modelDataplane(b testing.TB, st *dataplane.State) *Dataplane {
	b.Helper()
	d, err := New(Config{Runner: discardRunner{}, Sysctl: sysctl.NewFake(nil), Logger: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	if st != nil {
		if err := d.Sync(context.Background(), st); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

// BenchmarkKernelChanged is one poll of the canary on a real kernel (in a
// namespace): "untouched" when nobody changed any rule since the last
// poll (with the nft backend one read of the ruleset generation; with
// PROXYKIT_IPTABLES_VARIANT=legacy one getsockopt per loaded table),
// "moved" when someone else committed an unrelated change before each
// poll (the canary then lists and compares the tables).
func BenchmarkKernelChanged(b *testing.B) {
	for _, size := range benchSizes {
		for _, moved := range []bool{false, true} {
			name := size.name + "/untouched"
			if moved {
				name = size.name + "/moved"
			}
			b.Run(name, func(b *testing.B) {
				_, st := benchBuilder(size.services, size.endpoints)
				d := kernelBench(b)
				ctx := context.Background()
				if err := d.Sync(ctx, st); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if moved {
						b.StopTimer()
						i++
						in := fmt.Sprintf("*filter\n:BENCH-%d - [0:0]\nCOMMIT\n", i)
						if err := d.ns.Do(func() error { return d.runner.Restore(ctx, xtables.RestoreBytes(in)) }); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					if changed, err := d.KernelChanged(ctx); err != nil || changed {
						b.Fatal(changed, err)
					}
				}
			})
		}
	}
}

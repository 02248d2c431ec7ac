package userspace

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The load generator: a server on loopback, reached directly or through
// a Dataplane serving one service whose one endpoint it is. Run with
//
//	go test -run '^$' -bench . -benchtime 2s ./dataplane/userspace
//
// and compare each "direct" result with its "proxied" one.

// benchTarget returns the address to reach the server at: its own, or
// the forwarder's of a Dataplane in front of it.
func benchTarget(b *testing.B, server net.Listener, proxied bool) netip.AddrPort {
	b.Helper()
	addr := server.Addr().(*net.TCPAddr).AddrPort()
	if !proxied {
		return addr
	}
	_, target := proxyTo(b, addr)
	return target
}

// serve runs handle on every connection to a new loopback server.
func serve(b *testing.B, handle func(net.Conn)) net.Listener {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln
}

func dialBench(b *testing.B, a netip.AddrPort) *net.TCPConn {
	b.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(a))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkTransfer sends one long stream to a server that reads it
// into a buffer: MB/s of "proxied" over those of "direct" is the
// throughput ratio.
func BenchmarkTransfer(b *testing.B) {
	const chunk = 1 << 20
	for _, proxied := range []bool{false, true} {
		b.Run(mode(proxied), func(b *testing.B) {
			server := serve(b, func(c net.Conn) {
				buf := make([]byte, 256<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
			c := dialBench(b, benchTarget(b, server, proxied))
			defer c.Close()
			buf := make([]byte, chunk)
			b.SetBytes(chunk)
			// CPU time per MiB of the whole process (sender, proxy and
			// receiver) says what the proxy costs even on a machine too
			// busy for wall-clock throughput to mean much.
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/MiB")
		})
	}
}

// BenchmarkRequestResponse sends 64-byte requests, each answered with 64
// bytes, over one connection, and reports the round trip's percentiles:
// "proxied" minus "direct" is the proxy's added latency.
func BenchmarkRequestResponse(b *testing.B) {
	for _, proxied := range []bool{false, true} {
		b.Run(mode(proxied), func(b *testing.B) {
			server := serve(b, func(c net.Conn) {
				buf := make([]byte, 64)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
			c := dialBench(b, benchTarget(b, server, proxied))
			defer c.Close()
			req, resp := make([]byte, 64), make([]byte, 64)
			var rtts []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
				rtts = append(rtts, time.Since(start))
			}
			slices.Sort(rtts)
			b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// idleConns is how many idle connections BenchmarkIdleConnections holds.
const idleConns = 10000

// loadGenEnv makes TestIdleLoadGenerator act as BenchmarkIdleConnections'
// load generator.
const loadGenEnv = "PROXYKIT_USERSPACE_LOADGEN"

// BenchmarkIdleConnections holds 10k idle connections through a
// forwarder and reports the Go heap and stacks, and the goroutines, the
// Dataplane holds per connection. The clients and their server run in a
// child process (TestIdleLoadGenerator), so that this process holds only
// the proxy's two sockets per connection. Run it with -benchtime 1x.
func BenchmarkIdleConnections(b *testing.B) {
	for b.Loop() {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestIdleLoadGenerator$")
		cmd.Env = append(os.Environ(), loadGenEnv+"=1")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		next := func() string {
			if !lines.Scan() {
				b.Fatalf("the load generator stopped: %v", lines.Err())
			}
			return lines.Text()
		}
		server, err := netip.ParseAddrPort(next())
		if err != nil {
			b.Fatal(err)
		}
		before, goroutines := heapAndStacks()
		d, target := proxyTo(b, server)
		fmt.Fprintln(stdin, target)
		if got := next(); got != "connected" {
			b.Fatalf("the load generator said %q", got)
		}
		for range 1000 {
			if active(d) == idleConns {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		after, g := heapAndStacks()
		b.ReportMetric(float64(active(d)), "conns")
		b.ReportMetric(float64(after-before)/idleConns, "B/conn")
		b.ReportMetric(float64(g-goroutines)/idleConns, "goroutines/conn")
		stdin.Close()
		_ = cmd.Wait()
		d.Cleanup(context.Background())
	}
}

// active counts the Dataplane's open flows.
func active(d *Dataplane) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.ports {
		e.state.mu.Lock()
		n += len(e.state.conns)
		e.state.mu.Unlock()
	}
	return n
}

// TestIdleLoadGenerator is BenchmarkIdleConnections' child process: it
// serves connections that send nothing, prints the server's address,
// reads the forwarder's, opens idleConns connections to it, says
// "connected" and holds them until its input ends.
func TestIdleLoadGenerator(t *testing.T) {
	if os.Getenv(loadGenEnv) == "" {
		t.Skip("only run by BenchmarkIdleConnections")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	fmt.Println(ln.Addr())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		t.Fatal("no forwarder address")
	}
	var conns []net.Conn
	for range idleConns {
		c, err := net.Dial("tcp", in.Text())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	fmt.Println("connected")
	for in.Scan() {
	}
	for _, c := range conns {
		c.Close()
	}
}

// proxyTo returns a Dataplane forwarding one service to server, and the
// address its forwarder listens on.
func proxyTo(b *testing.B, server netip.AddrPort) (*Dataplane, netip.AddrPort) {
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "bench", Name: "svc"}, Protocol: v1.ProtocolTCP}
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: v1.ProtocolTCP,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {{Addr: server, EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
		}),
	}
	d, err := New(Config{Listen: loopbackListen, Logger: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Cleanup(context.Background()) })
	if err := d.Sync(b.Context(), state); err != nil {
		b.Fatal(err)
	}
	for _, a := range d.Listeners() {
		return d, a
	}
	b.Fatal("no listener")
	return nil, netip.AddrPort{}
}

func heapAndStacks() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, runtime.NumGoroutine()
}

func mode(proxied bool) string {
	if proxied {
		return "proxied"
	}
	return "direct"
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

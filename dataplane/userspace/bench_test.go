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
	"sync"
	"syscall"
	"testing"
	"time"
)

// The load generator: a server reached directly and through a Dataplane
// serving one service whose one endpoint it is, in each benchLab
// (loopback, and veths between network namespaces as root). Run with
//
//	go test -run '^$' -bench 'Transfer|RequestResponse' ./dataplane/userspace
//
// Each benchmark alternates between the direct and the proxied path
// within one run, so that both meet the same load on a shared machine:
// "proxied/direct" and "added-*" compare them round by round.

// benchTargets returns where the client reaches the server: directly,
// and through a Dataplane.
func benchTargets(b *testing.B, lab *benchLab, server netip.AddrPort) [2]netip.AddrPort {
	_, proxied := lab.proxy(b, server)
	return [2]netip.AddrPort{server, proxied}
}

// interleave runs round on the direct and the proxied path once in each
// iteration of b's loop, the two in turn first, and returns their results
// by iteration.
func interleave[P, T any](b *testing.B, paths [2]P, round func(P) T) (direct, proxied []T) {
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			direct = append(direct, round(paths[0]))
			proxied = append(proxied, round(paths[1]))
		} else {
			proxied = append(proxied, round(paths[1]))
			direct = append(direct, round(paths[0]))
		}
	}
	return direct, proxied
}

// serve runs handle on every connection ln accepts, until ln is closed,
// and returns ln's address.
func serve(b *testing.B, ln net.Listener, handle func(net.Conn)) netip.AddrPort {
	b.Helper()
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
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// transferBlock is what BenchmarkTransfer sends per round and connection.
const transferBlock = 64 << 20

// transferSample is one block's wall-clock and CPU time.
type transferSample struct{ wall, cpu time.Duration }

func (s transferSample) mbps() float64 { return transferBlock / s.wall.Seconds() / 1e6 }

func (s transferSample) cpuPerMiB() float64 {
	return float64(s.cpu.Nanoseconds()) / 1e3 / (transferBlock >> 20)
}

// BenchmarkTransfer sends a 64 MiB block over a new connection, direct
// and proxied in turn, each acknowledged by the server once it has read
// all of it. It reports each path's median MB/s and the median of the
// rounds' proxied/direct throughput ratios: a new connection per round
// keeps one connection's luck (its CPUs, its buffers' autotuning) from
// deciding a run. The CPU time per MiB of the whole process (sender,
// proxy and receiver; only one path moves at a time) says what the proxy
// costs even on a machine too busy for wall-clock throughput to mean
// much.
func BenchmarkTransfer(b *testing.B) {
	runLabs(b, func(b *testing.B, lab *benchLab) {
		targets := benchTargets(b, lab, serve(b, lab.listen(b), sinkBlocks()))
		buf := make([]byte, 1<<20)
		b.ReportAllocs()
		direct, proxied := interleave(b, targets, func(to netip.AddrPort) transferSample {
			c := lab.dial(b, to)
			defer c.Close()
			wall, cpu := time.Now(), cpuTime()
			for range transferBlock / len(buf) {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := io.ReadFull(c, buf[:1]); err != nil {
				b.Fatal(err)
			}
			return transferSample{time.Since(wall), cpuTime() - cpu}
		})
		ratios := make([]float64, len(direct))
		for i := range ratios {
			ratios[i] = proxied[i].mbps() / direct[i].mbps()
		}
		b.ReportMetric(median(direct, transferSample.mbps), "direct-MB/s")
		b.ReportMetric(median(proxied, transferSample.mbps), "proxied-MB/s")
		b.ReportMetric(median(ratios, func(r float64) float64 { return r }), "proxied/direct")
		b.ReportMetric(median(direct, transferSample.cpuPerMiB), "direct-cpu-µs/MiB")
		b.ReportMetric(median(proxied, transferSample.cpuPerMiB), "proxied-cpu-µs/MiB")
	})
}

// sinkBlocks returns a server that reads each connection and writes a
// byte each time another transferBlock has arrived. Its connections share
// their buffers, so that the benchmark's allocations are the proxy's.
func sinkBlocks() func(net.Conn) {
	var bufs sync.Pool
	return func(c net.Conn) {
		buf, _ := bufs.Get().(*[]byte)
		if buf == nil {
			b := make([]byte, 256<<10)
			buf = &b
		}
		defer bufs.Put(buf)
		sink(c, *buf)
	}
}

// sink reads c into buf, writing a byte each time another transferBlock
// has arrived.
func sink(c net.Conn, buf []byte) {
	n := 0
	for {
		m, err := c.Read(buf)
		if err != nil {
			return
		}
		if n += m; n >= transferBlock {
			n -= transferBlock
			if _, err := c.Write(buf[:1]); err != nil {
				return
			}
		}
	}
}

// BenchmarkRequestResponse sends 64-byte requests, each answered with 64
// bytes, over one connection per path, direct and proxied in turn, and
// reports each one's round-trip percentiles and the proxy's added latency
// (proxied minus direct, per percentile).
func BenchmarkRequestResponse(b *testing.B) {
	runLabs(b, func(b *testing.B, lab *benchLab) {
		targets := benchTargets(b, lab, serve(b, lab.listen(b), echo64))
		conns := [2]*net.TCPConn{lab.dial(b, targets[0]), lab.dial(b, targets[1])}
		for _, c := range conns {
			b.Cleanup(func() { c.Close() })
		}
		req, resp := make([]byte, 64), make([]byte, 64)
		b.ReportAllocs()
		direct, proxied := interleave(b, conns, func(c *net.TCPConn) time.Duration {
			start := time.Now()
			if _, err := c.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, resp); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		})
		slices.Sort(direct)
		slices.Sort(proxied)
		for _, q := range []int{50, 99} {
			d, p := direct[len(direct)*q/100], proxied[len(proxied)*q/100]
			b.ReportMetric(float64(d.Nanoseconds()), fmt.Sprintf("direct-p%d-ns", q))
			b.ReportMetric(float64(p.Nanoseconds()), fmt.Sprintf("proxied-p%d-ns", q))
			b.ReportMetric(float64((p - d).Nanoseconds()), fmt.Sprintf("added-p%d-ns", q))
		}
	})
}

// echo64 answers each 64 bytes c sends with them.
func echo64(c net.Conn) {
	buf := make([]byte, 64)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// median returns the median of f over xs.
func median[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
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
	b.ReportAllocs()
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

func heapAndStacks() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, runtime.NumGoroutine()
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

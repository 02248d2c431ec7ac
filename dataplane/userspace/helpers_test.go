package userspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// backends stands in for a cluster's pods on loopback: each endpoint
// address gets a local server, and Dial connects there instead.
type backends struct {
	t     testing.TB
	mu    sync.Mutex
	local map[string]string // endpoint "ip:port/network" -> local address
	// failing endpoints refuse to be dialed.
	failing map[string]bool
}

func newBackends(t testing.TB) *backends {
	return &backends{t: t, local: map[string]string{}, failing: map[string]bool{}}
}

// serve starts TCP and UDP servers for endpoint ep. The TCP one writes
// "<ep>\n" and then echoes until EOF, then closes; the UDP one answers
// each datagram with "<ep> <datagram>".
func (b *backends) serve(ep string) {
	b.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s\n", ep)
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(ep+" "+string(buf[:n])), from)
		}
	}()
	b.mu.Lock()
	b.local[ep+"/tcp"] = ln.Addr().String()
	b.local[ep+"/udp"] = pc.LocalAddr().String()
	b.mu.Unlock()
}

func (b *backends) fail(ep string, fail bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing[ep] = fail
}

func (b *backends) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	b.mu.Lock()
	local, ok := b.local[addr+"/"+network]
	failing := b.failing[addr]
	b.mu.Unlock()
	if !ok || failing {
		return nil, fmt.Errorf("dial %s %s: %w", network, addr, errors.New("no such backend"))
	}
	var d net.Dialer
	return d.DialContext(ctx, network, local)
}

// cluster builds States of services with loopback backends.
type cluster struct {
	b *dataplane.Builder
}

func newCluster() *cluster { return newClusterWith(dataplane.Settings{}) }

// newClusterWith is newCluster with settings s.
func newClusterWith(s dataplane.Settings) *cluster {
	return &cluster{b: dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol},
		NodeName: dataplanetest.NodeName,
		Settings: s,
	})}
}

// service adds or replaces Service ns/name with cluster IP ip and the
// ports given as "name/PROTO/port".
func (c *cluster) service(name, ip string, mutate func(*v1.Service), ports ...string) *v1.Service {
	svc := dataplanetest.MakeService("ns", name, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = ip
		for _, p := range ports {
			f := strings.Split(p, "/")
			var n int32
			fmt.Sscan(f[2], &n)
			s.Spec.Ports = append(s.Spec.Ports, dataplanetest.ServicePort(f[0], v1.Protocol(f[1]), n, 0, 0))
		}
		if mutate != nil {
			mutate(s)
		}
	})
	c.b.UpdateService(nil, svc)
	return svc
}

// endpoints sets the one slice of Service ns/name: ready endpoints at ips,
// serving the ports given as "name/PROTO/port".
func (c *cluster) endpoints(name string, ips []string, ports ...string) {
	slice := dataplanetest.MakeSlice("ns", name, 1, func(s *discovery.EndpointSlice) {
		for _, ip := range ips {
			s.Endpoints = append(s.Endpoints, dataplanetest.ReadyEndpoint(ip, "node2"))
		}
		for _, p := range ports {
			f := strings.Split(p, "/")
			var n int32
			fmt.Sscan(f[2], &n)
			s.Ports = append(s.Ports, dataplanetest.SlicePort(f[0], v1.Protocol(f[1]), n))
		}
	})
	c.b.UpdateEndpointSlice(nil, slice)
}

func (c *cluster) build() *dataplane.State { return c.b.Build().States[0] }

// newDataplane returns a Dataplane dialing bk, cleaned up with t.
func newDataplane(t testing.TB, bk *backends, cfg Config) *Dataplane {
	t.Helper()
	cfg.Dialer = bk
	if cfg.Listen == nil {
		cfg.Listen = loopbackListen
	}
	cfg.Logger = logr.Discard()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Cleanup(context.Background()) })
	return d
}

func mustSync(t testing.TB, d *Dataplane, s *dataplane.State) {
	t.Helper()
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// listener returns where d listens for frontend ip:port/proto.
func listener(t testing.TB, d *Dataplane, addr string, proto v1.Protocol) netip.AddrPort {
	t.Helper()
	for fe, a := range d.Listeners() {
		if fe.Addr.String() == addr && fe.Protocol == proto {
			return a
		}
	}
	t.Fatalf("no listener for %s/%s", addr, proto)
	return netip.AddrPort{}
}

// greet connects to a TCP frontend listening at a and returns the endpoint
// that answered, with the open connection.
func greet(t testing.TB, a netip.AddrPort) (string, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", a, err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("read from %s: %v", a, err)
	}
	_ = c.SetDeadline(time.Time{})
	return strings.TrimSpace(line), c
}

// endpointOf connects to a, returns the endpoint that answered and closes.
func endpointOf(t testing.TB, a netip.AddrPort) string {
	t.Helper()
	ep, c := greet(t, a)
	c.Close()
	return ep
}

// eventually polls cond every 10ms, at most 500 times.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}

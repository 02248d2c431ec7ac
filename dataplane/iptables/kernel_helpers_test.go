package iptables

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// Timeouts of the kernel tests: every dial and read is bounded.
const (
	dialTimeout    = 2 * time.Second
	blockedTimeout = 700 * time.Millisecond
)

// nsDataplane runs a Dataplane inside a namespace: every call that reaches
// the kernel runs on a thread switched into it, so the commands it forks
// and the sysctls it writes are that namespace's.
type nsDataplane struct {
	*Dataplane
	ns *netns.NS
}

func newNSDataplane(t *testing.T, ns *netns.NS, cfg Config) *nsDataplane {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	var d *Dataplane
	if err := ns.Do(func() (err error) {
		if cfg.Runner == nil {
			var r *xtables.ExecRunner
			if r, err = xtables.NewExecRunner(xtables.ExecConfig{Family: cfg.Family}); err != nil {
				return err
			}
			cfg.Runner = r
		}
		d, err = New(cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return &nsDataplane{Dataplane: d, ns: ns}
}

func (d *nsDataplane) Sync(ctx context.Context, s *dataplane.State) error {
	return d.ns.Do(func() error { return d.Dataplane.Sync(ctx, s) })
}

func (d *nsDataplane) Reconcile(ctx context.Context) (drift dataplane.Drift, err error) {
	err = d.ns.Do(func() (err error) {
		drift, err = d.Dataplane.Reconcile(ctx)
		return err
	})
	return drift, err
}

func (d *nsDataplane) KernelChanged(ctx context.Context) (changed bool, err error) {
	err = d.ns.Do(func() (err error) {
		changed, err = d.Dataplane.KernelChanged(ctx)
		return err
	})
	return changed, err
}

func (d *nsDataplane) Cleanup(ctx context.Context) error {
	return d.ns.Do(func() error { return d.Dataplane.Cleanup(ctx) })
}

// serve answers every TCP connection and UDP datagram on addr (inside ns)
// with "name <client IP>", until the test ends.
func serve(t *testing.T, ns *netns.NS, name, addr string) {
	t.Helper()
	var l net.Listener
	var u net.PacketConn
	if err := ns.Do(func() (err error) {
		if l, err = net.Listen("tcp", addr); err != nil {
			return err
		}
		u, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); u.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_ = c.SetDeadline(time.Now().Add(dialTimeout))
			fmt.Fprintf(c, "%s %s\n", name, host)
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(from.String())
			_, _ = u.WriteTo([]byte(name+" "+host+"\n"), from)
		}
	}()
}

// reply is what a server answered: its name and the client address it saw.
type reply struct {
	server, client string
}

// dial connects from inside ns (from laddr when not "") to raddr and reads
// the server's answer.
func dial(ns *netns.NS, network, laddr, raddr string, timeout time.Duration) (reply, error) {
	var out reply
	err := ns.Do(func() error {
		d := net.Dialer{Timeout: timeout}
		if laddr != "" {
			ip := net.ParseIP(laddr)
			if network == "udp" {
				d.LocalAddr = &net.UDPAddr{IP: ip}
			} else {
				d.LocalAddr = &net.TCPAddr{IP: ip}
			}
		}
		c, err := d.Dial(network, raddr)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if network == "udp" {
			if _, err := c.Write([]byte("hello")); err != nil {
				return err
			}
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return fmt.Errorf("bad answer %q", line)
		}
		out = reply{f[0], f[1]}
		return nil
	})
	return out, err
}

// answers dials n times and counts the servers that answered; errors fail t.
func answers(t *testing.T, ns *netns.NS, network, laddr, raddr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		r, err := dial(ns, network, laddr, raddr, dialTimeout)
		if err != nil {
			t.Fatalf("%s %s -> %s: %v", network, laddr, raddr, err)
		}
		seen[r.server]++
	}
	return seen
}

// mustAnswer dials once and returns the reply, failing t on error.
func mustAnswer(t *testing.T, ns *netns.NS, network, laddr, raddr string) reply {
	t.Helper()
	r, err := dial(ns, network, laddr, raddr, dialTimeout)
	if err != nil {
		t.Fatalf("%s %s -> %s: %v", network, laddr, raddr, err)
	}
	return r
}

func family(v6 bool) v1.IPFamily {
	if v6 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

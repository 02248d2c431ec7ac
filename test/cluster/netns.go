package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	vnetns "github.com/vishvananda/netns"
)

// RequireKernelEnv turns the skips of Require into failures when set to 1.
const RequireKernelEnv = "PROXYKIT_REQUIRE_KERNEL"

// Require skips (or, under PROXYKIT_REQUIRE_KERNEL=1, fails) t unless the
// process is root and every named command is on PATH.
func Require(t testing.TB, commands ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, c := range append([]string{"ip"}, commands...) {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("control-plane test needs %s", strings.Join(missing, ", "))
	if os.Getenv(RequireKernelEnv) == "1" {
		t.Fatalf("%s (%s=1 forbids skipping)", msg, RequireKernelEnv)
	}
	t.Skip(msg)
}

// NS is a network namespace owned by one test.
type NS struct {
	Name string
}

// NewNS creates a namespace named after prefix plus a random suffix, brings
// its loopback up, and deletes it (killing what still runs in it) when the
// test ends.
func NewNS(t testing.TB, prefix string) *NS {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("pkc-%s-%s", prefix, hex.EncodeToString(b[:]))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	ns := &NS{Name: name}
	t.Cleanup(func() {
		if pids, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			for _, pid := range strings.Fields(string(pids)) {
				_ = exec.Command("kill", "-9", pid).Run()
			}
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Command returns cmd prepared to run inside the namespace. ip netns exec
// execs the command itself, so the process's PID is the command's.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(name string, args ...string) (string, error) {
	var buf bytes.Buffer
	cmd := n.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return buf.String(), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, buf.String())
	}
	return buf.String(), nil
}

// MustRun is Run failing t on error.
func (n *NS) MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := n.Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Dial opens a connection from inside the namespace: a socket stays in the
// namespace it was created in, so the test process can talk to servers on
// the namespace's loopback.
func (n *NS) Dial(network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.do(func() error {
		var err error
		conn, err = net.Dial(network, addr)
		return err
	})
	return conn, err
}

// do runs fn on an OS thread switched into the namespace. The thread is
// switched back afterwards and only left locked (and so discarded) if that
// fails.
func (n *NS) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		h, err := vnetns.GetFromName(n.Name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open netns %s: %w", n.Name, err)
			return
		}
		defer h.Close()
		if err := vnetns.Set(h); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		defer func() {
			if vnetns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
		}()
		errc <- fn()
	}()
	return <-errc
}

// Veth links a and b with a veth pair named aIf and bIf, assigns each side
// its addresses (CIDR notation) and brings both up.
func Veth(t testing.TB, a *NS, aIf string, aAddrs []string, b *NS, bIf string, bAddrs []string) {
	t.Helper()
	a.MustRun(t, "ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.Name)
	for _, side := range []struct {
		ns    *NS
		ifc   string
		addrs []string
	}{{a, aIf, aAddrs}, {b, bIf, bAddrs}} {
		for _, addr := range side.addrs {
			args := []string{"addr", "add", addr, "dev", side.ifc}
			if strings.Contains(addr, ":") {
				args = []string{"-6", "addr", "add", addr, "dev", side.ifc, "nodad"}
			}
			side.ns.MustRun(t, "ip", args...)
		}
		side.ns.MustRun(t, "ip", "link", "set", side.ifc, "up")
	}
}

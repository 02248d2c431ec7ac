package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	vnetns "github.com/vishvananda/netns"
)

// RequireKernelEnv is the environment variable that turns skips into
// failures.
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
	msg := fmt.Sprintf("kernel test needs %s", strings.Join(missing, ", "))
	if os.Getenv(RequireKernelEnv) == "1" {
		t.Fatalf("%s (%s=1 forbids skipping)", msg, RequireKernelEnv)
	}
	t.Skip(msg)
}

// NS is a network namespace owned by one test.
type NS struct {
	Name string
	t    testing.TB
}

// New creates a namespace named after prefix plus a random suffix, brings
// its loopback up, and deletes it (killing what still runs in it) when the
// test ends. It fails t on error.
func New(t testing.TB, prefix string) *NS {
	t.Helper()
	ns, err := Create(t, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Create is New returning its error instead of failing t, for harnesses
// that make namespaces lazily from a goroutine other than the test's (a
// subtest's), where failing the parent test is not allowed.
func Create(t testing.TB, prefix string) (*NS, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("pk-%s-%s", prefix, hex.EncodeToString(b[:]))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, out)
	}
	ns := &NS{Name: name, t: t}
	t.Cleanup(func() {
		if pids, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			self := strconv.Itoa(os.Getpid())
			for _, pid := range strings.Fields(string(pids)) {
				// ip netns pids goes by a process's main thread, so it
				// lists the test binary itself while a goroutine the
				// test left behind runs a Do there on that thread:
				// killing it would end every test in the binary.
				if pid != self {
					_ = exec.Command("kill", "-9", pid).Run()
				}
			}
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	return ns, nil
}

// Command returns cmd prepared to run inside the namespace.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(name string, args ...string) (string, error) {
	var buf bytes.Buffer
	cmd := n.Command(name, args...)
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, buf.String())
	}
	return buf.String(), err
}

// MustRun is Run that fails the test on error.
func (n *NS) MustRun(name string, args ...string) string {
	n.t.Helper()
	out, err := n.Run(name, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// Do runs fn on an OS thread switched into the namespace, for code that
// talks netlink or execs binaries itself (a child forked from that thread
// starts in the namespace). The thread is switched back afterwards; only if
// that fails is it left locked, so that it is discarded with the goroutine.
// Relying on the discard alone is not enough: when the goroutine happens to
// run on the process's main thread, the runtime parks that thread instead of
// ending it, and the whole process then counts as inside the namespace (its
// cleanup spares the test binary, but tools that go by the main thread,
// such as ip netns pids, see it there).
func (n *NS) Do(fn func() error) error {
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

// Veth creates a veth pair between a and b, named aIf and bIf, assigns each
// side its addresses (CIDR notation, IPv4 or IPv6) and brings both up.
func Veth(t testing.TB, a *NS, aIf string, aAddrs []string, b *NS, bIf string, bAddrs []string) {
	t.Helper()
	a.MustRun("ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.Name)
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
			side.ns.MustRun("ip", args...)
		}
		side.ns.MustRun("ip", "link", "set", side.ifc, "up")
	}
}

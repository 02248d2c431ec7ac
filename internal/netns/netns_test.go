package netns

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestVethPing(t *testing.T) {
	Require(t, "ping")
	a := New(t, "a")
	b := New(t, "b")
	Veth(t, a, "va", []string{"10.200.0.1/24", "fd00:200::1/64"}, b, "vb", []string{"10.200.0.2/24", "fd00:200::2/64"})
	a.MustRun("ping", "-c", "1", "-W", "2", "10.200.0.2")
	a.MustRun("ping", "-6", "-c", "1", "-W", "2", "fd00:200::2")
	out := b.MustRun("ip", "-o", "addr", "show", "dev", "vb")
	if !strings.Contains(out, "10.200.0.2/24") {
		t.Errorf("vb addresses = %q, want 10.200.0.2/24", out)
	}
	if err := a.Do(func() error {
		_, err := a.Run("true")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCleanupSparesTheTestBinary: removing a namespace while a Do the
// test left behind still runs in it, often on the process's main thread
// (by which ip netns pids lists a process), kills nothing of the test
// binary's own: before, it killed the binary and every test in it.
func TestCleanupSparesTheTestBinary(t *testing.T) {
	Require(t)
	var wg sync.WaitGroup
	for range 10 {
		t.Run("left behind", func(t *testing.T) {
			ns := New(t, "spare")
			for range 8 {
				wg.Go(func() { _ = ns.Do(func() error { time.Sleep(300 * time.Millisecond); return nil }) })
			}
		})
	}
	wg.Wait()
}

func TestListeningPorts(t *testing.T) {
	Require(t, "ip")
	ns := New(t, "ports")
	var want [2][]uint16
	if err := ns.Do(func() error {
		ln, err := net.Listen("tcp", "[::]:0")
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		t.Cleanup(func() { pc.Close() })
		// A connected UDP socket listens on nothing.
		c, err := net.Dial("udp4", "127.0.0.1:9")
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		want = [2][]uint16{{uint16(ln.Addr().(*net.TCPAddr).Port)}, {uint16(pc.LocalAddr().(*net.UDPAddr).Port)}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tcp, udp, err := ns.ListeningPorts()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, [2][]uint16{tcp, udp}); diff != "" {
		t.Errorf("ListeningPorts (-want +got):\n%s", diff)
	}
}

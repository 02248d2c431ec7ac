package netns

import (
	"strings"
	"sync"
	"testing"
	"time"
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

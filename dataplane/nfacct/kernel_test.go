package nfacct

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// dialIn dials a Client inside ns, skipping t on a kernel without
// nfnetlink_acct: a missing kernel feature is a reason to skip even under
// PROXYKIT_REQUIRE_KERNEL=1, as for IPVS outside the VM.
func dialIn(t *testing.T, ns *netns.NS) *Client {
	t.Helper()
	var c *Client
	err := ns.Do(func() (err error) {
		if c, err = Dial(); err != nil {
			return err
		}
		_, err = c.Get(context.Background(), "proxykit-probe")
		if errors.Is(err, ErrNotExist) {
			err = nil
		}
		return err
	})
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("kernel without nfnetlink_acct: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestKernelCounter: a counter Ensure made counts what a rule matches, in
// the namespace the Client was dialled in, read from any thread; a second
// Ensure keeps its totals.
func TestKernelCounter(t *testing.T) {
	netns.Require(t, "iptables")
	ctx := context.Background()
	ns := netns.New(t, "nfacct")
	c := dialIn(t, ns)
	const name = "proxykit_test_pkts"
	if _, err := c.Get(ctx, name); !errors.Is(err, ErrNotExist) {
		t.Fatalf("Get before Ensure: %v, want ErrNotExist", err)
	}
	if err := c.Ensure(ctx, name); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("iptables", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", "9", "-m", "nfacct", "--nfacct-name", name)
	const sent = 3
	if err := ns.Do(func() error {
		// Unconnected, so that the port unreachable answers fail no write.
		conn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer conn.Close()
		to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
		for range sent {
			if _, err := conn.WriteTo([]byte("x"), to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Read outside ns.Do: the socket stays in the namespace it was made in.
	got, err := c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// Each datagram is 28 bytes of headers plus one of payload.
	want := Counter{Name: name, Packets: sent, Bytes: sent * 29}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counter (-want +got):\n%s", diff)
	}
	if err := c.Ensure(ctx, name); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if again, err := c.Get(ctx, name); err != nil || again != got {
		t.Errorf("after a second Ensure: %+v, %v; want %+v", again, err, got)
	}
}
